#include "runtime/client/wire_connection.h"

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
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/tcp_dial.h"
#include "runtime/coordination/peer_batch_codec.h"
#include "runtime/coordination/wire_format.h"

namespace phalanx::client {

namespace pb = ::phalanx::coord::v1;

namespace {

constexpr absl::Duration kRedialInterval = absl::Milliseconds(25);

// A connected, blocking TCP socket to `address` (TCP_NODELAY, a send timeout), or Unavailable.
absl::StatusOr<int> DialSocket(const std::string& address, absl::Time deadline) {
  absl::StatusOr<int> dialed = base::DialTcp(address, deadline, "coordinator");
  if (!dialed.ok()) return dialed.status();
  const int fd = *dialed;
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const timeval send_timeout{absl::ToInt64Seconds(WireConnection::kSendTimeout), 0};
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

// The process's connections by address. Weak: a connection lives while a stream uses it.
struct Registry {
  absl::Mutex mu;
  absl::flat_hash_map<std::string, std::weak_ptr<WireConnection>> by_address ABSL_GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static auto* registry = new Registry;  // never destroyed: streams may outlive main's statics
  return *registry;
}

}  // namespace

absl::StatusOr<std::shared_ptr<WireConnection>> WireConnection::ForAddress(
    const std::string& address, const CoordinatorTls& tls, absl::Time deadline,
    absl::FunctionRef<bool(absl::Duration)> pause) {
  Registry& registry = TheRegistry();
  std::shared_ptr<WireConnection> connection;
  bool dial = false;
  {
    absl::MutexLock lock(&registry.mu);
    // A connection is shared by the tasks that would verify the coordinator the same way.
    std::weak_ptr<WireConnection>& slot = registry.by_address[absl::StrCat(
        address, tls.enabled() ? absl::StrCat(" tls:", TlsServerName(tls, address)) : "")];
    connection = slot.lock();
    // One inherited through fork() is the parent's socket, with no reader in this process.
    if (connection != nullptr && connection->pid_ != getpid()) connection = nullptr;
    if (connection != nullptr) {
      absl::MutexLock state_lock(&connection->mu_);
      // Ended, or ending (broken, its reader not done yet): a new task needs a new one.
      if (connection->state_ == State::kEnded || connection->ended_.has_value()) {
        connection = nullptr;
      }
    }
    if (connection == nullptr) {
      connection.reset(new WireConnection(address, tls));
      slot = connection;
      dial = true;
    }
  }
  // Dialled outside the registry's lock: connections to other coordinators go on meanwhile,
  // and the process's other tasks wait for this one instead of dialling their own.
  if (dial) connection->Dial(deadline, pause);
  if (absl::Status status = connection->AwaitDialled(deadline, pause); !status.ok()) {
    return status;
  }
  return connection;
}

void WireConnection::Dial(absl::Time deadline, absl::FunctionRef<bool(absl::Duration)> pause) {
  absl::StatusOr<int> fd = DialSocket(address_, deadline);
  while (absl::IsUnavailable(fd.status()) && absl::Now() + kRedialInterval < deadline) {
    if (pause(kRedialInterval)) {
      // The process's other tasks waiting for this dial dial again themselves.
      fd = absl::UnavailableError("the dial was abandoned: the task making it is stopping");
      break;
    }
    fd = DialSocket(address_, deadline);
  }
  if (fd.ok() && tls_config_.enabled()) {
    if (absl::Status secured = StartTls(*fd, deadline); !secured.ok()) {
      close(*fd);
      fd = secured;
    }
  }
  absl::MutexLock lock(&mu_);
  if (!fd.ok()) {
    state_ = State::kEnded;
    ended_ = fd.status();
    return;
  }
  fd_ = *fd;
  state_ = State::kOpen;
  reader_ = std::thread([this] { ReadLoop(); });
  // The magic leads every write; a write is whole frames, so the streams' first frames follow.
  // With TLS it went in the clear before the handshake.
  if (tls_ == nullptr) {
    absl::MutexLock write_lock(&write_mu_);
    writer_.Append(coord::kWireMagicView);  // sent with the first stream's hello
  }
}

absl::Status WireConnection::StartTls(int fd, absl::Time deadline) {
  absl::StatusOr<std::shared_ptr<const coord::TlsContext>> context =
      coord::TlsContext::ForClient(tls_config_.ca_pem);
  if (!context.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PHALANX_TLS_CA_FILE: ", context.status().message()));
  }
  absl::StatusOr<std::unique_ptr<coord::TlsSession>> session =
      coord::TlsSession::Connect(**context, TlsServerName(tls_config_, address_));
  if (!session.ok()) return session.status();
  std::string out(coord::kWireTlsMagicView);
  (*session)->TakeOutput(out);
  bool first = true;
  std::vector<char> buffer(16 << 10);
  while (true) {
    if (!out.empty() && !SendAll(fd, out)) {
      return absl::UnavailableError(
          absl::StrCat("the coordinator at ", address_, " closed the connection during TLS"));
    }
    out.clear();
    if ((*session)->established()) break;
    pollfd readable{fd, POLLIN, 0};
    const int64_t wait_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    const int ready = wait_ms > 0 ? poll(&readable, 1, static_cast<int>(wait_ms)) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      return absl::UnavailableError(
          absl::StrCat("the TLS handshake with the coordinator at ", address_, " timed out"));
    }
    const ssize_t n = recv(fd, buffer.data(), buffer.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(absl::StrCat("the coordinator at ", address_,
                                                 " closed the connection during the TLS "
                                                 "handshake"));
    }
    if (first && static_cast<unsigned char>(buffer[0]) == coord::kWireFirstByte) {
      // Its cleartext magic: it has no certificate.
      return absl::UnauthenticatedError(absl::StrCat(
          "the coordinator at ", address_,
          " serves the session wire without TLS, but this task was given PHALANX_TLS_CA_FILE: "
          "start it with --tls_cert_file/--tls_key_file, or give the task no CA"));
    }
    first = false;
    if (absl::Status received =
            (*session)->Receive(std::string_view(buffer.data(), n), handshake_leftover_);
        !received.ok()) {
      return absl::UnauthenticatedError(
          absl::StrCat("the coordinator at ", address_, ": ", received.message()));
    }
    (*session)->TakeOutput(out);
  }
  tls_ = *std::move(session);
  return absl::OkStatus();
}

std::string WireConnection::Seal(std::string bytes) {
  if (tls_ == nullptr) return bytes;
  absl::MutexLock lock(&tls_mu_);
  std::string sealed;
  if (absl::Status encrypted = tls_->Send(bytes); !encrypted.ok()) return sealed;
  tls_->TakeOutput(sealed);
  return sealed;
}

absl::Status WireConnection::AwaitDialled(absl::Time deadline,
                                          absl::FunctionRef<bool(absl::Duration)> pause) {
  absl::MutexLock lock(&mu_);
  auto dialled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return state_ != State::kDialling; };
  // In slices, so a caller that is stopping does not wait out another task's dial.
  while (!dialled() && absl::Now() < deadline) {
    mu_.AwaitWithDeadline(absl::Condition(&dialled),
                          std::min(deadline, absl::Now() + kRedialInterval));
    if (dialled()) break;
    mu_.Unlock();
    const bool stopping = pause(absl::ZeroDuration());
    mu_.Lock();
    if (stopping) return absl::CancelledError("the client is stopping");
  }
  if (state_ == State::kDialling) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the coordinator at ", address_, " in time"));
  }
  if (state_ == State::kEnded) return *ended_;
  return absl::OkStatus();
}

