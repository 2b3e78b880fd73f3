#include "runtime/client/coordination_client_impl.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "runtime/coordination/proto_convert.h"
#include "runtime/coordination/session_call_table.h"

namespace phalanx::client {

namespace pb = ::phalanx::coord::v1;
using coord::FromProto;
using coord::ToProto;

namespace {

int64_t ToMillis(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

// Blocks for the single result of an async call. The wait is bounded: the service answers by
// the call's own timeout, and a broken session fails every call in flight at once; `backstop`
// only guards against a coordinator that neither answers nor lets the session break, so it
// is real time, like the gRPC deadlines it backs up.
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

// The value a response carries for its caller: a key-value get's value, nothing otherwise.
template <typename Resp>
std::string ValueOf(Resp& response) {
  if constexpr (requires { response.mutable_value(); }) {
    return std::move(*response.mutable_value());
  } else {
    return {};
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinationClientImpl>> CoordinationClientImpl::Create(
    ClientConfig config, ClientCallbacks callbacks, base::Clock& clock) {
  if (config.coordinator.empty()) return absl::InvalidArgumentError("no coordinator address");
  if (config.token.empty()) return absl::InvalidArgumentError("no job token");
  if (config.task_id < 0 || config.task_id >= config.num_tasks) {
    return absl::InvalidArgumentError(absl::StrCat("task id ", config.task_id, " out of range"));
  }
  return std::unique_ptr<CoordinationClientImpl>(
      new CoordinationClientImpl(std::move(config), std::move(callbacks), clock));
}

CoordinationClientImpl::CoordinationClientImpl(ClientConfig config, ClientCallbacks callbacks,
                                               base::Clock& clock)
    : config_(std::move(config)), callbacks_(std::move(callbacks)), clock_(clock), sync_(clock) {
  grpc::ChannelArguments args;
  // This gRPC channel (unary calls, and the session where it rides gRPC) is the task's own
  // connection, even when many tasks share a process (benchmarks, tests): a shared one would
  // make one task's break look like all of theirs. The session wire, the default for the
  // session, shares one connection per process instead, with a stream per task whose own close
  // frame is that task's crash signal (ADR 0005's amendment).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(8 << 20);
  args.SetMaxSendMessageSize(8 << 20);
  // Come back quickly when a restarted coordinator is reachable again: retry after 100 ms,
  // backing off to 1 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // gRPC reads this one as the *minimum connect timeout* of an attempt (default 20 s), not as
  // a backoff. It was 100 ms: on a loaded machine a connection whose TCP and HTTP/2 handshake
  // took longer failed ("connection attempt timed out before receiving SETTINGS frame"), and a
  // call without wait-for-ready failed with it (PythonClient.TorchStore's first kv_try_get, twice
  // in one loaded run). 5 s: a loaded peer gets time to answer, and an address that swallows
  // packets (a coordinator's old pod IP) still costs an attempt at most 5 s.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  channel_ = grpc::CreateCustomChannel(config_.coordinator,
                                       CoordinatorChannelCredentials(config_.tls, args), args);
  stub_ = pb::Coordination::NewStub(channel_);
  rpc_ = std::make_unique<RpcCaller>(*stub_, config_.token);
  SessionChannel::Listener& listener = *this;  // a private base: convert here, in scope
  session_ = std::make_unique<SessionChannel>(config_, callbacks_, clock_, *rpc_, listener);
}

CoordinationClientImpl::~CoordinationClientImpl() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  rpc_->Close();  // cancels the calls in flight, a blocked registration among them
  session_->Stop();
  // Their callbacks touch this object and hold the channel: wait for them (cancelled calls end
  // promptly) so the channel goes with this object, on this thread. A backstop on gRPC, which
  // completes calls in real time, so not on the injected clock.
  if (!rpc_->WaitIdle(absl::Seconds(30))) {
    PHX_LOG(ERROR) << "task " << config_.task_id
                   << ": calls to the coordinator still running 30 s after they were cancelled";
  }
}

absl::Duration CoordinationClientImpl::WaitingDeadline(absl::Duration timeout) const {
  return (timeout > absl::ZeroDuration() ? timeout : absl::Hours(1)) + config_.rpc_margin;
}

template <typename Req, typename Resp>
void CoordinationClientImpl::CallOnSessionOrRpc(Req* (pb::SessionCall::*field)(),
                                                RpcCaller::Method<Req, Resp> method, Req request,
                                                absl::Duration deadline,
                                                SessionChannel::CallDone done) {
  pb::SessionCall call;
  *(call.*field)() = std::move(request);
  // Only the calls in the session-call table may ride the session (the server answers any
  // other with Unimplemented).
  assert(coord::FindSessionCall(call.call_case()) != nullptr);
  if (session_->TrySend(call, done)) return;
  // No session (or too big for it): `call` and `done` are untouched.
  rpc_->CallAsync<Req, Resp>(method, std::move(*(call.*field)()), deadline,
                             [done = std::move(done)](absl::Status status, Resp response) mutable {
                               std::move(done)(std::move(status), ValueOf(response));
                             });
}

template <typename Req, typename Resp>
absl::StatusOr<Resp> CoordinationClientImpl::CallForResponse(Req* (pb::SessionCall::*field)(),
                                                             RpcCaller::Method<Req, Resp> method,
                                                             Req request) {
  pb::SessionCall call;
  *(call.*field)() = std::move(request);
  assert(coord::FindSessionCall(call.call_case()) != nullptr);
  Await<absl::StatusOr<Resp>> result;
  SessionChannel::CallDone done = [answer = result.Callback()](absl::Status status,
                                                               std::string value) mutable {
    if (!status.ok()) return std::move(answer)(std::move(status));
    Resp response;
    if (!response.ParseFromString(value)) {
      return std::move(answer)(absl::InternalError("the coordinator's answer does not parse"));
    }
    std::move(answer)(std::move(response));
  };
  const bool on_session = !session_lacks_kv_calls_.load(std::memory_order_relaxed);
  if (on_session && session_->TrySend(call, done)) {
    absl::StatusOr<Resp> answer = result.Wait(config_.short_call_timeout + config_.rpc_margin);
    if (!absl::IsUnimplemented(answer.status())) return answer;
    // A coordinator older than this client: these calls are unary RPCs there (from now on).
    session_lacks_kv_calls_.store(true, std::memory_order_relaxed);
  }
  // No session (or too big for it, or an older coordinator): `call` is untouched.
  return rpc_->Call(method, *(call.*field)(), config_.short_call_timeout);
}

// ---- Session -----------------------------------------------------------------------------------

absl::Status CoordinationClientImpl::Connect(absl::Duration timeout) {
  // Start() may make the first attempt on this thread (real time, like the transport's own
  // deadlines): what it took comes off the wait.
  const absl::Time begin = absl::Now();
  session_->Start(timeout);
  return session_->WaitUntilConnected(
      std::max(absl::ZeroDuration(), timeout - (absl::Now() - begin)));
}

absl::Status CoordinationClientImpl::WaitUntilConnected(absl::Duration timeout) {
  return session_->WaitUntilConnected(timeout);
}

bool CoordinationClientImpl::connected() const { return session_->connected(); }

// ---- Calls -------------------------------------------------------------------------------------

absl::Status CoordinationClientImpl::Barrier(const std::string& id, absl::Duration timeout,
                                             const std::vector<int>& tasks) {
  Await<absl::Status> result;
  BarrierAsync(id, timeout, tasks, result.Callback());
  return result.Wait(WaitingDeadline(timeout) + config_.rpc_margin);
}

void CoordinationClientImpl::BarrierAsync(const std::string& id, absl::Duration timeout,
                                          const std::vector<int>& tasks,
                                          absl::AnyInvocable<void(absl::Status) &&> done) {
  pb::BarrierRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_barrier_id(id);
  request.set_timeout_ms(ToMillis(timeout));
  for (int t : tasks) request.add_tasks(t);
  CallOnSessionOrRpc(&pb::SessionCall::mutable_barrier, &Stub::async::Barrier, std::move(request),
                     WaitingDeadline(timeout),
                     [done = std::move(done)](absl::Status status, std::string) mutable {
                       std::move(done)(std::move(status));
                     });
}

void CoordinationClientImpl::CancelBarrierAsync(const std::string& id,
                                                absl::AnyInvocable<void(absl::Status) &&> done) {
  pb::CancelBarrierRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_barrier_id(id);
  rpc_->CallAsync<pb::CancelBarrierRequest, pb::CancelBarrierResponse>(
      &Stub::async::CancelBarrier, std::move(request), config_.short_call_timeout,
      [done = std::move(done)](absl::Status status, pb::CancelBarrierResponse) mutable {
        std::move(done)(std::move(status));
      });
}

absl::Status CoordinationClientImpl::CancelBarrier(const std::string& id) {
  pb::CancelBarrierRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_barrier_id(id);
  return rpc_->Call(&Stub::async::CancelBarrier, request, config_.short_call_timeout).status();
}

void CoordinationClientImpl::KvInsertAsync(const std::string& key, const std::string& value,
                                           bool allow_overwrite,
                                           absl::AnyInvocable<void(absl::Status) &&> done) {
  pb::KeyValueInsertRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_allow_overwrite(allow_overwrite);
  CallOnSessionOrRpc(&pb::SessionCall::mutable_kv_insert, &Stub::async::KeyValueInsert,
                     std::move(request), config_.short_call_timeout,
                     [done = std::move(done)](absl::Status status, std::string) mutable {
                       std::move(done)(std::move(status));
                     });
}

void CoordinationClientImpl::KvGetAsync(
    const std::string& key, absl::Duration timeout,
    absl::AnyInvocable<void(absl::StatusOr<std::string>) &&> done) {
  pb::KeyValueGetRequest request;
  request.set_key(key);
  request.set_timeout_ms(ToMillis(timeout));
  *request.mutable_task() = ToProto(task());
  CallOnSessionOrRpc(&pb::SessionCall::mutable_kv_get, &Stub::async::KeyValueGet,
                     std::move(request), WaitingDeadline(timeout),
                     [done = std::move(done)](absl::Status status, std::string value) mutable {
                       if (status.ok()) {
                         std::move(done)(std::move(value));
                       } else {
                         std::move(done)(std::move(status));
                       }
                     });
}

absl::Status CoordinationClientImpl::KvInsert(const std::string& key, const std::string& value,
                                              bool allow_overwrite) {
  Await<absl::Status> result;
  KvInsertAsync(key, value, allow_overwrite, result.Callback());
  return result.Wait(config_.short_call_timeout + config_.rpc_margin);
}

absl::StatusOr<std::string> CoordinationClientImpl::KvGet(const std::string& key,
                                                          absl::Duration timeout) {
  Await<absl::StatusOr<std::string>> result;
  KvGetAsync(key, timeout, result.Callback());
  return result.Wait(WaitingDeadline(timeout) + config_.rpc_margin);
}

absl::StatusOr<std::string> CoordinationClientImpl::KvTryGet(const std::string& key) {
  pb::KeyValueTryGetRequest request;
  request.set_key(key);
  absl::StatusOr<pb::KeyValueGetResponse> response = CallForResponse(
      &pb::SessionCall::mutable_kv_try_get, &Stub::async::KeyValueTryGet, std::move(request));
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_value());
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> CoordinationClientImpl::KvGetDir(
    const std::string& directory) {
  // The coordinator bounds each answer (--kv_dir_max_entries / --kv_dir_max_bytes): page until
  // the token comes back empty, so callers still get the whole directory. Not a snapshot: a key
  // inserted or deleted meanwhile may or may not appear; none appears twice.
  constexpr int kPageSize = 1000;
  pb::KeyValueGetDirRequest request;
  request.set_directory(directory);
  request.set_page_size(kPageSize);
  std::vector<std::pair<std::string, std::string>> entries;
  while (true) {
    absl::StatusOr<pb::KeyValueGetDirResponse> response =
        rpc_->Call(&Stub::async::KeyValueGetDir, request, config_.short_call_timeout);
    if (!response.ok()) return response.status();
    for (pb::KeyValueEntry& entry : *response->mutable_entries()) {
      entries.emplace_back(std::move(*entry.mutable_key()), std::move(*entry.mutable_value()));
    }
    if (response->next_page_token().empty()) return entries;
    if (response->entries_size() == 0) {
      // A server that answers an empty page with a token would have us loop for ever.
      return absl::InternalError("coordinator sent an empty directory page with a page token");
    }
    request.set_page_token(std::move(*response->mutable_next_page_token()));
  }
}

absl::StatusOr<int> CoordinationClientImpl::KvDelete(const std::string& key) {
  pb::KeyValueDeleteRequest request;
  request.set_key(key);
  absl::StatusOr<pb::KeyValueDeleteResponse> response = CallForResponse(
      &pb::SessionCall::mutable_kv_delete, &Stub::async::KeyValueDelete, std::move(request));
  if (!response.ok()) return response.status();
  return response->deleted();
}

absl::StatusOr<int64_t> CoordinationClientImpl::KvAdd(const std::string& key, int64_t delta) {
  pb::KeyValueAddRequest request;
  request.set_key(key);
  request.set_delta(delta);
  absl::StatusOr<pb::KeyValueAddResponse> response = CallForResponse(
      &pb::SessionCall::mutable_kv_add, &Stub::async::KeyValueAdd, std::move(request));
  if (!response.ok()) return response.status();
  return response->value();
}

absl::StatusOr<CompareSetResult> CoordinationClientImpl::KvCompareAndSet(
    const std::string& key, const std::optional<std::string>& expected,
    const std::string& desired) {
  pb::KeyValueCompareAndSetRequest request;
  request.set_key(key);
  if (expected.has_value()) request.set_expected(*expected);
  request.set_desired(desired);
  absl::StatusOr<pb::KeyValueCompareAndSetResponse> response =
      CallForResponse(&pb::SessionCall::mutable_kv_compare_and_set,
                      &Stub::async::KeyValueCompareAndSet, std::move(request));
  if (!response.ok()) return response.status();
  CompareSetResult result;
  result.swapped = response->swapped();
  if (response->has_value()) result.value = std::move(*response->mutable_value());
  return result;
}

absl::Status CoordinationClientImpl::ReportError(const std::string& message) {
  pb::ReportErrorRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_message(message);
  return rpc_->Call(&Stub::async::ReportError, request, config_.short_call_timeout).status();
}

absl::Status CoordinationClientImpl::ReportRolledBack(const std::string& recovery,
                                                      absl::Duration rolled_back) {
  pb::ReportRolledBackRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_recovery(recovery);
  request.set_seconds(absl::ToDoubleSeconds(rolled_back));
  return rpc_->Call(&Stub::async::ReportRolledBack, request, config_.short_call_timeout).status();
}

absl::Status CoordinationClientImpl::ReportStepping() {
  {
    absl::MutexLock lock(&mu_);
    if (stepping_reported_) return absl::OkStatus();  // the per-step call is this check
  }
  pb::ReportSteppingRequest request;
  *request.mutable_task() = ToProto(task());
  absl::Status status =
      rpc_->Call(&Stub::async::ReportStepping, request, config_.short_call_timeout).status();
  if (status.ok() || absl::IsUnimplemented(status)) {  // an older coordinator: do not ask again
    absl::MutexLock lock(&mu_);
    stepping_reported_ = true;
  }
  return status;
}

absl::StatusOr<JobSnapshot> CoordinationClientImpl::WatchJobState(uint64_t known_version,
                                                                  absl::Duration timeout) {
  pb::WatchJobStateRequest request;
  request.set_known_version(known_version);
  request.set_timeout_ms(ToMillis(timeout));
  absl::StatusOr<pb::WatchJobStateResponse> response =
      rpc_->Call(&Stub::async::WatchJobState, request, WaitingDeadline(timeout));
  if (!response.ok()) return response.status();
  return FromProto(response->state());
}

absl::StatusOr<std::vector<TaskRef>> CoordinationClientImpl::GetAliveTasks(
    const std::vector<int>& tasks, absl::Duration timeout) {
  pb::GetAliveTasksRequest request;
  *request.mutable_task() = ToProto(task());
  for (int t : tasks) request.add_tasks(t);
  request.set_timeout_ms(ToMillis(timeout));
  absl::StatusOr<pb::GetAliveTasksResponse> response =
      rpc_->Call(&Stub::async::GetAliveTasks, request, WaitingDeadline(timeout));
  if (!response.ok()) return response.status();
  std::vector<TaskRef> alive;
  for (const pb::TaskRef& ref : response->alive()) alive.push_back(FromProto(ref));
  return alive;
}

absl::StatusOr<PreemptionRound> CoordinationClientImpl::NotifyPreemption(
    const PreemptionNotice& notice) {
  pb::NotifyPreemptionRequest request;
  request.set_reason(notice.reason);
  request.set_deadline_unix_micros(coord::ToUnixMicrosOrZero(notice.deadline));
  for (int t : notice.affected_tasks) request.add_affected_tasks(t);
  absl::StatusOr<pb::NotifyPreemptionResponse> response =
      rpc_->Call(&Stub::async::NotifyPreemption, request, config_.short_call_timeout);
  if (!response.ok()) return response.status();
  return PreemptionRound{response->round(), notice.deadline, notice.reason, notice.affected_tasks};
}

// ---- Preemption sync ---------------------------------------------------------------------------

void CoordinationClientImpl::OnCoordinatorRestarted() {
  absl::MutexLock lock(&mu_);
  sync_.Reset();
  stepping_reported_ = false;
}

void CoordinationClientImpl::OnPreemptionRound(const PreemptionRound& round) {
  std::optional<int64_t> report_step;
  {
    absl::MutexLock lock(&mu_);
    report_step = sync_.OnRound(round);
  }
  if (!report_step.has_value()) return;  // a round this task already knows
  ReportSyncStepAsync(round, *report_step);
  if (callbacks_.on_preemption) callbacks_.on_preemption(round);
}

pb::ReportSyncStepRequest CoordinationClientImpl::SyncStepReport(const PreemptionRound& round,
                                                                 int64_t step) const {
  pb::ReportSyncStepRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_round(round.round);
  request.set_step(step);
  return request;
}

void CoordinationClientImpl::ReportSyncStepAsync(const PreemptionRound& round, int64_t step) {
  absl::Duration timeout;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    timeout = sync_.RoundWait(round) + config_.rpc_margin;
  }
  // The callback may use `this`: the destructor cancels the call and waits for it.
  const uint64_t id = round.round;
  rpc_->CallAsync<pb::ReportSyncStepRequest, pb::ReportSyncStepResponse>(
      &Stub::async::ReportSyncStep, SyncStepReport(round, step), timeout,
      [this, id](absl::Status status, pb::ReportSyncStepResponse response) {
        absl::StatusOr<int64_t> sync_step = response.sync_step();
        if (!status.ok()) sync_step = status;
        absl::MutexLock lock(&mu_);
        sync_.OnEarlyReportAnswer(id, sync_step);
      });
}

absl::StatusOr<bool> CoordinationClientImpl::ReachedSyncPoint(int64_t step) {
  SyncPointTracker::Next next;
  absl::Duration report_wait;
  {
    absl::MutexLock lock(&mu_);
    next = sync_.Check(step);
    if (next.action == SyncPointTracker::Next::Action::kWait) {
      // This step may be the sync step: wait for the agreement (every live peer reports from
      // its session thread, so it does not depend on anyone's training loop).
      const uint64_t id = next.round.round;
      auto settled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sync_.Settled(id); };
      if (!clock_.AwaitWithDeadline(&mu_, absl::Condition(&settled),
                                    clock_.Now() + sync_.RoundWait(next.round))) {
        // The early report's answer never came (a hang here is otherwise invisible).
        PHX_LOG(WARNING) << "task " << config_.task_id << ": no sync step agreed for round " << id
                         << " by its deadline at step " << step << " (" << sync_.DebugString()
                         << "); reporting this step";
      }
      next = sync_.AfterWait(step, id);
    }
    if (next.action == SyncPointTracker::Next::Action::kAnswer) return next.answer;
    report_wait = sync_.RoundWait(next.round);
  }
  // No agreement from the early report (it failed, or never came): report this step now and
  // wait for the answer.
  absl::StatusOr<pb::ReportSyncStepResponse> response =
      rpc_->Call(&Stub::async::ReportSyncStep, SyncStepReport(next.round, step),
                 report_wait + config_.rpc_margin);
  absl::StatusOr<int64_t> sync_step =
      response.ok() ? absl::StatusOr<int64_t>(response->sync_step()) : response.status();
  if (!sync_step.ok()) {
    PHX_LOG(WARNING) << "task " << config_.task_id << ": report of step " << step
                     << " for preemption round " << next.round.round
                     << " failed: " << sync_step.status();
  }
  absl::MutexLock lock(&mu_);
  return sync_.OnOwnReportAnswer(step, next.round.round, sync_step);
}

absl::Status CoordinationClientImpl::Leave(const std::string& reason, absl::Duration timeout) {
  absl::Status left = session_->Leave(reason, timeout);
  if (!absl::IsFailedPrecondition(left)) {
    absl::MutexLock lock(&mu_);
    stopping_ = true;  // the session is over: nothing more goes out
  }
  return left;
}

absl::Status CoordinationClientImpl::Shutdown(absl::Duration timeout) {
  pb::ShutdownRequest request;
  *request.mutable_task() = ToProto(task());
  request.set_timeout_ms(ToMillis(timeout));
  absl::Status status =
      rpc_->Call(&Stub::async::Shutdown, request, WaitingDeadline(timeout)).status();
  if (status.ok()) {
    // The service now counts this task as shut down: end the session quietly.
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    session_->Stop();
  }
  return status;
}

}  // namespace phalanx::client
