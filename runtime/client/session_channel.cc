#include "runtime/client/session_channel.h"

#include "absl/strings/str_cat.h"
#include "common/base/backoff.h"
#include "common/base/log.h"
#include "runtime/client/wire_session_stream.h"
#include "runtime/coordination/proto_convert.h"

namespace phalanx::client {

namespace pb = ::phalanx::coord::v1;

namespace {

// A status that means this incarnation is finished for good: reconnecting cannot help.
bool IsTerminal(const absl::Status& status) {
  return absl::IsAborted(status) || absl::IsUnauthenticated(status) ||
         absl::IsInvalidArgument(status) || absl::IsPermissionDenied(status);
}

}  // namespace

SessionChannel::SessionChannel(const ClientConfig& config, const ClientCallbacks& callbacks,
                               base::Clock& clock, const RpcCaller& rpc, Listener& listener)
    : config_(config), callbacks_(callbacks), clock_(clock), rpc_(rpc), listener_(listener) {}

void SessionChannel::Start(absl::Duration first_attempt) {
  {
    absl::MutexLock lock(&mu_);
    if (started_) return;
    started_ = true;
  }
  std::shared_ptr<SessionStream> first;
  if (UseWire()) {
    // On this thread: the caller is about to wait for the session, and a new thread would
    // first have to be scheduled (on a busy node, the larger part of a connect).
    absl::StatusOr<bool> registered = RegisterTask(
        /*ever_connected=*/false, &first, std::min(first_attempt, absl::Seconds(2)));
    if (registered.ok()) {
      absl::MutexLock lock(&mu_);
      stream_ = first;  // before `opened` can arrive: calls may ride it from then on
      PublishCallStream();
    } else {
      first.reset();  // the session thread registers again, with its back-off
    }
    if (first != nullptr) first->Start();
  }
  absl::MutexLock lock(&mu_);
  session_thread_ = std::thread([this, first] { SessionLoop(first); });
}

void SessionChannel::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (session_thread_.joinable()) session_thread_.join();
}

absl::Status SessionChannel::Leave(const std::string& reason, absl::Duration timeout) {
  std::shared_ptr<SessionStream> stream;
  {
    absl::MutexLock lock(&mu_);
    if (!connected_ || stream_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("task ", config_.task_id, " has no open session to leave on"));
    }
    stream = stream_;
    leaving_ = true;
  }
  stream->SendLeave(reason);
  bool confirmed = false;
  {
    absl::MutexLock lock(&mu_);
    auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stream_done_.has_value() || stopping_;
    };
    clock_.AwaitWithDeadline(&mu_, absl::Condition(&ended), clock_.Now() + timeout);
    confirmed = stream_done_.has_value();
  }
  Stop();
  if (!confirmed) {
    return absl::DeadlineExceededError(absl::StrCat(
        "task ", config_.task_id, ": the coordinator did not confirm the departure within ",
        absl::FormatDuration(timeout), "; the session was closed (peers may see a failure)"));
  }
  return absl::OkStatus();
}

absl::Status SessionChannel::WaitUntilConnected(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return connected_ || fatal_.has_value() || stopping_;
  };
  clock_.AwaitWithDeadline(&mu_, absl::Condition(&ready), clock_.Now() + timeout);
  if (fatal_.has_value()) return *fatal_;
  if (connected_) return absl::OkStatus();
  if (!started_) return absl::FailedPreconditionError("Connect() was not called");
  return absl::DeadlineExceededError(
      absl::StrCat("task ", config_.task_id, " could not connect to the coordinator at ",
                   config_.coordinator, " within ", absl::FormatDuration(timeout)));
}

bool SessionChannel::connected() const {
  absl::MutexLock lock(&mu_);
  return connected_;
}