WireConnection::~WireConnection() {
  Break(absl::CancelledError("the session wire connection is closed"));
  if (reader_.joinable()) {
    // The last stream let go on the reader thread itself: it is on its way out.
    if (reader_.get_id() == std::this_thread::get_id()) {
      reader_.detach();
    } else {
      reader_.join();
    }
  }
  if (fd_ >= 0) close(fd_);
}

uint32_t WireConnection::Attach(Receiver& receiver,
                                absl::FunctionRef<std::string(uint32_t)> first_frames) {
  std::optional<absl::Status> ended;
  uint32_t id;
  {
    absl::MutexLock lock(&mu_);
    id = ++last_stream_;
    if (state_ == State::kEnded) {
      ended = ended_;
    } else {
      streams_.emplace(id, Entry{&receiver});
      // Queued under mu_, so hellos leave in the order of their ids.
      absl::MutexLock write_lock(&write_mu_);
      writer_.Append(first_frames(id));
    }
  }
  if (ended.has_value()) {
    receiver.OnConnectionEnd(*ended);
    return id;
  }
  write_mu_.Lock();
  Flush();
  return id;
}

void WireConnection::Detach(uint32_t stream) {
  absl::MutexLock lock(&mu_);
  auto idle = [this, stream]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = streams_.find(stream);
    return it == streams_.end() || it->second.delivering == 0;
  };
  mu_.Await(absl::Condition(&idle));
  streams_.erase(stream);
}

