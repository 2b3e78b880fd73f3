#include "runtime/coordination/wire_server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/log.h"
#include "runtime/coordination/proto_convert.h"
#include "runtime/coordination/session_outbox.h"
#include "runtime/coordination/token_auth.h"
#include "runtime/coordination/wire_format.h"

namespace phalanx::coord {

namespace {

constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP;

pb::WireServerFrame EndFrame(const absl::Status& status) {
  pb::WireServerFrame frame;
  frame.mutable_end()->set_code(static_cast<int>(status.code()));
  frame.mutable_end()->set_message(std::string(status.message()));
  return frame;
}

}  // namespace

// One wire connection. The read side (in_, stage_, session_) belongs to the loop thread; the
// write side is shared under mu_ by every thread that produces an event for it.
class WireSessionServer::Connection final : public SessionOutbox::Listener {
 public:
  enum class Stage { kMagic, kHello, kSession, kEnding };

  Connection(uint64_t id, int fd, std::string peer, int epoll_fd, size_t max_unsent)
      : id_(id), fd_(fd), peer_(std::move(peer)), epoll_fd_(epoll_fd), max_unsent_(max_unsent) {}

  uint64_t id() const { return id_; }
  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }

  // Loop thread only.
  std::string in_;
  Stage stage_ = Stage::kMagic;
  auth::Principal principal_;
  std::optional<RpcHandler::Session> session_;
  const std::shared_ptr<SessionOutbox> outbox_ = std::make_shared<SessionOutbox>();

  // Queues `bytes` and sends what the socket takes now; with `last`, the connection's write
  // side is shut once everything queued has gone.
  void Write(std::string_view bytes, bool last) {
    absl::MutexLock lock(&mu_);
    if (closed_ || shut_) return;
    out_.append(bytes);
    if (last) ending_ = true;
    SendLocked();
  }
  void Send(const pb::WireServerFrame& frame, bool last) {
    std::string bytes;
    AppendFrame(frame, bytes);
    Write(bytes, last);
  }
  // The socket has room again (loop thread).
  void Flush() {
    absl::MutexLock lock(&mu_);
    if (!closed_) SendLocked();
  }
  // Shuts the socket both ways; the loop then sees its end and closes it.
  void Drop() {
    absl::MutexLock lock(&mu_);
    if (!closed_) Shut();
  }
  // No write touches the descriptor after this returns.
  void MarkClosed() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

  // SessionOutbox::Listener: runs on the thread that produced the events (calls to it are
  // serialised by the outbox, so events leave in the order they were queued).
  void OnOutboxReady() override {
    std::string frames;
    while (std::optional<SessionEvent> event = outbox_->Pop()) {
      pb::WireServerFrame frame;
      *frame.mutable_event() = ToProto(*event);
      AppendFrame(frame, frames);
    }
    std::optional<absl::Status> final_status = outbox_->FinalStatus();
    if (final_status.has_value()) AppendFrame(EndFrame(*final_status), frames);
    if (!frames.empty()) Write(frames, final_status.has_value());
  }

 private:
  void SendLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (sent_ < out_.size()) {
      const ssize_t n =
          send(fd_, out_.data() + sent_, out_.size() - sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent_ += n;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (out_.size() - sent_ > max_unsent_) {
          // The task stopped reading: drop it rather than grow without bound.
          PHX_LOG(WARNING) << "session wire " << peer_ << ": more than " << max_unsent_
                           << " bytes unread by the task; disconnecting it";
          Shut();
          return;
        }
        Watch(EPOLLOUT);
        return;
      }
      Shut();  // a broken connection: the loop sees the hang-up and closes it
      return;
    }
    out_.clear();
    sent_ = 0;
    Watch(0);
    if (ending_) {
      // The `end` frame is out: the task reads it and closes; a broken task's reset ends it too.
      shutdown(fd_, SHUT_WR);
      shut_ = true;
    }
  }
  void Shut() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    shutdown(fd_, SHUT_RDWR);
    shut_ = true;
    out_.clear();
    sent_ = 0;
  }
  void Watch(uint32_t extra) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (extra == watching_out_) return;
    watching_out_ = extra;
    epoll_event event{};
    event.events = kReadEvents | extra;
    event.data.u64 = id_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd_, &event);
  }

  const uint64_t id_;
  const int fd_;
  const std::string peer_;
  const int epoll_fd_;
  const size_t max_unsent_;

  absl::Mutex mu_;
  std::string out_ ABSL_GUARDED_BY(mu_);
  size_t sent_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of out_ already sent
  uint32_t watching_out_ ABSL_GUARDED_BY(mu_) = 0;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

