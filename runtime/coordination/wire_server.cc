#include "runtime/coordination/wire_server.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/log.h"
#include "runtime/coordination/coalescing_writer.h"
#include "runtime/coordination/error_details.h"
#include "runtime/coordination/peer_batch_codec.h"
#include "runtime/coordination/proto_convert.h"
#include "runtime/coordination/session_calls.h"
#include "runtime/coordination/session_outbox.h"
#include "runtime/coordination/tls_session.h"
#include "runtime/coordination/token_auth.h"
#include "runtime/coordination/wire_format.h"

namespace phalanx::coord {

namespace {

constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP;

// On the loop thread while it handles a batch of epoll events: the connections written to
// meanwhile, sent once at the end of the batch. A barrier released by the batch's last arrival
// then reaches each process in one send instead of one per task. Null on other threads: their
// writes go out at once, unless the loop holds that connection's writes back (then they leave
// with the batch's).
thread_local std::vector<std::shared_ptr<void>>* t_corked = nullptr;

pb::WireServerFrame EndFrame(const absl::Status& status) {
  pb::WireServerFrame frame;
  StatusToFields(status, *frame.mutable_end());
  return frame;
}

void AppendEvent(const SessionEvent& event, std::string& frames, uint32_t stream) {
  pb::WireServerFrame frame;
  *frame.mutable_event() = ToProto(event);
  AppendFrame(frame, stream, frames);
}

// The largest peer batch sent as one frame: well under the client's largest frame (16 MiB).
constexpr size_t kMaxPeerBatchFrameBytes = 4 << 20;

// `batch`'s definition frame on the connection stream, encoded once for every connection; empty
// when it is too big for one frame.
const std::string& PeerBatchDefinition(const PeerBatch& batch) {
  return batch.EncodedOnce([&] {
    pb::WireServerFrame frame;
    *frame.mutable_peer_batch() = EncodePeerBatch(batch.id, batch.events);
    std::string bytes;
    AppendFrame(frame, kWireConnectionStream, bytes);
    if (bytes.size() > kMaxPeerBatchFrameBytes) bytes.clear();
    return bytes;
  });
}

}  // namespace

// What a connection may hold back while the loop hands out a batch of frames (Write).
constexpr size_t kMaxCorkedBytes = 1 << 20;

// One wire connection. The read side (in_, magic_seen_, streams_, ...) belongs to the loop
// thread; the write side is shared under mu_ by every thread that produces an event for it.
class WireSessionServer::Connection final
    : public std::enable_shared_from_this<WireSessionServer::Connection> {
 public:
  Connection(uint64_t id, int fd, std::string peer, int epoll_fd, size_t max_unsent,
             CoordinatorMetrics& metrics)
      : id_(id),
        fd_(fd),
        peer_(std::move(peer)),
        epoll_fd_(epoll_fd),
        max_unsent_(max_unsent),
        metrics_(metrics) {}

  uint64_t id() const { return id_; }
  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }

  // Loop thread only.
  std::string in_;  // plaintext: frames, after the magic
  bool magic_seen_ = false;
  bool tls_started_ = false;    // what arrives is TLS records (StartTls)
  bool ending_ = false;         // nothing more is read: the connection is being shut
  bool authenticated_ = false;  // some stream presented a valid credential
  uint32_t last_stream_ = 0;    // the highest stream id seen (ids only grow)
  absl::flat_hash_map<uint32_t, std::unique_ptr<Stream>> streams_;
  // Streams whose session's end went out (superseded, declared failed, ...): the loop frees
  // them when it next reads from the connection, whether or not the task ever closes them.
  std::atomic<size_t> ended_streams_{0};