void WireConnection::Send(std::string bytes) {
  write_mu_.Lock();
  writer_.Append(bytes);
  Flush();
}

void WireConnection::Flush() {
  // Unless another thread is in send() (it takes what is queued with its next one) or the reader
  // holds the writes back (it sends them when its batch is handed out).
  while (writer_.ShouldSend()) {
    // Sealed by the one thread that claimed the batch, so records leave in the order made.
    const std::string batch = Seal(writer_.Claim());
    write_mu_.Unlock();
    const bool sent = !batch.empty() && SendAll(fd_, batch);
    write_mu_.Lock();
    writer_.Release();
    if (!sent) {
      // Broken, or no room for kSendTimeout (a coordinator that stopped reading): end the
      // connection; the reader reports it to every stream and the pending calls fail.
      writer_.Break();
      shutdown(fd_, SHUT_RDWR);
    }
  }
  write_mu_.Unlock();
}

void WireConnection::MarkInUse(uint32_t stream) {
  absl::MutexLock lock(&mu_);
  if (auto it = streams_.find(stream); it != streams_.end()) it->second.in_use = true;
}

void WireConnection::BreakUnlessInUse(uint32_t stream, const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, entry] : streams_) {
      if (id != stream && entry.in_use) return;
    }
  }
  Break(why);
}

void WireConnection::Break(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (!ended_.has_value()) ended_ = why;
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);  // the reader sees the end and tells every stream
}

void WireConnection::ReadLoop() { EndAll(ReadUntilEnd()); }

absl::Status WireConnection::ReadUntilEnd() {
  std::string in = std::move(handshake_leftover_);
  size_t at = 0;
  bool magic_seen = false;
  bool corked = false;  // this thread holds the writes back (writer_ corked)
  std::vector<char> buffer(64 << 10);
  while (true) {
    if (!magic_seen && in.size() >= coord::kWireMagicView.size()) {
      if (in.compare(0, coord::kWireMagicView.size(), coord::kWireMagicView) != 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("the coordinator at ", address_, " does not speak the session wire"));
      }
      magic_seen = true;
      at = coord::kWireMagicView.size();
    }
    coord::Frame frame;
    const coord::FrameCut cut =
        magic_seen ? coord::CutFrame(std::string_view(in).substr(at), kMaxFrameBytes, &frame)
                   : coord::FrameCut::kNeedMore;
    if (cut == coord::FrameCut::kTooBig) {
      return absl::UnavailableError("session wire: a frame from the coordinator is too big");
    }
    if (cut == coord::FrameCut::kFrame) {
      at += frame.consumed;
      if (!corked) {
        // The callers this batch wakes write their next calls meanwhile: they leave together,
        // in one send, when the batch is done (a barrier's release wakes a process's tasks at
        // once, and each sends its next call).
        corked = true;
        absl::MutexLock lock(&write_mu_);
        writer_.Cork();
      }
      pb::WireServerFrame message;
      if (!message.ParseFromArray(frame.payload.data(), frame.payload.size())) {
        return absl::UnavailableError("session wire: malformed frame from the coordinator");
      }
      if (frame.stream == coord::kWireConnectionStream) {
        if (absl::Status handled = OnConnectionFrame(message); !handled.ok()) return handled;
      } else if (message.kind_case() == pb::WireServerFrame::kPeerBatchRef) {
        if (absl::Status routed = RoutePeerBatch(frame.stream, message.peer_batch_ref());
            !routed.ok()) {
          return routed;
        }
      } else {
        const bool last = message.has_end();
        Route(frame.stream, last,
              [&](Receiver& receiver) { receiver.OnFrame(std::move(message)); });
      }
      continue;
    }
    if (corked) {
      corked = false;
      write_mu_.Lock();
      writer_.Uncork();
      Flush();
    }
    in.erase(0, at);
    at = 0;
    const ssize_t n = recv(fd_, buffer.data(), buffer.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && !magic_seen) {
      return absl::UnavailableError(
          absl::StrCat("the coordinator at ", address_, " closed the connection before answering"));
    }
    if (n == 0) return absl::UnavailableError("the coordinator closed the session connection");
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat("session connection: ", std::strerror(errno)));
    }
    last_read_micros_ = absl::ToUnixMicros(absl::Now());
    if (tls_ == nullptr) {
      in.append(buffer.data(), n);
      continue;
    }
    absl::MutexLock lock(&tls_mu_);
    if (absl::Status received = tls_->Receive(std::string_view(buffer.data(), n), in);
        !received.ok()) {
      return absl::UnavailableError(absl::StrCat("session connection: ", received.message()));
    }
  }
}