WireSessionServer::WireSessionServer(Options options, RpcHandler& handler,
                                     CoordinatorMetrics& metrics, base::Clock& clock,
                                     Authenticated authenticated)
    : options_(std::move(options)),
      handler_(handler),
      metrics_(metrics),
      clock_(clock),
      authenticated_(std::move(authenticated)) {}

WireSessionServer::~WireSessionServer() {
  Stop();
  for (int fd : {epoll_fd_, wake_fd_}) {
    if (fd >= 0) close(fd);
  }
}

absl::Status WireSessionServer::Start() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("session wire: epoll: ", std::strerror(errno)));
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = 0;  // connection ids start at 1
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &event);
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void WireSessionServer::Adopt(int fd, std::string peer) {
  static std::atomic<uint64_t> next_id{1};
  auto connection = std::make_shared<Connection>(next_id++, fd, std::move(peer), epoll_fd_,
                                                 options_.max_unsent_bytes);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      close(fd);
      return;
    }
    connections_[connection->id()] = connection;
  }
  epoll_event event{};
  event.events = kReadEvents;
  event.data.u64 = connection->id();
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event);
}

void WireSessionServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  std::vector<std::shared_ptr<Connection>> left;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, connection] : connections_) left.push_back(connection);
  }
  for (auto& connection : left) {
    Close(connection, absl::UnavailableError("the coordinator is shutting down"));
  }
}

void WireSessionServer::Loop() {
  std::vector<epoll_event> events(128);
  while (true) {
    // Bounded so a missed wake-up costs at most a second.
    const int n = epoll_wait(epoll_fd_, events.data(), events.size(), 1000);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == 0) continue;
      std::shared_ptr<Connection> connection;
      {
        absl::MutexLock lock(&mu_);
        auto it = connections_.find(id);
        if (it == connections_.end()) continue;  // closed earlier in this batch
        connection = it->second;
      }
      if (events[i].events & EPOLLOUT) connection->Flush();
      if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) Readable(connection);
    }
  }
}

