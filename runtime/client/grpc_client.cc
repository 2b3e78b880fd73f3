#include "runtime/client/grpc_client.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/backoff.h"
#include "common/base/log.h"
#include "runtime/coordination/grpc_status.h"
#include "runtime/coordination/proto_convert.h"
#include "runtime/coordination/token_auth.h"

namespace phalanx::client {

namespace pb = ::phalanx::coord::v1;
using coord::FromProto;
using coord::ToProto;

namespace {

// A status that means this incarnation is finished for good: reconnecting cannot help.
bool IsTerminal(const absl::Status& status) {
  return absl::IsAborted(status) || absl::IsUnauthenticated(status) ||
         absl::IsInvalidArgument(status) || absl::IsPermissionDenied(status);
}

int64_t ToMillis(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcCoordinationClient>> GrpcCoordinationClient::Create(
    ClientConfig config, ClientCallbacks callbacks, base::Clock& clock) {
  if (config.coordinator.empty()) return absl::InvalidArgumentError("no coordinator address");
  if (config.token.empty()) return absl::InvalidArgumentError("no job token");
  if (config.task_id < 0 || config.task_id >= config.num_tasks) {
    return absl::InvalidArgumentError(absl::StrCat("task id ", config.task_id, " out of range"));
  }
  return std::unique_ptr<GrpcCoordinationClient>(
      new GrpcCoordinationClient(std::move(config), std::move(callbacks), clock));
}

GrpcCoordinationClient::GrpcCoordinationClient(ClientConfig config, ClientCallbacks callbacks,
                                               base::Clock& clock)
    : config_(std::move(config)), callbacks_(std::move(callbacks)), clock_(clock) {
  grpc::ChannelArguments args;
  // Each task gets its own TCP connection, even when many share a process (benchmarks, tests):
  // a shared connection would make one task's break look like all of theirs.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(8 << 20);
  args.SetMaxSendMessageSize(8 << 20);
  // Come back quickly when a restarted coordinator is reachable again.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(config_.coordinator, grpc::InsecureChannelCredentials(),
                                       args);
  stub_ = pb::Coordination::NewStub(channel_);
}

GrpcCoordinationClient::~GrpcCoordinationClient() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (session_thread_.joinable()) session_thread_.join();
  absl::MutexLock lock(&mu_);
  for (grpc::ClientContext* context : reports_in_flight_) context->TryCancel();
  // Their callbacks touch this object: wait for them (cancelled calls finish promptly).
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return reports_in_flight_.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&none), absl::Seconds(30));
}

template <typename Req, typename Resp>
void GrpcCoordinationClient::CallAsync(AsyncMethod<Req, Resp> method, Req request,
                                       absl::Duration timeout, Reply<Resp> done,
                                       bool wait_for_ready) {
  struct InFlight {
    grpc::ClientContext context;
    Req request;
    Resp response;
    Reply<Resp> done;
  };
  auto* call = new InFlight;
  call->request = std::move(request);
  call->done = std::move(done);
  call->context.AddMetadata(coord::kAuthorizationHeader, "Bearer " + config_.token);
  call->context.set_deadline(absl::ToChronoTime(clock_.Now() + timeout));
  call->context.set_wait_for_ready(wait_for_ready);
  (stub_->async()->*method)(&call->context, &call->request, &call->response,
                            [call](grpc::Status status) {
                              std::move(call->done)(coord::FromGrpcStatus(status),
                                                    std::move(call->response));
                              delete call;
                            });
}

template <typename Req, typename Resp>
absl::StatusOr<Resp> GrpcCoordinationClient::Call(AsyncMethod<Req, Resp> method, Req request,
                                                  absl::Duration timeout, bool wait_for_ready) {
  absl::Notification done;
  absl::StatusOr<Resp> result;
  CallAsync<Req, Resp>(
      method, std::move(request), timeout,
      [&](absl::Status status, Resp response) {
        if (status.ok()) {
          result = std::move(response);
        } else {
          result = status;
        }
        done.Notify();
      },
      wait_for_ready);
  done.WaitForNotification();  // gRPC completes every call by its deadline
  return result;
}