absl::Status WireConnection::OnConnectionFrame(const pb::WireServerFrame& frame) {
  if (!frame.has_peer_batch()) return absl::OkStatus();  // a newer coordinator's: not for us
  absl::StatusOr<std::vector<coord::SessionEvent>> events =
      coord::DecodePeerBatch(frame.peer_batch());
  if (!events.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "session wire: malformed peer batch from the coordinator: ", events.status().message()));
  }
  peer_batches_.Define(
      frame.peer_batch().id(),
      std::make_shared<const std::vector<coord::SessionEvent>>(*std::move(events)));
  return absl::OkStatus();
}

absl::Status WireConnection::RoutePeerBatch(uint32_t stream, uint64_t id) {
  const std::shared_ptr<const std::vector<coord::SessionEvent>>* batch = peer_batches_.Find(id);
  if (batch == nullptr) {
    // Its events would be lost: end the connection so its tasks register afresh.
    return absl::UnavailableError(absl::StrCat("session wire: the coordinator named peer batch ",
                                               id, ", which it did not send"));
  }
  // Held here: the receiver runs without this thread's bookkeeping in the way.
  const std::shared_ptr<const std::vector<coord::SessionEvent>> events = *batch;
  Route(stream, /*last=*/false, [&](Receiver& receiver) { receiver.OnPeerEvents(*events); });
  return absl::OkStatus();
}

void WireConnection::Route(uint32_t stream, bool last, absl::FunctionRef<void(Receiver&)> deliver) {
  Receiver* receiver;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;  // detached: its task is gone
    receiver = it->second.receiver;
    ++it->second.delivering;
  }
  deliver(*receiver);
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream);
  if (--it->second.delivering == 0 && last) streams_.erase(it);
}

void WireConnection::EndAll(const absl::Status& read_status) {
  std::vector<std::pair<uint32_t, Receiver*>> receivers;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kEnded;
    // A Break() names the cause better than the end it causes.
    if (!ended_.has_value()) ended_ = read_status;
    status = *ended_;
    // A protocol error ends it from this side: the coordinator sees the end at once.
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
    for (auto& [id, entry] : streams_) {
      ++entry.delivering;
      receivers.emplace_back(id, entry.receiver);
    }
  }
  {
    absl::MutexLock lock(&write_mu_);
    writer_.Break();
  }
  for (auto& [id, receiver] : receivers) receiver->OnConnectionEnd(status);
  absl::MutexLock lock(&mu_);
  for (auto& [id, receiver] : receivers) streams_.erase(id);
}

}  // namespace phalanx::client