void WireSessionServer::Readable(const std::shared_ptr<Connection>& c) {
  char buffer[64 << 10];
  // Set when the connection has ended: the task is gone (the crash signal). What it sent before
  // is handled first, as gRPC delivers a stream's messages before its end.
  std::optional<absl::Status> ended;
  while (!ended.has_value()) {
    const ssize_t n = read(c->fd(), buffer, sizeof(buffer));
    if (n > 0) {
      c->in_.append(buffer, n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    ended =
        absl::UnavailableError(n == 0 ? "the task closed its session connection"
                                      : absl::StrCat("session connection: ", std::strerror(errno)));
  }
  HandleFrames(c);
  if (ended.has_value()) Close(c, *ended);
}

void WireSessionServer::HandleFrames(const std::shared_ptr<Connection>& c) {
  size_t at = 0;
  auto end_with = [&](const absl::Status& status) {
    c->stage_ = Connection::Stage::kEnding;
    c->Send(EndFrame(status), /*last=*/true);
  };
  while (c->stage_ != Connection::Stage::kEnding) {
    const std::string_view rest = std::string_view(c->in_).substr(at);
    if (c->stage_ == Connection::Stage::kMagic) {
      if (rest.size() < kWireMagicView.size()) break;
      if (rest.substr(0, kWireMagicView.size()) != kWireMagicView) {
        // Not the wire after all: no frame can be sent to it; drop it.
        c->stage_ = Connection::Stage::kEnding;
        c->Drop();
        break;
      }
      at += kWireMagicView.size();
      c->Write(kWireMagicView, false);
      c->stage_ = Connection::Stage::kHello;
      continue;
    }
    std::string_view payload;
    size_t consumed = 0;
    const FrameCut cut = CutFrame(rest, options_.max_frame_bytes, &payload, &consumed);
    if (cut == FrameCut::kNeedMore) break;
    if (cut == FrameCut::kTooBig) {
      end_with(absl::InvalidArgumentError(absl::StrCat("a session wire frame over the limit of ",
                                                       options_.max_frame_bytes, " bytes")));
      break;
    }
    at += consumed;
    if (c->stage_ == Connection::Stage::kHello) {
      pb::WireHello hello;
      if (!hello.ParseFromArray(payload.data(), payload.size())) {
        end_with(absl::InvalidArgumentError("malformed session wire hello"));
        break;
      }
      absl::string_view bearer = hello.authorization();
      absl::StatusOr<auth::Principal> principal =
          absl::ConsumePrefix(&bearer, "Bearer ")
              ? auth::Authenticate(options_.token, bearer)
              : absl::UnauthenticatedError("the hello's authorization is not 'Bearer <token>'");
      absl::Status allowed =
          principal.ok() ? Authorize(*principal, ForTask(hello.register_().task().task_id()))
                         : principal.status();
      if (!allowed.ok()) {
        metrics_.AuthFailure();
        end_with(allowed);
        break;
      }
      c->principal_ = *principal;
      authenticated_(c->peer());
      const absl::Time start = clock_.Now();
      pb::WireServerFrame frame;
      absl::Status registered = handler_.Register(hello.register_(), frame.mutable_registered());
      metrics_.Rpc("Register", registered.code(), clock_.Now() - start);
      if (!registered.ok()) {
        end_with(registered);
        break;
      }
      c->Send(frame, false);
      c->stage_ = Connection::Stage::kSession;
      continue;
    }
    pb::SessionRequest request;
    if (!request.ParseFromArray(payload.data(), payload.size())) {
      end_with(absl::InvalidArgumentError("malformed session message"));
      break;
    }
    if (!c->session_.has_value()) {
      if (request.kind_case() != pb::SessionRequest::kOpen) {
        end_with(absl::InvalidArgumentError("the first session message must be 'open'"));
        break;
      }
      // Checked here, not per call: every call on the session acts for the task that opened it.
      if (absl::Status allowed = Authorize(c->principal_, ForTask(request.open().task_id()));
          !allowed.ok()) {
        metrics_.AuthFailure();
        end_with(allowed);
        break;
      }
      c->outbox_->Attach(c.get());
      absl::StatusOr<RpcHandler::Session> session =
          handler_.OpenSession(request.open(), c->outbox_);
      if (!session.ok()) {
        end_with(session.status());
        break;
      }
      c->session_ = *session;
    } else if (request.kind_case() == pb::SessionRequest::kCall) {
      // The result may come on any thread and after the connection is gone: the completion
      // holds only the outbox (shared) and plain values.
      handler_.SessionCall(*c->session_, request.call(),
                           [outbox = c->outbox_, metrics = &metrics_, clock = &clock_,
                            method = RpcHandler::SessionCallName(request.call()),
                            start = clock_.Now()](CallResult result) {
                             metrics->Rpc(method, result.status.code(), clock->Now() - start);
                             outbox->Push(std::move(result));
                             outbox->Notify();
                           });
    } else {
      // A heartbeat; a second 'open' or an unknown message still proves the task is alive.
      handler_.Heartbeat(*c->session_, request);
    }
  }
  if (c->stage_ == Connection::Stage::kEnding) {
    c->in_.clear();  // nothing after the end is read
  } else {
    c->in_.erase(0, at);
  }
}

void WireSessionServer::Close(const std::shared_ptr<Connection>& c, const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (connections_.erase(c->id()) == 0) return;
  }
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd(), nullptr);
  c->MarkClosed();
  c->outbox_->Detach();  // no OnOutboxReady is running or will start
  if (c->session_.has_value()) handler_.CloseSession(*c->session_, why);
  // Shut first: the listener's dup of the socket would otherwise keep it open.
  shutdown(c->fd(), SHUT_RDWR);
  close(c->fd());
}

}  // namespace phalanx::coord
