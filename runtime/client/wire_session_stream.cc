#include "runtime/client/wire_session_stream.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "runtime/coordination/proto_convert.h"
#include "runtime/coordination/wire_format.h"

namespace phalanx::client {

namespace pb = ::phalanx::coord::v1;

namespace {

constexpr absl::Duration kRedialInterval = absl::Milliseconds(25);

// Milliseconds left until `deadline` for poll(), at least 0.
int PollMillis(absl::Time deadline) {
  return static_cast<int>(
      std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()) + 1));
}

// Splits "host:port" or "[v6]:port".
bool SplitAddress(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return !host->empty();
}

// A connected, blocking TCP socket to `address`, or Unavailable.
absl::StatusOr<int> Dial(const std::string& address, absl::Time deadline) {
  std::string host, port;
  if (!SplitAddress(address, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordinator address '", address, "' is not host:port"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  // An IP address (what the operator injects) needs no resolver.
  in6_addr numeric;
  if (inet_pton(AF_INET, host.c_str(), &numeric) == 1 ||
      inet_pton(AF_INET6, host.c_str(), &numeric) == 1) {
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  }
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve coordinator '", host, "': ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    const int s = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int rc = connect(s, a->ai_addr, a->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      pollfd p{s, POLLOUT, 0};
      rc = poll(&p, 1, PollMillis(deadline)) == 1 ? 0 : -1;
      int error = rc == 0 ? 0 : ETIMEDOUT;
      socklen_t length = sizeof(error);
      if (rc == 0) getsockopt(s, SOL_SOCKET, SO_ERROR, &error, &length);
      if (error != 0) {
        rc = -1;
        errno = error;
      }
    }
    if (rc < 0) {
      last_error = std::strerror(errno);
      close(s);
      continue;
    }
    fd = s;
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the coordinator at ", address, ": ", last_error));
  }
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const timeval send_timeout{absl::ToInt64Seconds(WireSessionStream::kSendTimeout), 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  return fd;
}

bool SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(n);
  }
  return true;
}

absl::Status FromWire(const pb::WireStatus& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.code()), status.message());
}

}  // namespace