  // Queues `bytes` and sends what the socket takes now; with `last`, the connection's write
  // side is shut once everything queued has gone.
  void Write(std::string_view bytes, bool last) {
    absl::MutexLock lock(&mu_);
    if (closed_ || shut_) return;
    AppendLocked(bytes, last);
  }
  // Writes `before` (a stream's earlier frames), then `definition` (peer batch `id`'s frame on
  // the connection stream) unless the client still holds that batch, then `ref` (the stream's
  // name for it): the batch crosses the connection once however many of its streams hear it.
  void WritePeerBatch(uint64_t id, std::string_view definition, std::string before,
                      std::string_view ref) {
    absl::MutexLock lock(&mu_);
    if (closed_ || shut_) return;
    if (defined_batches_.Find(id) == nullptr) {
      before.append(definition);
      defined_batches_.Define(id, {});
    }
    before.append(ref);
    AppendLocked(before, /*last=*/false);
  }
  void Send(const pb::WireServerFrame& frame, uint32_t stream, bool last) {
    std::string bytes;
    AppendFrame(frame, stream, bytes);
    Write(bytes, last);
  }
  // The client asked for TLS (kWireTlsMagic): from now on what it sends is fed to Decrypt and
  // what is written to it is encrypted (loop thread).
  absl::Status StartTls(const TlsContext& context) {
    absl::StatusOr<std::unique_ptr<TlsSession>> session = TlsSession::Accept(context);
    if (!session.ok()) return session.status();
    absl::MutexLock lock(&mu_);
    tls_ = *std::move(session);
    tls_started_ = true;
    return absl::OkStatus();
  }
  bool tls() const { return tls_started_; }
  // Appends the plaintext `ciphertext` completes to `plaintext`, and sends the handshake's
  // answers (or its failure's alert) at once. An error ends the connection (loop thread).
  absl::Status Decrypt(std::string_view ciphertext, std::string& plaintext) {
    absl::MutexLock lock(&mu_);
    absl::Status received = tls_->Receive(ciphertext, plaintext);
    if (!closed_ && !shut_) SendLocked();
    return received;
  }
  // The socket has room again (loop thread).
  void Flush() {
    absl::MutexLock lock(&mu_);
    writer_.Uncork();
    if (!closed_ && !shut_) SendLocked();
  }
  // No write touches the descriptor after this returns.
  void MarkClosed() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

 private:
  void AppendLocked(std::string_view bytes, bool last) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writer_.Append(bytes);
    if (last) ending_write_ = true;
    if (t_corked != nullptr && !last) {
      if (!writer_.corked()) {
        writer_.Cork();
        t_corked->push_back(shared_from_this());
      }
      // Held back for one send at the end of the loop's batch, but never past a bound: a mass
      // failure handled on the loop thread fanned gigabytes into corked connections before any
      // send could apply the unread-output limit (3.3 GB at 16,384 tasks, issue 33). Past it
      // the bytes go now, the limit applies as to any write, and the rest of the batch is held
      // back again (the connection is in t_corked once).
      if (writer_.unsent_bytes() <= kMaxCorkedBytes) return;
      writer_.Uncork();
      SendLocked();
      if (!shut_) writer_.Cork();
      return;
    }
    SendLocked();
  }
  // Sends what the socket takes now, unless the loop holds this batch's writes back (the last
  // frame is never held: the connection is ending).
  void SendLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writer_.corked() && !ending_write_) return;
    writer_.Uncork();
    if (tls_ != nullptr) Encrypt();
    while (UnsentLocked() > 0) {
      const std::string_view unsent =
          tls_ != nullptr ? std::string_view(tls_out_).substr(tls_sent_) : writer_.Unsent();
      const ssize_t n = send(fd_, unsent.data(), unsent.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        Sent(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // Per connection, however many streams it carries: a budget that multiplied by the
        // streams let one credential grow the coordinator by gigabytes.
        const size_t limit = max_unsent_;
        if (UnsentLocked() > limit) {
          // The tasks stopped reading: drop them rather than grow without bound.
          PHX_LOG(WARNING) << "session wire " << peer_ << ": more than " << limit
                           << " bytes unread by its tasks; disconnecting it";
          metrics_.ConnectionClosed(ConnectionCloseReason::kUnreadOutput);
          Shut();
          return;
        }
        Watch(EPOLLOUT);
        return;
      }
      Shut();  // a broken connection: the loop sees the hang-up and closes it
      return;
    }
    Watch(0);
    if (ending_write_) {
      // The last frame is out: the task reads it and closes; a broken task's reset ends it too.
      shutdown(fd_, SHUT_WR);
      shut_ = true;
    }
  }
  // With TLS the writer's plaintext becomes records in tls_out_, which is what is sent.
  void Encrypt() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writer_.unsent_bytes() > 0) {
      if (absl::Status encrypted = tls_->Send(writer_.Unsent()); !encrypted.ok()) {
        PHX_LOG(WARNING) << "session wire " << peer_ << ": " << encrypted.message();
        Shut();
        return;
      }
      writer_.Sent(writer_.unsent_bytes());
    }
    tls_->TakeOutput(tls_out_);  // after what is still unsent (Sent drops what went)
  }
  size_t UnsentLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return writer_.unsent_bytes() + (tls_out_.size() - tls_sent_);
  }
  void Sent(size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (tls_ == nullptr) return writer_.Sent(n);
    tls_sent_ += n;
    if (tls_sent_ == tls_out_.size()) {
      tls_out_.clear();
      tls_sent_ = 0;
    }
  }
  void Shut() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    shutdown(fd_, SHUT_RDWR);
    shut_ = true;
    writer_.Break();
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
  CoordinatorMetrics& metrics_;

  absl::Mutex mu_;
  // Corked while in the loop's t_corked list.
  CoalescingWriter writer_ ABSL_GUARDED_BY(mu_);
  uint32_t watching_out_ ABSL_GUARDED_BY(mu_) = 0;
  bool ending_write_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // With TLS (StartTls): the session, and the records made but not sent yet.
  std::unique_ptr<TlsSession> tls_ ABSL_GUARDED_BY(mu_);
  std::string tls_out_ ABSL_GUARDED_BY(mu_);
  size_t tls_sent_ ABSL_GUARDED_BY(mu_) = 0;
  // The peer batches the client holds (WirePeerBatch): their ids only.
  PeerBatchWindow<std::monostate> defined_batches_ ABSL_GUARDED_BY(mu_);
};