bool SessionChannel::TrySend(pb::SessionCall& call, CallDone& done) {
  // A message over the server's limit would end the session and with it the task's life:
  // big requests go as their own RPC, where the limit only fails that call.
  constexpr size_t kMaxSessionCallBytes = 64 << 10;
  if (call.ByteSizeLong() > kMaxSessionCallBytes) return false;
  std::shared_ptr<SessionStream> stream;
  {
    absl::MutexLock lock(&calls_mu_);
    if (call_stream_ == nullptr) return false;
    const uint64_t id = next_call_id_++;
    call.set_call_id(id);
    pending_calls_.emplace(id, std::move(done));
    stream = call_stream_;
  }
  // Outside calls_mu_: a wire write may wait for room in the socket, and the reader thread
  // needs calls_mu_ to hand out answers meanwhile. If the stream breaks first, OnSessionDone fails
  // the call.
  stream->SendCall(std::move(call));
  return true;
}

void SessionChannel::OnSessionEvent(coord::SessionEvent event) {
  if (auto* result = std::get_if<coord::CallResult>(&event)) {
    // Call results go straight to their caller, not through the session thread.
    CallDone done;
    {
      absl::MutexLock lock(&calls_mu_);
      auto it = pending_calls_.find(result->call_id);
      if (it == pending_calls_.end()) return;
      done = std::move(it->second);
      pending_calls_.erase(it);
      last_contact_ = clock_.Now();
    }
    std::move(done)(std::move(result->status), std::move(result->value));
    return;
  }
  absl::MutexLock lock(&mu_);
  if (std::holds_alternative<JobSnapshot>(event)) {
    // Connected from here: a caller in WaitUntilConnected goes on now rather than after a
    // hop through the session thread, which still dispatches the event (on_reconnect).
    connected_ = true;
    session_opened_ = true;
    PublishCallStream();
  }
  events_.push_back(std::move(event));
}

void SessionChannel::OnSessionDone(absl::Status status) {
  absl::flat_hash_map<uint64_t, CallDone> orphans;
  {
    absl::MutexLock lock(&mu_);
    stream_done_ = status;
    stream_ = nullptr;
    connected_ = false;  // callers of WaitUntilConnected wait for the reconnect from now on
    absl::MutexLock calls_lock(&calls_mu_);
    call_stream_ = nullptr;
    orphans.swap(pending_calls_);
  }
  // A terminal end (this incarnation was retired) keeps its code; anything else is a
  // transport problem the caller may retry after the client reconnects.
  const absl::Status lost = IsTerminal(status)
                                ? status
                                : absl::UnavailableError(absl::StrCat(
                                      "session to the coordinator ended: ", status.ToString()));
  for (auto& [id, done] : orphans) std::move(done)(lost, "");
}

bool SessionChannel::PauseUnlessStopping(absl::Duration delay) {
  // Real time, like the transport deadline it lies within (not the injected clock).
  absl::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  mu_.AwaitWithTimeout(absl::Condition(&stopping), delay);
  return stopping_;
}

bool SessionChannel::BackOff(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  clock_.AwaitWithDeadline(&mu_, absl::Condition(&stopping), clock_.Now() + delay);
  return stopping_;
}

void SessionChannel::SetFatal(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (fatal_.has_value() || stopping_) return;
    fatal_ = status;
    connected_ = false;
    PublishCallStream();
  }
  PHX_LOG(ERROR) << "task " << config_.task_id << " incarnation " << config_.incarnation
                 << " cannot continue: " << status;
  if (callbacks_.on_fatal) callbacks_.on_fatal(status);
}

bool SessionChannel::UseWire() const {
  using Transport = ClientConfig::SessionTransport;
  if (config_.session_transport == Transport::kGrpc) return false;
  return config_.session_transport == Transport::kWire || !wire_refused_;
}