absl::Duration GrpcCoordinationClient::WaitingDeadline(absl::Duration timeout) const {
  return (timeout > absl::ZeroDuration() ? timeout : absl::Hours(1)) + config_.rpc_margin;
}

// ---- Session ---------------------------------------------------------------------------------

absl::Status GrpcCoordinationClient::Connect(absl::Duration timeout) {
  {
    absl::MutexLock lock(&mu_);
    if (!started_) {
      started_ = true;
      session_thread_ = std::thread([this] { SessionLoop(); });
    }
  }
  return WaitUntilConnected(timeout);
}

absl::Status GrpcCoordinationClient::WaitUntilConnected(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return connected_ || fatal_.has_value() || stopping_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (fatal_.has_value()) return *fatal_;
  if (connected_) return absl::OkStatus();
  if (!started_) return absl::FailedPreconditionError("Connect() was not called");
  return absl::DeadlineExceededError(absl::StrCat("task ", config_.task_id,
                                                  " could not connect to the coordinator at ",
                                                  config_.coordinator, " within ",
                                                  absl::FormatDuration(timeout)));
}

bool GrpcCoordinationClient::connected() const {
  absl::MutexLock lock(&mu_);
  return connected_;
}

void GrpcCoordinationClient::OnSessionEvent(coord::SessionEvent event) {
  if (auto* result = std::get_if<coord::CallResult>(&event)) {
    // Call results go straight to their caller, not through the session thread.
    CallDone done;
    {
      absl::MutexLock lock(&mu_);
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
  events_.push_back(std::move(event));
}

void GrpcCoordinationClient::OnSessionDone(absl::Status status) {
  absl::flat_hash_map<uint64_t, CallDone> orphans;
  {
    absl::MutexLock lock(&mu_);
    stream_done_ = status;
    stream_ = nullptr;
    connected_ = false;  // callers of WaitUntilConnected wait for the reconnect from now on
    orphans.swap(pending_calls_);
  }
  // A terminal end (this incarnation was retired) keeps its code; anything else is a
  // transport problem the caller may retry after the client reconnects.
  const absl::Status lost =
      IsTerminal(status) ? status
                         : absl::UnavailableError(absl::StrCat(
                               "session to the coordinator ended: ", status.ToString()));
  for (auto& [id, done] : orphans) std::move(done)(lost, "");
}

std::optional<uint64_t> GrpcCoordinationClient::StartSessionCall(coord::v1::SessionCall call,
                                                                 CallDone& done) {
  // A message over the server's limit would end the session and with it the task's life:
  // big requests go as their own RPC, where the limit only fails that call.
  constexpr size_t kMaxSessionCallBytes = 64 << 10;
  if (call.ByteSizeLong() > kMaxSessionCallBytes) return std::nullopt;
  absl::MutexLock lock(&mu_);
  if (stream_ == nullptr || !connected_) return std::nullopt;
  const uint64_t id = next_call_id_++;
  call.set_call_id(id);
  pending_calls_.emplace(id, std::move(done));
  stream_->SendCall(std::move(call));
  return id;
}

namespace {

// Blocks for the single result of an async call. The wait is bounded: the service answers by
// the call's own timeout, and a broken session fails every call in flight at once; `backstop`
// only guards against a coordinator that neither answers nor lets the session break.
template <typename T>
class Await {
 public:
  absl::AnyInvocable<void(T) &&> Callback() {
    return [state = state_](T value) {
      absl::MutexLock lock(&state->mu);
      state->value.emplace(std::move(value));
    };
  }
  T Wait(absl::Duration backstop) {
    absl::MutexLock lock(&state_->mu);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
      return state_->value.has_value();
    };
    if (!state_->mu.AwaitWithTimeout(absl::Condition(&ready), backstop)) {
      return T(absl::DeadlineExceededError("no answer from the coordinator"));
    }
    return std::move(*state_->value);
  }

 private:
  struct State {
    absl::Mutex mu;
    std::optional<T> value ABSL_GUARDED_BY(mu);
  };
  // Shared: a late completion after a backstop timeout must find live state.
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

bool GrpcCoordinationClient::SleepUnlessStopping(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  mu_.AwaitWithTimeout(absl::Condition(&stopping), delay);
  return stopping_;
}

void GrpcCoordinationClient::SetFatal(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (fatal_.has_value() || stopping_) return;
    fatal_ = status;
    connected_ = false;
  }
  PHX_LOG(ERROR) << "task " << config_.task_id << " incarnation " << config_.incarnation
                 << " cannot continue: " << status;
  if (callbacks_.on_fatal) callbacks_.on_fatal(status);
}

void GrpcCoordinationClient::SessionLoop() {
  base::ExponentialBackoff backoff(absl::Milliseconds(50), absl::Seconds(2), 2.0,
                                   config_.task_id * 7919 + config_.incarnation + 1);
  bool ever_connected = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    pb::RegisterRequest request;
    *request.mutable_task() = ToProto(task());
    request.set_job(config_.job);
    absl::StatusOr<pb::RegisterResponse> reg =
        Call(&Stub::async::Register, request, absl::Seconds(2), /*wait_for_ready=*/true);
    if (!reg.ok()) {
      if (IsTerminal(reg.status())) return SetFatal(reg.status());
      if (SleepUnlessStopping(backoff.NextDelay())) return;
      continue;
    }
    if (reg->job() != config_.job || reg->num_tasks() != config_.num_tasks) {
      // Pointed at another job's coordinator (or a mis-sized one): never take part.
      return SetFatal(absl::InvalidArgumentError(absl::StrCat(
          "coordinator at ", config_.coordinator, " serves job '", reg->job(), "' with ",
          reg->num_tasks(), " tasks; this task expects job '", config_.job, "' with ",
          config_.num_tasks)));
    }
    bool coordinator_restarted = false;
    {
      absl::MutexLock lock(&mu_);
      coordinator_restarted = ever_connected && coordinator_id_ != reg->coordinator_id();
      if (coordinator_restarted) {
        // A new coordinator numbers preemption rounds from 1 again.
        active_round_.reset();
        agreed_.reset();
        reported_.reset();
        report_failed_round_ = 0;
        finished_round_ = 0;
      }
      coordinator_id_ = reg->coordinator_id();
      heartbeat_interval_ = absl::Milliseconds(reg->heartbeat_interval_ms());
      heartbeat_timeout_ = absl::Milliseconds(reg->heartbeat_timeout_ms());
      events_.clear();
      stream_done_.reset();
      last_contact_ = clock_.Now();
    }
    auto stream = std::make_unique<SessionStream>(*stub_, config_.token, task(), *this);
    stream->Start();
    {
      absl::MutexLock lock(&mu_);
      stream_ = stream.get();
    }
    absl::Status end = RunStream(*stream, ever_connected, coordinator_restarted);
    {
      absl::MutexLock lock(&mu_);
      stream_ = nullptr;  // no new calls on it; OnSessionDone fails those in flight
    }
    stream->Cancel();
    stream->WaitDone();
    bool was_connected;
    {
      absl::MutexLock lock(&mu_);
      was_connected = session_opened_;
      session_opened_ = false;
      connected_ = false;
      if (stopping_) return;
    }
    ever_connected = ever_connected || was_connected;
    if (IsTerminal(end)) return SetFatal(end);
    PHX_LOG(WARNING) << "task " << config_.task_id << ": session ended (" << end
                     << "); reconnecting";
    if (was_connected) backoff.Reset();
    if (SleepUnlessStopping(backoff.NextDelay())) return;
  }
}

absl::Status GrpcCoordinationClient::RunStream(SessionStream& stream, bool reconnect,
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
      mu_.AwaitWithDeadline(absl::Condition(&wake), next_heartbeat);
      if (stopping_) return absl::CancelledError("client stopping");
      events.swap(events_);
      if (!events.empty()) last_contact_ = clock_.Now();
      if (events.empty()) done = stream_done_;
      interval = heartbeat_interval_;
      timeout = heartbeat_timeout_;
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

void GrpcCoordinationClient::Dispatch(coord::SessionEvent event, bool reconnect,
                                      bool coordinator_restarted) {
  if (std::holds_alternative<JobSnapshot>(event)) {
    {
      absl::MutexLock lock(&mu_);
      connected_ = true;
      session_opened_ = true;
    }
    if (reconnect && callbacks_.on_reconnect) callbacks_.on_reconnect(coordinator_restarted);
  } else if (const auto* info = std::get_if<TaskInfo>(&event)) {
    if (info->task_id != config_.task_id && callbacks_.on_peer_change) {
      callbacks_.on_peer_change(*info);
    }
  } else if (const auto* error = std::get_if<ErrorReport>(&event)) {
    if (callbacks_.on_error) callbacks_.on_error(*error);
  } else if (const auto* round = std::get_if<PreemptionRound>(&event)) {
    bool fresh = false;
    int64_t report_step = 0;
    {
      absl::MutexLock lock(&mu_);
      if (round->round > finished_round_) {
        fresh = !active_round_.has_value() || active_round_->round != round->round;
        active_round_ = *round;
        if (fresh) {
          // Set with the round, under one lock: ReachedSyncPoint never sees one without the other.
          report_step = next_unchecked_step_;
          reported_ = std::make_pair(round->round, report_step);
        }
      }
    }
    if (fresh) ReportSyncStepAsync(*round, report_step);
    if (fresh && callbacks_.on_preemption) callbacks_.on_preemption(*round);
  }
}

// ---- Calls -------------------------------------------------------------------------------------

absl::Status GrpcCoordinationClient::Barrier(const std::string& id, absl::Duration timeout,
                                             const std::vector<int>& tasks) {
  Await<absl::Status> result;
  BarrierAsync(id, timeout, tasks, result.Callback());
  return result.Wait(WaitingDeadline(timeout) + config_.rpc_margin);
}

void GrpcCoordinationClient::BarrierAsync(const std::string& id, absl::Duration timeout,
                                          const std::vector<int>& tasks,
                                          absl::AnyInvocable<void(absl::Status) &&> done) {
  pb::BarrierRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_barrier_id(id);
  request.set_timeout_ms(ToMillis(timeout));
  for (int t : tasks) request.add_tasks(t);
  pb::SessionCall call;
  *call.mutable_barrier() = request;
  // Shared so the same completion serves whichever path (session or unary) takes the call.
  auto shared_done =
      std::make_shared<absl::AnyInvocable<void(absl::Status) &&>>(std::move(done));
  CallDone via_session = [shared_done](absl::Status status, std::string) {
    std::move(*shared_done)(std::move(status));
  };
  if (StartSessionCall(std::move(call), via_session).has_value()) return;
  CallAsync<pb::BarrierRequest, pb::BarrierResponse>(
      &Stub::async::Barrier, std::move(request), WaitingDeadline(timeout),
      [shared_done](absl::Status status, pb::BarrierResponse) {
        std::move(*shared_done)(std::move(status));
      });
}

void GrpcCoordinationClient::CancelBarrierAsync(const std::string& id,
                                                absl::AnyInvocable<void(absl::Status) &&> done) {
  pb::CancelBarrierRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_barrier_id(id);
  CallAsync<pb::CancelBarrierRequest, pb::CancelBarrierResponse>(
      &Stub::async::CancelBarrier, std::move(request), config_.short_call_timeout,
      [done = std::move(done)](absl::Status status, pb::CancelBarrierResponse) mutable {
        std::move(done)(std::move(status));
      });
}

absl::Status GrpcCoordinationClient::CancelBarrier(const std::string& id) {
  pb::CancelBarrierRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_barrier_id(id);
  return Call(&Stub::async::CancelBarrier, request, config_.short_call_timeout).status();
}

void GrpcCoordinationClient::KvInsertAsync(const std::string& key, const std::string& value,
                                           bool allow_overwrite,
                                           absl::AnyInvocable<void(absl::Status) &&> done) {
  pb::KeyValueInsertRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_allow_overwrite(allow_overwrite);
  pb::SessionCall call;
  *call.mutable_kv_insert() = request;
  auto shared = std::make_shared<absl::AnyInvocable<void(absl::Status) &&>>(std::move(done));
  CallDone via_session = [shared](absl::Status status, std::string) {
    std::move(*shared)(std::move(status));
  };
  if (StartSessionCall(std::move(call), via_session).has_value()) return;
  CallAsync<pb::KeyValueInsertRequest, pb::KeyValueInsertResponse>(
      &Stub::async::KeyValueInsert, std::move(request), config_.short_call_timeout,
      [shared](absl::Status status, pb::KeyValueInsertResponse) {
        std::move(*shared)(std::move(status));
      });
}

void GrpcCoordinationClient::KvGetAsync(
    const std::string& key, absl::Duration timeout,
    absl::AnyInvocable<void(absl::StatusOr<std::string>) &&> done) {
  pb::KeyValueGetRequest request;
  request.set_key(key);
  request.set_timeout_ms(ToMillis(timeout));
  *request.mutable_task() = ToProto(task());
  pb::SessionCall call;
  *call.mutable_kv_get() = request;
  auto shared =
      std::make_shared<absl::AnyInvocable<void(absl::StatusOr<std::string>) &&>>(std::move(done));
  CallDone via_session = [shared](absl::Status status, std::string value) {
    if (status.ok()) {
      std::move(*shared)(std::move(value));
    } else {
      std::move(*shared)(std::move(status));
    }
  };
  if (StartSessionCall(std::move(call), via_session).has_value()) return;
  CallAsync<pb::KeyValueGetRequest, pb::KeyValueGetResponse>(
      &Stub::async::KeyValueGet, std::move(request), WaitingDeadline(timeout),
      [shared](absl::Status status, pb::KeyValueGetResponse response) {
        if (status.ok()) {
          std::move(*shared)(std::move(*response.mutable_value()));
        } else {
          std::move(*shared)(std::move(status));
        }
      });
}

absl::Status GrpcCoordinationClient::KvInsert(const std::string& key, const std::string& value,
                                              bool allow_overwrite) {
  Await<absl::Status> result;
  KvInsertAsync(key, value, allow_overwrite, result.Callback());
  return result.Wait(config_.short_call_timeout + config_.rpc_margin);
}

absl::StatusOr<std::string> GrpcCoordinationClient::KvGet(const std::string& key,
                                                          absl::Duration timeout) {
  Await<absl::StatusOr<std::string>> result;
  KvGetAsync(key, timeout, result.Callback());
  return result.Wait(WaitingDeadline(timeout) + config_.rpc_margin);
}

absl::StatusOr<std::string> GrpcCoordinationClient::KvTryGet(const std::string& key) {
  pb::KeyValueTryGetRequest request;
  request.set_key(key);
  absl::StatusOr<pb::KeyValueGetResponse> response =
      Call(&Stub::async::KeyValueTryGet, request, config_.short_call_timeout);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_value());
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> GrpcCoordinationClient::KvGetDir(
    const std::string& directory) {
  pb::KeyValueGetDirRequest request;
  request.set_directory(directory);
  absl::StatusOr<pb::KeyValueGetDirResponse> response =
      Call(&Stub::async::KeyValueGetDir, request, config_.short_call_timeout);
  if (!response.ok()) return response.status();
  std::vector<std::pair<std::string, std::string>> entries;
  for (pb::KeyValueEntry& entry : *response->mutable_entries()) {
    entries.emplace_back(std::move(*entry.mutable_key()), std::move(*entry.mutable_value()));
  }
  return entries;
}

absl::StatusOr<int> GrpcCoordinationClient::KvDelete(const std::string& key) {
  pb::KeyValueDeleteRequest request;
  request.set_key(key);
  absl::StatusOr<pb::KeyValueDeleteResponse> response =
      Call(&Stub::async::KeyValueDelete, request, config_.short_call_timeout);
  if (!response.ok()) return response.status();
  return response->deleted();
}

absl::Status GrpcCoordinationClient::ReportError(const std::string& message) {
  pb::ReportErrorRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_message(message);
  return Call(&Stub::async::ReportError, request, config_.short_call_timeout).status();
}

absl::StatusOr<JobSnapshot> GrpcCoordinationClient::WatchJobState(uint64_t known_version,
                                                                  absl::Duration timeout) {
  pb::WatchJobStateRequest request;
  request.set_known_version(known_version);
  request.set_timeout_ms(ToMillis(timeout));
  absl::StatusOr<pb::WatchJobStateResponse> response =
      Call(&Stub::async::WatchJobState, request, WaitingDeadline(timeout));
  if (!response.ok()) return response.status();
  return FromProto(response->state());
}

absl::StatusOr<std::vector<TaskRef>> GrpcCoordinationClient::GetAliveTasks(
    const std::vector<int>& tasks, absl::Duration timeout) {
  pb::GetAliveTasksRequest request;
  *request.mutable_task() = ToProto(task());
  for (int t : tasks) request.add_tasks(t);
  request.set_timeout_ms(ToMillis(timeout));
  absl::StatusOr<pb::GetAliveTasksResponse> response =
      Call(&Stub::async::GetAliveTasks, request, WaitingDeadline(timeout));
  if (!response.ok()) return response.status();
  std::vector<TaskRef> alive;
  for (const pb::TaskRef& ref : response->alive()) alive.push_back(FromProto(ref));
  return alive;
}

absl::StatusOr<PreemptionRound> GrpcCoordinationClient::NotifyPreemption(
    const PreemptionNotice& notice) {
  pb::NotifyPreemptionRequest request;
  request.set_reason(notice.reason);
  request.set_deadline_unix_micros(coord::ToUnixMicrosOrZero(notice.deadline));
  for (int t : notice.affected_tasks) request.add_affected_tasks(t);
  absl::StatusOr<pb::NotifyPreemptionResponse> response =
      Call(&Stub::async::NotifyPreemption, request, config_.short_call_timeout);
  if (!response.ok()) return response.status();
  return PreemptionRound{response->round(), notice.deadline, notice.reason,
                         notice.affected_tasks};
}

void GrpcCoordinationClient::FinishRoundLocked(uint64_t round) {
  if (active_round_.has_value() && active_round_->round == round) {
    finished_round_ = round;
    active_round_.reset();
  }
}

// Deadline-exceeded or not-open: the round closed without this task.
static bool RoundClosed(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) || absl::IsDeadlineExceeded(status);
}

absl::Duration GrpcCoordinationClient::RoundWait(const PreemptionRound& round) const {
  return std::max(absl::Seconds(1), round.deadline == absl::InfiniteFuture()
                                        ? absl::Minutes(10)
                                        : round.deadline - clock_.Now());
}

coord::v1::ReportSyncStepRequest GrpcCoordinationClient::SyncStepReport(
    const PreemptionRound& round, int64_t step) const {
  pb::ReportSyncStepRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_round(round.round);
  request.set_step(step);
  return request;
}

void GrpcCoordinationClient::ReportSyncStepAsync(const PreemptionRound& round, int64_t step) {
  pb::ReportSyncStepRequest request = SyncStepReport(round, step);
  const absl::Duration wait = RoundWait(round);
  struct InFlight {
    grpc::ClientContext context;
    pb::ReportSyncStepRequest request;
    pb::ReportSyncStepResponse response;
  };
  auto* call = new InFlight;
  call->request = std::move(request);
  call->context.AddMetadata(coord::kAuthorizationHeader, "Bearer " + config_.token);
  call->context.set_deadline(absl::ToChronoTime(clock_.Now() + wait + config_.rpc_margin));
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      delete call;
      return;
    }
    reports_in_flight_.insert(&call->context);
  }
  const uint64_t id = round.round;
  stub_->async()->ReportSyncStep(
      &call->context, &call->request, &call->response, [this, call, id](grpc::Status grpc_status) {
        const absl::Status status = coord::FromGrpcStatus(grpc_status);
        absl::MutexLock lock(&mu_);
        reports_in_flight_.erase(&call->context);
        if (reported_.has_value() && reported_->first == id) {  // else a newer round took over
          if (status.ok()) {
            agreed_ = std::make_pair(id, call->response.sync_step());
          } else if (RoundClosed(status)) {
            FinishRoundLocked(id);  // nothing to sync on any more
          } else {
            report_failed_round_ = id;  // e.g. the coordinator restarting: report again later
          }
        }
        delete call;
      });
}