// One task's session on a connection, from its accepted hello on. Its outbox's events are
// written, tagged with the stream's id, by whichever thread produced them (calls to
// OnOutboxReady are serialised by the outbox, so events leave in the order they were queued).
// The connection outlives it: a stream is detached from its outbox before it is destroyed.
class WireSessionServer::Stream final : public SessionOutbox::Listener {
 public:
  Stream(uint32_t id, Connection& connection, auth::Principal principal)
      : id_(id), connection_(connection), principal_(std::move(principal)) {}

  uint32_t id() const { return id_; }
  const auth::Principal& principal() const { return principal_; }
  // The session's end went out (superseded, declared failed, ...): the loop may free the
  // stream, whether or not the task ever closes it.
  bool ended() const { return reap_requested_.load(); }
  // Loop thread only.
  std::optional<RpcHandler::Session> session_;
  const std::shared_ptr<SessionOutbox> outbox_ = std::make_shared<SessionOutbox>();

  void OnOutboxReady() override {
    std::string frames;
    while (std::optional<SessionOutbox::Entry> entry = outbox_->PopEntry()) {
      if (auto* event = std::get_if<SessionEvent>(&*entry)) {
        AppendEvent(*event, frames, id_);
        continue;
      }
      const PeerBatch& batch = *std::get<std::shared_ptr<const PeerBatch>>(*entry);
      const std::string& definition = PeerBatchDefinition(batch);
      if (definition.empty()) {
        // Too big for one frame (thousands of long error reports): event by event, as gRPC.
        for (const SessionEvent& event : batch.events) AppendEvent(event, frames, id_);
        continue;
      }
      pb::WireServerFrame ref;
      ref.set_peer_batch_ref(batch.id);
      std::string ref_frame;
      AppendFrame(ref, id_, ref_frame);
      connection_.WritePeerBatch(batch.id, definition, std::move(frames), ref_frame);
      frames.clear();
    }
    // The session's end: the task answers by closing the stream (the loop frees it meanwhile).
    std::optional<absl::Status> final_status = outbox_->FinalStatus();
    if (final_status.has_value() && !end_sent_) {
      AppendFrame(EndFrame(*final_status), id_, frames);
      end_sent_ = true;
    }
    if (!frames.empty()) connection_.Write(frames, /*last=*/false);
    if (end_sent_ && !reap_requested_.exchange(true)) connection_.ended_streams_.fetch_add(1);
  }