absl::StatusOr<bool> SessionChannel::RegisterTask(bool ever_connected,
                                                  std::shared_ptr<SessionStream>* stream,
                                                  absl::Duration timeout) {
  pb::RegisterRequest request;
  *request.mutable_task() = coord::ToProto(TaskRef{config_.task_id, config_.incarnation});
  request.set_job(config_.job);
  const absl::Duration kRegisterTimeout = timeout;
  if (UseWire()) {
    // The first time, `open` rides with the hello (a round trip less). Not on a reconnect:
    // OnCoordinatorRestarted must run before the session opens.
    absl::StatusOr<WireSessionStream::Opened> opened =
        WireSessionStream::Open(config_.coordinator, config_.tls, config_.token, request,
                                kRegisterTimeout, *this, /*open_at_once=*/!ever_connected,
                                [this](absl::Duration d) { return PauseUnlessStopping(d); });
    if (opened.ok()) {
      absl::StatusOr<bool> restarted = AcceptRegistration(opened->registered, ever_connected);
      if (restarted.ok()) *stream = std::move(opened->stream);
      return restarted;
    }
    if (!absl::IsFailedPrecondition(opened.status()) ||
        config_.session_transport == ClientConfig::SessionTransport::kWire) {
      return opened.status();
    }
    PHX_LOG(INFO) << "task " << config_.task_id << ": " << opened.status().message()
                  << "; using gRPC for the session";
    wire_refused_ = true;
  }
  absl::StatusOr<pb::RegisterResponse> reg = rpc_.Call(&RpcCaller::Stub::async::Register, request,
                                                       kRegisterTimeout, /*wait_for_ready=*/true);
  if (!reg.ok()) return reg.status();
  absl::StatusOr<bool> restarted = AcceptRegistration(*reg, ever_connected);
  if (restarted.ok()) {
    *stream = std::make_shared<GrpcSessionStream>(
        rpc_.stub(), config_.token, TaskRef{config_.task_id, config_.incarnation}, *this);
  }
  return restarted;
}

absl::StatusOr<bool> SessionChannel::AcceptRegistration(const pb::RegisterResponse& response,
                                                        bool ever_connected) {
  const pb::RegisterResponse* reg = &response;
  if (reg->job() != config_.job || reg->num_tasks() != config_.num_tasks) {
    // Pointed at another job's coordinator (or a mis-sized one): never take part.
    return absl::InvalidArgumentError(
        absl::StrCat("coordinator at ", config_.coordinator, " serves job '", reg->job(), "' with ",
                     reg->num_tasks(), " tasks; this task expects job '", config_.job, "' with ",
                     config_.num_tasks));
  }
  absl::MutexLock lock(&mu_);
  const bool coordinator_restarted = ever_connected && coordinator_id_ != reg->coordinator_id();
  coordinator_id_ = reg->coordinator_id();
  heartbeat_interval_ = absl::Milliseconds(reg->heartbeat_interval_ms());
  heartbeat_timeout_ = absl::Milliseconds(reg->heartbeat_timeout_ms());
  events_.clear();
  stream_done_.reset();
  absl::MutexLock calls_lock(&calls_mu_);
  last_contact_ = clock_.Now();
  return coordinator_restarted;
}