absl::StatusOr<WireSessionStream::Opened> WireSessionStream::Open(
    const std::string& address, const std::string& token, const pb::RegisterRequest& request,
    absl::Duration timeout, Sink& sink, bool open_at_once,
    absl::FunctionRef<bool(absl::Duration)> pause) {
  const absl::Time deadline = absl::Now() + timeout;
  // Like gRPC's wait-for-ready: a coordinator that is not listening yet (restarting, or its pod
  // still starting) is dialled again every 25 ms until the deadline, so a task re-registers the
  // moment it is back instead of after its back-off: peers' calls in between (alive_tasks in a
  // recovery) would find the task unregistered.
  absl::StatusOr<int> fd = Dial(address, deadline);
  while (absl::IsUnavailable(fd.status()) && absl::Now() + kRedialInterval < deadline) {
    if (pause(kRedialInterval)) return fd.status();  // the client is stopping
    fd = Dial(address, deadline);
  }
  if (!fd.ok()) return fd.status();
  auto fail = [&](absl::Status status) {
    close(*fd);
    return status;
  };
  pb::WireHello hello;
  hello.set_authorization("Bearer " + token);
  *hello.mutable_register_() = request;
  std::string out(coord::kWireMagicView);
  coord::AppendFrame(hello, out);
  if (open_at_once) {
    pb::SessionRequest open;
    *open.mutable_open() = request.task();
    coord::AppendFrame(open, out);
  }
  if (!SendAll(*fd, out)) {
    return fail(absl::UnavailableError(
        absl::StrCat("session wire to ", address, ": ", std::strerror(errno))));
  }
  // The answer: the magic, then one frame. Bounded by the deadline.
  std::string in;
  while (true) {
    if (!in.empty()) {
      const size_t n = std::min(in.size(), coord::kWireMagicView.size());
      if (in.compare(0, n, coord::kWireMagicView.substr(0, n)) != 0) {
        return fail(absl::FailedPreconditionError(
            absl::StrCat("the coordinator at ", address, " does not speak the session wire")));
      }
    }
    std::string_view payload;
    size_t consumed = 0;
    if (in.size() >= coord::kWireMagicView.size()) {
      const coord::FrameCut cut =
          coord::CutFrame(std::string_view(in).substr(coord::kWireMagicView.size()), kMaxFrameBytes,
                          &payload, &consumed);
      if (cut == coord::FrameCut::kTooBig) {
        return fail(absl::UnavailableError("session wire: oversized answer to the hello"));
      }
      if (cut == coord::FrameCut::kFrame) break;
    }
    pollfd p{*fd, POLLIN, 0};
    const int ready = poll(&p, 1, PollMillis(deadline));
    if (ready == 0) {
      return fail(absl::UnavailableError(absl::StrCat("the coordinator at ", address,
                                                      " did not answer within ",
                                                      absl::FormatDuration(timeout))));
    }
    char buffer[4096];
    const ssize_t n = ready < 0 ? -1 : recv(*fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return fail(absl::UnavailableError(
          absl::StrCat("the coordinator at ", address, " closed the connection before answering")));
    }
    in.append(buffer, n);
  }
  pb::WireServerFrame answer;
  std::string_view rest = std::string_view(in).substr(coord::kWireMagicView.size());
  std::string_view payload;
  size_t consumed = 0;
  coord::CutFrame(rest, kMaxFrameBytes, &payload, &consumed);
  if (!answer.ParseFromArray(payload.data(), payload.size())) {
    return fail(absl::UnavailableError("session wire: malformed answer to the hello"));
  }
  if (answer.has_end()) return fail(FromWire(answer.end()));
  if (!answer.has_registered()) {
    return fail(absl::UnavailableError("session wire: the hello was not answered"));
  }
  Opened opened;
  opened.registered = std::move(*answer.mutable_registered());
  std::string unread(rest.substr(consumed));
  // With `open` sent at once its answer follows right behind: wait for it here (within the
  // deadline) so that Start() hands it over without the reader thread.
  std::string_view next;
  size_t next_size = 0;
  while (open_at_once &&
         coord::CutFrame(unread, kMaxFrameBytes, &next, &next_size) == coord::FrameCut::kNeedMore) {
    pollfd p{*fd, POLLIN, 0};
    if (poll(&p, 1, PollMillis(deadline)) != 1) break;
    char buffer[4096];
    const ssize_t n = recv(*fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the reader thread meets the end and reports it
    unread.append(buffer, n);
  }
  opened.stream.reset(
      new WireSessionStream(*fd, request.task(), open_at_once, std::move(unread), sink));
  return opened;
}

WireSessionStream::~WireSessionStream() {
  Cancel();
  if (reader_.joinable()) reader_.join();
  close(fd_);
}

void WireSessionStream::Start() {
  if (!open_sent_) {
    pb::SessionRequest open;
    *open.mutable_open() = task_;
    Send(open);
  }
  // Events that came with the answer to the hello (the `opened` of an `open` sent with it) are
  // handed over here, on the caller's thread, before the reader thread exists: the caller does
  // not wait for that thread to be scheduled to learn it is connected.
  size_t at = 0;
  while (true) {
    std::string_view payload;
    size_t consumed = 0;
    if (coord::CutFrame(std::string_view(unread_).substr(at), kMaxFrameBytes, &payload,
                        &consumed) != coord::FrameCut::kFrame) {
      break;
    }
    pb::WireServerFrame frame;
    if (!frame.ParseFromArray(payload.data(), payload.size()) || !frame.has_event()) break;
    at += consumed;
    if (std::optional<coord::SessionEvent> event = coord::FromProto(frame.event())) {
      sink_.OnSessionEvent(std::move(*event));
    }
  }
  unread_.erase(0, at);
  reader_ = std::thread([this] { ReadLoop(); });
}

void WireSessionStream::SendHeartbeat(int64_t sent_unix_micros) {
  pb::SessionRequest request;
  request.mutable_heartbeat()->set_sent_unix_micros(sent_unix_micros);
  Send(request);
}

void WireSessionStream::SendCall(pb::SessionCall call) {
  pb::SessionRequest request;
  *request.mutable_call() = std::move(call);
  Send(request);
}

void WireSessionStream::Send(const pb::SessionRequest& request) {
  std::string frame;
  coord::AppendFrame(request, frame);
  absl::MutexLock lock(&write_mu_);
  if (!SendAll(fd_, frame)) {
    // Broken, or no room for kSendTimeout (a coordinator that stopped reading): end the
    // stream; the reader reports it and the pending calls fail Unavailable.
    shutdown(fd_, SHUT_RDWR);
  }
}

void WireSessionStream::Cancel() {
  cancelled_ = true;
  shutdown(fd_, SHUT_RDWR);
}

void WireSessionStream::ReadLoop() {
  absl::Status status = ReadUntilEnd();
  if (cancelled_ && !absl::IsCancelled(status)) status = absl::CancelledError("session cancelled");
  sink_.OnSessionDone(std::move(status));
  done_.Notify();
}

absl::Status WireSessionStream::ReadUntilEnd() {
  std::string in = std::move(unread_);
  size_t at = 0;
  char buffer[64 << 10];
  while (true) {
    std::string_view payload;
    size_t consumed = 0;
    const coord::FrameCut cut =
        coord::CutFrame(std::string_view(in).substr(at), kMaxFrameBytes, &payload, &consumed);
    if (cut == coord::FrameCut::kTooBig) {
      return absl::UnavailableError("session wire: a frame from the coordinator is too big");
    }
    if (cut == coord::FrameCut::kFrame) {
      at += consumed;
      pb::WireServerFrame frame;
      if (!frame.ParseFromArray(payload.data(), payload.size())) {
        return absl::UnavailableError("session wire: malformed frame from the coordinator");
      }
      if (frame.has_end()) return FromWire(frame.end());
      if (frame.has_event()) {
        if (std::optional<coord::SessionEvent> event = coord::FromProto(frame.event())) {
          sink_.OnSessionEvent(std::move(*event));
        }
      }
      continue;
    }
    in.erase(0, at);
    at = 0;
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return absl::UnavailableError("the coordinator closed the session connection");
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat("session connection: ", std::strerror(errno)));
    }
    in.append(buffer, n);
  }
}

}  // namespace phalanx::client