 private:
  const uint32_t id_;
  Connection& connection_;
  const auth::Principal principal_;
  bool end_sent_ = false;                    // serialised by the outbox, like OnOutboxReady
  std::atomic<bool> reap_requested_{false};  // read by the loop thread
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
                                                 options_.max_unsent_bytes, metrics_);
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
  std::vector<std::shared_ptr<void>> corked;
  t_corked = &corked;
  while (true) {
    for (const std::shared_ptr<void>& connection : corked) {
      static_cast<Connection*>(connection.get())->Flush();
    }
    corked.clear();
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
    // Before a hello was accepted a read is hello-sized: what a peer that never authenticates
    // makes the coordinator hold stays a few KiB (one partial frame plus one read).
    const size_t want = c->authenticated_
                            ? sizeof(buffer)
                            : std::min(sizeof(buffer), options_.max_unauthenticated_frame_bytes);
    const ssize_t n = read(c->fd(), buffer, want);
    if (n > 0) {
      // Cut frames after every read, so what a connection holds is one read plus one partial
      // frame (bounded small until a hello was accepted), never all the socket had.
      if (c->tls()) {
        if (absl::Status decrypted = c->Decrypt(std::string_view(buffer, n), c->in_);
            !decrypted.ok()) {
          PHX_LOG(WARNING) << "session wire " << c->peer() << ": " << decrypted.message();
          ended = decrypted;
          break;
        }
      } else {
        c->in_.append(buffer, n);
      }
      HandleFrames(c);
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

void WireSessionServer::ReapEndedStreams(Connection& c) {
  if (c.ended_streams_.exchange(0) == 0) return;
  for (auto it = c.streams_.begin(); it != c.streams_.end();) {
    auto next = std::next(it);
    if (it->second->ended()) {
      EndStream(c, it, absl::AbortedError("the session had ended"));  // its session is gone
    }
    it = next;
  }
}

void WireSessionServer::HandleFrames(const std::shared_ptr<Connection>& c) {
  ReapEndedStreams(*c);
  size_t at = 0;
  while (!c->ending_) {
    const std::string_view rest = std::string_view(c->in_).substr(at);
    if (!c->magic_seen_) {
      if (rest.size() < kWireMagicView.size()) break;
      if (!AcceptMagic(c, rest.substr(0, kWireMagicView.size()))) {
        c->ending_ = true;
        break;
      }
      at += kWireMagicView.size();
      c->magic_seen_ = true;
      if (c->tls()) {
        // What followed the magic in the same reads is the handshake's start.
        std::string ciphertext = c->in_.substr(at);
        c->in_.clear();
        at = 0;
        if (absl::Status decrypted = c->Decrypt(ciphertext, c->in_); !decrypted.ok()) {
          PHX_LOG(WARNING) << "session wire " << c->peer() << ": " << decrypted.message();
          c->ending_ = true;
          break;
        }
      }
      continue;
    }
    Frame frame;
    // Until some stream presented a valid credential a connection costs little: only a hello
    // fits in a frame (an unauthenticated peer must not park megabytes here).
    const size_t limit =
        c->authenticated_ ? options_.max_frame_bytes : options_.max_unauthenticated_frame_bytes;
    const FrameCut cut = CutFrame(rest, limit, &frame);
    if (cut == FrameCut::kNeedMore) break;
    if (cut == FrameCut::kTooBig) {
      // The rest of the connection cannot be cut into frames: end it after saying why.
      c->Send(EndFrame(absl::InvalidArgumentError(
                  absl::StrCat("a session wire frame over the limit of ", limit, " bytes",
                               c->authenticated_ ? "" : " (before a hello was accepted)"))),
              frame.stream, /*last=*/true);
      c->ending_ = true;
      break;
    }
    at += frame.consumed;
    HandleFrame(c, frame.stream, frame.payload);
  }
  if (c->ending_) {
    c->in_.clear();  // nothing after the end is read
  } else {
    c->in_.erase(0, at);
  }
}

bool WireSessionServer::AcceptMagic(const std::shared_ptr<Connection>& c, std::string_view magic) {
  const bool cleartext = magic == kWireMagicView;
  const bool tls = magic == kWireTlsMagicView;
  if (options_.tls == nullptr) {
    // Answered whatever it is: a client of another version reads this one and uses gRPC, and a
    // client that asked for TLS sees a cleartext answer and says the coordinator has none.
    c->Write(kWireMagicView, /*last=*/!cleartext);
    if (tls) {
      PHX_LOG(WARNING) << "session wire " << c->peer()
                       << ": a client asked for TLS, but this coordinator has no certificate "
                          "(--tls_cert_file); refused";
    }
    return cleartext;
  }
  if (tls) {
    if (absl::Status started = c->StartTls(*options_.tls); !started.ok()) {
      PHX_LOG(WARNING) << "session wire " << c->peer() << ": " << started.message();
      c->Write(kWireMagicView, /*last=*/true);
      return false;
    }
    c->Write(kWireMagicView, /*last=*/false);  // the first plaintext, once the handshake is done
    return true;
  }
  c->Write(kWireMagicView, /*last=*/!cleartext);
  if (cleartext) {
    // A client without the job's CA: its first task (stream 1) is told why, not just cut off.
    c->Send(EndFrame(absl::UnauthenticatedError(
                "this coordinator serves the session wire over TLS only: the client needs "
                "PHALANX_TLS_CA_FILE (the job's CA) and PHALANX_TLS_SERVER_NAME")),
            1, /*last=*/true);
  }
  return false;
}

void WireSessionServer::HandleFrame(const std::shared_ptr<Connection>& c, uint32_t id,
                                    std::string_view payload) {
  auto refuse = [&](const absl::Status& status) { c->Send(EndFrame(status), id, /*last=*/false); };
  auto it = c->streams_.find(id);
  if (it == c->streams_.end()) {
    // A stream that ended here already (refused, or closed): what it still sent is dropped.
    if (id <= c->last_stream_ || payload.empty()) return;
    c->last_stream_ = id;
    if (c->streams_.size() >= options_.max_streams_per_connection) {
      metrics_.Rpc("Register", absl::StatusCode::kResourceExhausted, absl::ZeroDuration());
      metrics_.WireRefused(WireBudget::kStreamsPerConnection);
      return refuse(absl::ResourceExhaustedError(
          absl::StrCat("more than ", options_.max_streams_per_connection,
                       " sessions on one session wire connection")));
    }
    pb::WireHello hello;
    if (!hello.ParseFromArray(payload.data(), payload.size())) {
      return refuse(absl::InvalidArgumentError("malformed session wire hello"));
    }
    absl::StatusOr<absl::string_view> credential =
        ParseBearer(hello.authorization(), "the hello's authorization");
    absl::StatusOr<auth::Principal> principal =
        credential.ok() ? auth::Authenticate(options_.token, *credential) : credential.status();
    absl::Status allowed = principal.ok() ? Authorize(*principal, ForTask(hello.register_().task()))
                                          : principal.status();
    if (!allowed.ok()) {
      metrics_.AuthFailure();
      return refuse(allowed);
    }
    if (!c->authenticated_) {
      c->authenticated_ = true;
      authenticated_(c->peer());
    }
    // A task's credential holds a few streams at most, on all connections together (a task has
    // one session; a reconnect overlaps two): it cannot open thousands to grow the coordinator.
    if (!principal->admin() &&
        streams_of_task_[principal->task_id] >= options_.max_streams_per_task_credential) {
      metrics_.Rpc("Register", absl::StatusCode::kResourceExhausted, absl::ZeroDuration());
      metrics_.WireRefused(WireBudget::kStreamsPerCredential);
      return refuse(absl::ResourceExhaustedError(
          absl::StrCat("task ", principal->task_id, "'s credential already holds ",
                       options_.max_streams_per_task_credential,
                       " session wire streams (the most one task may); close one first")));
    }
    const absl::Time start = clock_.Now();
    pb::WireServerFrame answer;
    absl::Status registered = handler_.Register(hello.register_(), answer.mutable_registered());
    metrics_.Rpc("Register", registered.code(), clock_.Now() - start);
    if (!registered.ok()) return refuse(registered);
    if (!principal->admin()) ++streams_of_task_[principal->task_id];
    c->streams_[id] = std::make_unique<Stream>(id, *c, *std::move(principal));
    metrics_.WireStreams(+1);
    c->Send(answer, id, /*last=*/false);
    return;
  }
  Stream& stream = *it->second;
  if (payload.empty()) {
    // Cancelled, not Unavailable: the process closed its own client (its script ended, or it
    // chose to), which a spare must not take over; a connection that just ends is a death.
    return EndStream(*c, it, absl::CancelledError("stream closed by the task"));
  }
  // A refusal after the hello ends the stream here; the task's session with it.
  auto end_with = [&](const absl::Status& status) {
    refuse(status);
    EndStream(*c, it, status);
  };
  pb::SessionRequest request;
  if (!request.ParseFromArray(payload.data(), payload.size())) {
    return end_with(absl::InvalidArgumentError("malformed session message"));
  }
  if (!stream.session_.has_value()) {
    if (request.kind_case() != pb::SessionRequest::kOpen) {
      return end_with(absl::InvalidArgumentError("the first session message must be 'open'"));
    }
    stream.outbox_->Attach(&stream);
    absl::StatusOr<RpcHandler::Session> session = OpenAuthorizedSession(
        handler_, metrics_, stream.principal(), request.open(), stream.outbox_);
    if (!session.ok()) return end_with(session.status());
    stream.session_ = *session;
  } else if (request.kind_case() == pb::SessionRequest::kCall) {
    RunSessionCall(handler_, metrics_, clock_, *stream.session_, request.call(), stream.outbox_);
  } else {
    // A heartbeat; a second 'open' or an unknown message still proves the task is alive.
    handler_.Heartbeat(*stream.session_, request);
  }
}

void WireSessionServer::Forget(const Stream& stream) {
  metrics_.WireStreams(-1);
  if (stream.principal().admin()) return;
  auto it = streams_of_task_.find(stream.principal().task_id);
  if (it != streams_of_task_.end() && --it->second <= 0) streams_of_task_.erase(it);
}

void WireSessionServer::EndStream(Connection& c, StreamMap::iterator it, const absl::Status& why) {
  std::unique_ptr<Stream> stream = std::move(it->second);
  c.streams_.erase(it);
  Forget(*stream);
  stream->outbox_->Detach();  // no OnOutboxReady is running or will start
  if (stream->session_.has_value()) handler_.CloseSession(*stream->session_, why);
}

void WireSessionServer::Close(const std::shared_ptr<Connection>& c, const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (connections_.erase(c->id()) == 0) return;
  }
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd(), nullptr);
  c->MarkClosed();
  // The connection's end is every task's on it: the crash signal of a process that died. One
  // call for all of them: per task it would cost O(tasks) each (a connection with 6,000 tasks
  // stalled every other connection for 15 s).
  std::vector<RpcHandler::Session> sessions;
  sessions.reserve(c->streams_.size());
  for (auto& [id, stream] : c->streams_) {
    stream->outbox_->Detach();  // no OnOutboxReady is running or will start
    if (stream->session_.has_value()) sessions.push_back(*stream->session_);
    Forget(*stream);
  }
  c->streams_.clear();
  handler_.CloseSessions(sessions, why);
  // Shut first: the listener's dup of the socket would otherwise keep it open.
  shutdown(c->fd(), SHUT_RDWR);
  close(c->fd());
}

}  // namespace phalanx::coord