void SessionChannel::SessionLoop(std::shared_ptr<SessionStream> first) {
  base::ExponentialBackoff backoff(absl::Milliseconds(50), absl::Seconds(2), 2.0,
                                   config_.task_id * 7919 + config_.incarnation + 1);
  bool ever_connected = false;
  while (true) {
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
      if (stopping && first != nullptr) {
        stream_ = nullptr;
        PublishCallStream();
      }
    }
    if (stopping) {
      // Outside mu_: the stream tells this channel it is done, which takes mu_.
      if (first != nullptr) first->Cancel();
      return;
    }
    std::shared_ptr<SessionStream> stream = std::move(first);
    first = nullptr;
    const bool started = stream != nullptr;              // Start() registered and opened it already
    absl::StatusOr<bool> coordinator_restarted = false;  // a first stream: nothing before it
    if (!started) coordinator_restarted = RegisterTask(ever_connected, &stream);
    if (!coordinator_restarted.ok()) {
      // A refusal, or a coordinator of another job, is final; anything else is retried.
      if (IsTerminal(coordinator_restarted.status())) {
        return SetFatal(coordinator_restarted.status());
      }
      if (BackOff(backoff.NextDelay())) return;
      continue;
    }
    // Before the stream opens, so nothing from the new coordinator meets the old state.
    if (*coordinator_restarted) listener_.OnCoordinatorRestarted();
    if (!started) {
      {
        absl::MutexLock lock(&mu_);
        stream_ = stream;  // before `opened` can arrive: calls may ride it from then on
        PublishCallStream();
      }
      stream->Start();
    }
    absl::Status end = RunStream(*stream, ever_connected, *coordinator_restarted);
    {
      absl::MutexLock lock(&mu_);
      stream_ = nullptr;  // no new calls on it; OnSessionDone fails those in flight
      PublishCallStream();
    }
    stream->Cancel();
    stream->WaitDone();
    bool was_connected;
    {
      absl::MutexLock lock(&mu_);
      was_connected = session_opened_;
      session_opened_ = false;
      connected_ = false;
      PublishCallStream();
      if (stopping_ || leaving_) return;  // a departure: the coordinator ended the session
    }
    ever_connected = ever_connected || was_connected;
    if (IsTerminal(end)) return SetFatal(end);
    PHX_LOG(WARNING) << "task " << config_.task_id << ": session ended (" << end
                     << "); reconnecting";
    if (was_connected) backoff.Reset();
    if (BackOff(backoff.NextDelay())) return;
  }
}

absl::Status SessionChannel::RunStream(SessionStream& stream, bool reconnect,
                                       bool coordinator_restarted) {
  absl::Time next_heartbeat = clock_.Now();
  while (true) {
    std::deque<coord::SessionEvent> events;
    std::optional<absl::Status> done;
    absl::Duration interval, timeout;
    absl::Time last_contact;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !events_.empty() || stream_done_.has_value();
      };
      clock_.AwaitWithDeadline(&mu_, absl::Condition(&wake), next_heartbeat);
      if (stopping_) return absl::CancelledError("client stopping");
      events.swap(events_);
      if (events.empty()) done = stream_done_;
      interval = heartbeat_interval_;
      timeout = heartbeat_timeout_;
      absl::MutexLock calls_lock(&calls_mu_);
      if (!events.empty()) last_contact_ = clock_.Now();
      last_contact = last_contact_;
    }
    for (coord::SessionEvent& event : events) {
      Dispatch(std::move(event), reconnect, coordinator_restarted);
    }
    if (done.has_value()) return *done;
    const absl::Time now = clock_.Now();
    if (now >= next_heartbeat) {
      stream.SendHeartbeat(absl::ToUnixMicros(now));
      next_heartbeat = now + interval;
    }
    if (now - last_contact > timeout) {
      // The coordinator stopped answering (hung or partitioned): drop the stream and reconnect.
      stream.Cancel();
    }
  }
}

void SessionChannel::PublishCallStream() {
  absl::MutexLock lock(&calls_mu_);
  call_stream_ = connected_ ? stream_ : nullptr;
}

void SessionChannel::Dispatch(coord::SessionEvent event, bool reconnect,
                              bool coordinator_restarted) {
  if (std::holds_alternative<JobSnapshot>(event)) {
    {
      absl::MutexLock lock(&mu_);
      connected_ = true;
      session_opened_ = true;
      PublishCallStream();
    }
    if (reconnect && callbacks_.on_reconnect) callbacks_.on_reconnect(coordinator_restarted);
  } else if (const auto* info = std::get_if<TaskInfo>(&event)) {
    if (info->task_id != config_.task_id && callbacks_.on_peer_change) {
      callbacks_.on_peer_change(*info);
    }
  } else if (const auto* error = std::get_if<ErrorReport>(&event)) {
    if (callbacks_.on_error) callbacks_.on_error(*error);
  } else if (const auto* round = std::get_if<PreemptionRound>(&event)) {
    listener_.OnPreemptionRound(*round);
  }
}

}  // namespace phalanx::client