absl::StatusOr<bool> GrpcCoordinationClient::ReachedSyncPoint(int64_t step) {
  std::optional<PreemptionRound> round;
  std::optional<std::pair<uint64_t, int64_t>> agreed;
  {
    absl::MutexLock lock(&mu_);
    next_unchecked_step_ = std::max(next_unchecked_step_, step + 1);
    if (!active_round_.has_value()) return false;  // the common case: no RPC at all
    round = active_round_;
    const uint64_t id = round->round;
    auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return (agreed_.has_value() && agreed_->first == id) || report_failed_round_ == id ||
             !active_round_.has_value() || active_round_->round != id;
    };
    const bool reported_here = reported_.has_value() && reported_->first == id;
    if (!settled() && reported_here && step < reported_->second) {
      return false;  // below our own report: the sync step (the largest report) is later
    }
    if (!settled() && reported_here) {
      // This step may be the sync step: wait for the agreement (every live peer reports from
      // its session thread, so it does not depend on anyone's training loop).
      mu_.AwaitWithTimeout(absl::Condition(&settled), RoundWait(*round));
    }
    if (!active_round_.has_value() || active_round_->round != id) {
      return false;  // the round closed (deadline) while we waited
    }
    agreed = agreed_;
  }
  if (!agreed.has_value() || agreed->first != round->round) {
    // No agreement from the early report (it failed, or never went out): report this step
    // now and wait for the answer.
    absl::StatusOr<pb::ReportSyncStepResponse> response =
        Call(&Stub::async::ReportSyncStep, SyncStepReport(*round, step),
             RoundWait(*round) + config_.rpc_margin);
    if (!response.ok()) {
      if (RoundClosed(response.status())) {
        absl::MutexLock lock(&mu_);
        FinishRoundLocked(round->round);
      }
      return response.status();
    }
    agreed = std::make_pair(round->round, response->sync_step());
    absl::MutexLock lock(&mu_);
    agreed_ = agreed;
  }
  if (step < agreed->second) return false;
  absl::MutexLock lock(&mu_);
  FinishRoundLocked(agreed->first);
  return step == agreed->second;
}

absl::Status GrpcCoordinationClient::Shutdown(absl::Duration timeout) {
  pb::ShutdownRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_timeout_ms(ToMillis(timeout));
  absl::Status status =
      Call(&Stub::async::Shutdown, request, WaitingDeadline(timeout)).status();
  if (status.ok()) {
    // The service now counts this task as shut down: end the session quietly.
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (session_thread_.joinable()) session_thread_.join();
  }
  return status;
}

}  // namespace phalanx::client
