#include "runtime/coordination/rpc_handler.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/coordination/proto_convert.h"
#include "runtime/coordination/session_call_table.h"

namespace phalanx::coord {
namespace {

absl::Status MissingTask() { return absl::InvalidArgumentError("request has no task"); }

// Milliseconds from the wire; negative values reach the service, which rejects them.
absl::Duration Millis(int64_t ms) { return absl::Milliseconds(ms); }

void Fail(RpcHandler::Done done, absl::Status status) { std::move(done)(std::move(status)); }

}  // namespace

absl::Status RpcHandler::CheckNotSuperseded(const auth::Principal& principal) {
  if (principal.admin() || principal.is_spare() || !principal.incarnation_bound()) {
    return absl::OkStatus();
  }
  const std::optional<base::Incarnation> newest = service_.NewestIncarnation(principal.task_id);
  if (!newest.has_value() || *newest <= principal.max_incarnation) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("the credential of task ", principal.task_id, " is for incarnation ",
                   principal.max_incarnation, ", superseded by incarnation ", *newest,
                   ": a process of an earlier incarnation may not act for the job"));
}

absl::Status RpcHandler::Register(const pb::RegisterRequest& req, pb::RegisterResponse* resp) {
  if (!req.has_task()) return MissingTask();
  if (!req.job().empty() && req.job() != service_.options().job) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this coordinator serves job '", service_.options().job, "', not '", req.job(), "'"));
  }
  absl::StatusOr<CoordinationService::Registration> reg = service_.Register(FromProto(req.task()));
  if (!reg.ok()) return reg.status();
  resp->set_job(reg->job);
  resp->set_num_tasks(reg->num_tasks);
  resp->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(reg->heartbeat_interval));
  resp->set_heartbeat_timeout_ms(absl::ToInt64Milliseconds(reg->heartbeat_timeout));
  resp->set_coordinator_id(reg->coordinator_id);
  return absl::OkStatus();
}

absl::Status RpcHandler::ReportError(const pb::ReportErrorRequest& req) {
  if (!req.has_task()) return MissingTask();
  return service_.ReportError(FromProto(req.task()), req.message());
}

void RpcHandler::Barrier(const pb::BarrierRequest& req, Done done) {
  if (!req.has_task()) return Fail(std::move(done), MissingTask());
  Barrier(FromProto(req.task()), req, std::move(done));
}

void RpcHandler::Barrier(const TaskRef& task, const pb::BarrierRequest& req, Done done) {
  service_.Barrier(task, req.barrier_id(), Millis(req.timeout_ms()),
                   {req.tasks().begin(), req.tasks().end()}, std::move(done));
}

absl::Status RpcHandler::CancelBarrier(const pb::CancelBarrierRequest& req) {
  if (!req.has_task()) return MissingTask();
  return service_.CancelBarrier(FromProto(req.task()), req.barrier_id());
}

absl::Status RpcHandler::KvInsert(const pb::KeyValueInsertRequest& req) {
  return service_.KvInsert(req.key(), req.value(), req.allow_overwrite());
}

void RpcHandler::KvGet(const pb::KeyValueGetRequest& req, pb::KeyValueGetResponse* resp,
                       Done done) {
  std::optional<TaskRef> waiter;
  if (req.has_task()) waiter = FromProto(req.task());
  KvGet(waiter, req, [resp, done = std::move(done)](absl::StatusOr<std::string> value) mutable {
    if (value.ok()) resp->set_value(*std::move(value));
    std::move(done)(value.status());
  });
}

void RpcHandler::KvGet(std::optional<TaskRef> waiter, const pb::KeyValueGetRequest& req,
                       ValueCallback done) {
  service_.KvGet(req.key(), waiter, Millis(req.timeout_ms()), std::move(done));
}

absl::Status RpcHandler::KvTryGet(const pb::KeyValueTryGetRequest& req,
                                  pb::KeyValueGetResponse* resp) {
  absl::StatusOr<std::string> value = service_.KvTryGet(req.key());
  if (!value.ok()) return value.status();
  resp->set_value(*std::move(value));
  return absl::OkStatus();
}

absl::Status RpcHandler::KvGetDir(const pb::KeyValueGetDirRequest& req,
                                  pb::KeyValueGetDirResponse* resp) {
  if (req.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size must not be negative, got ", req.page_size()));
  }
  auto page = service_.KvGetDir(req.directory(), req.page_token(), req.page_size() > 0);
  if (!page.ok()) return page.status();
  // The service caps a page at --kv_dir_max_entries; a smaller page_size cuts it further.
  const size_t wanted = req.page_size() > 0 ? static_cast<size_t>(req.page_size()) : SIZE_MAX;
  if (page->entries.size() > wanted) {
    page->entries.resize(wanted);
    page->next_page_token = page->entries.back().first;
  }
  for (auto& [key, value] : page->entries) {
    pb::KeyValueEntry* entry = resp->add_entries();
    entry->set_key(key);
    entry->set_value(std::move(value));
  }
  resp->set_next_page_token(std::move(page->next_page_token));
  return absl::OkStatus();
}

absl::Status RpcHandler::KvDelete(const pb::KeyValueDeleteRequest& req,
                                  pb::KeyValueDeleteResponse* resp) {
  absl::StatusOr<int> deleted = service_.KvDelete(req.key());
  if (!deleted.ok()) return deleted.status();
  resp->set_deleted(*deleted);
  return absl::OkStatus();
}

absl::Status RpcHandler::KvAdd(const pb::KeyValueAddRequest& req, pb::KeyValueAddResponse* resp) {
  absl::StatusOr<int64_t> sum = service_.KvAdd(req.key(), req.delta());
  if (!sum.ok()) return sum.status();
  resp->set_value(*sum);
  return absl::OkStatus();
}

absl::Status RpcHandler::KvCompareAndSet(const pb::KeyValueCompareAndSetRequest& req,
                                         pb::KeyValueCompareAndSetResponse* resp) {
  std::optional<std::string> expected;
  if (req.has_expected()) expected = req.expected();
  absl::StatusOr<CompareSetResult> result =
      service_.KvCompareAndSet(req.key(), expected, req.desired());
  if (!result.ok()) return result.status();
  resp->set_swapped(result->swapped);
  if (result->value.has_value()) resp->set_value(*std::move(result->value));
  return absl::OkStatus();
}

void RpcHandler::WatchJobState(const pb::WatchJobStateRequest& req, pb::WatchJobStateResponse* resp,
                               Done done) {
  service_.WatchJobState(req.known_version(), Millis(req.timeout_ms()),
                         [resp, done = std::move(done)](JobSnapshot snapshot) mutable {
                           *resp->mutable_state() = ToProto(snapshot);
                           std::move(done)(absl::OkStatus());
                         });
}

void RpcHandler::GetAliveTasks(const pb::GetAliveTasksRequest& req, pb::GetAliveTasksResponse* resp,
                               Done done) {
  if (!req.has_task()) return Fail(std::move(done), MissingTask());
  service_.GetAliveTasks(
      FromProto(req.task()), {req.tasks().begin(), req.tasks().end()}, Millis(req.timeout_ms()),
      [resp, done = std::move(done)](absl::StatusOr<std::vector<TaskRef>> alive) mutable {
        if (alive.ok()) {
          for (const TaskRef& ref : *alive) *resp->add_alive() = ToProto(ref);
        }
        std::move(done)(alive.status());
      });
}

absl::Status RpcHandler::NotifyPreemption(const pb::NotifyPreemptionRequest& req,
                                          pb::NotifyPreemptionResponse* resp) {
  if (req.deadline_unix_micros() < 0) {
    return absl::InvalidArgumentError("preemption deadline must not be negative");
  }
  PreemptionNotice notice{req.reason(),
                          FromUnixMicrosOrInfinite(req.deadline_unix_micros()),
                          {req.affected_tasks().begin(), req.affected_tasks().end()}};
  auto round = service_.NotifyPreemption(std::move(notice));
  if (!round.ok()) return round.status();
  resp->set_round(round->first.round);
  resp->set_already_open(round->second);
  return absl::OkStatus();
}

absl::Status RpcHandler::ReportRolledBack(const pb::ReportRolledBackRequest& req,
                                          pb::ReportRolledBackResponse* resp) {
  if (!req.has_task()) return MissingTask();
  if (!std::isfinite(req.seconds()) || req.seconds() < 0 ||
      req.seconds() > absl::ToDoubleSeconds(RollbackLedger::kMaxReport)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rolled-back seconds must be finite and between 0 and ",
                     absl::ToDoubleSeconds(RollbackLedger::kMaxReport)));
  }
  absl::StatusOr<double> total = service_.ReportRolledBack(FromProto(req.task()), req.recovery(),
                                                           absl::Seconds(req.seconds()));
  if (!total.ok()) return total.status();
  resp->set_total_seconds(*total);
  return absl::OkStatus();
}

absl::Status RpcHandler::ReportStepping(const pb::ReportSteppingRequest& req) {
  if (!req.has_task()) return MissingTask();
  return service_.ReportStepping(FromProto(req.task()));
}

void RpcHandler::AwaitAssignment(int slot, const pb::AwaitAssignmentRequest& req,
                                 pb::AwaitAssignmentResponse* resp, Done done) {
  constexpr size_t kMaxPodName = 253;  // a Kubernetes object name
  if (req.pod().empty() || req.pod().size() > kMaxPodName) {
    return Fail(std::move(done), absl::InvalidArgumentError(absl::StrCat(
                                     "a spare must name its pod (1 to ", kMaxPodName, " bytes)")));
  }
  service_.AwaitAssignment(slot, req.pod(), absl::Milliseconds(req.timeout_ms()),
                           [this, resp, done = std::move(done)](
                               absl::StatusOr<std::optional<SpareAssignment>> answer) mutable {
                             if (answer.ok() && answer->has_value()) {
                               resp->set_assigned(true);
                               resp->set_task_id((*answer)->task_id);
                               resp->set_incarnation((*answer)->incarnation);
                               resp->set_num_tasks(service_.options().num_tasks);
                             }
                             std::move(done)(answer.status());
                           });
}

void RpcHandler::ReportSyncStep(const pb::ReportSyncStepRequest& req,
                                pb::ReportSyncStepResponse* resp, Done done) {
  if (!req.has_task()) return Fail(std::move(done), MissingTask());
  if (req.step() < 0) {
    return Fail(std::move(done), absl::InvalidArgumentError("step must not be negative"));
  }
  service_.ReportSyncStep(FromProto(req.task()), req.round(), req.step(),
                          [resp, done = std::move(done)](absl::StatusOr<int64_t> step) mutable {
                            if (step.ok()) resp->set_sync_step(*step);
                            std::move(done)(step.status());
                          });
}

void RpcHandler::Shutdown(const pb::ShutdownRequest& req, Done done) {
  if (!req.has_task()) return Fail(std::move(done), MissingTask());
  service_.Shutdown(FromProto(req.task()), Millis(req.timeout_ms()), std::move(done));
}

// ---- Session stream ----------------------------------------------------------------------------

absl::StatusOr<RpcHandler::Session> RpcHandler::OpenSession(const pb::TaskRef& task,
                                                            std::shared_ptr<SessionOutbox> outbox) {
  const TaskRef ref = FromProto(task);
  absl::StatusOr<uint64_t> id = service_.OpenSession(ref, std::move(outbox));
  if (!id.ok()) return id.status();
  return Session{*id, ref};
}

void RpcHandler::Heartbeat(const Session& session, const pb::SessionRequest& message) {
  if (message.has_leave()) {
    service_.Leave(session.id, message.leave().reason());
    return;
  }
  service_.Heartbeat(session.id,
                     message.has_heartbeat() ? message.heartbeat().sent_unix_micros() : 0);
}

void RpcHandler::CloseSession(const Session& session, const absl::Status& why) {
  service_.CloseSession(session.id, why);
}

void RpcHandler::CloseSessions(const std::vector<Session>& sessions, const absl::Status& why) {
  std::vector<uint64_t> ids;
  ids.reserve(sessions.size());
  for (const Session& session : sessions) ids.push_back(session.id);
  service_.CloseSessions(ids, why);
}

void RpcHandler::SessionCall(const Session& session, const pb::SessionCall& call, CallDone done) {
  const uint64_t id = call.call_id();
  // A short call answered with its unary RPC's whole response, serialized into the value.
  auto answer = [this, id, &done](auto method, const auto& request, auto response) {
    absl::Status status = (this->*method)(request, &response);
    std::move(done)(CallResult{id, std::move(status), response.SerializeAsString()});
  };
  switch (call.call_case()) {
    case pb::SessionCall::kBarrier:
      return Barrier(session.task, call.barrier(),
                     [id, done = std::move(done)](absl::Status status) mutable {
                       std::move(done)(CallResult{id, std::move(status), {}});
                     });
    case pb::SessionCall::kKvInsert:
      return std::move(done)(CallResult{id, KvInsert(call.kv_insert()), {}});
    case pb::SessionCall::kKvGet:
      return KvGet(session.task, call.kv_get(),
                   [id, done = std::move(done)](absl::StatusOr<std::string> value) mutable {
                     if (value.ok()) {
                       std::move(done)(CallResult{id, absl::OkStatus(), *std::move(value)});
                     } else {
                       std::move(done)(CallResult{id, value.status(), {}});
                     }
                   });
    case pb::SessionCall::kKvAdd:
      return answer(&RpcHandler::KvAdd, call.kv_add(), pb::KeyValueAddResponse());
    case pb::SessionCall::kKvTryGet:
      return answer(&RpcHandler::KvTryGet, call.kv_try_get(), pb::KeyValueGetResponse());
    case pb::SessionCall::kKvCompareAndSet:
      return answer(&RpcHandler::KvCompareAndSet, call.kv_compare_and_set(),
                    pb::KeyValueCompareAndSetResponse());
    case pb::SessionCall::kKvDelete:
      return answer(&RpcHandler::KvDelete, call.kv_delete(), pb::KeyValueDeleteResponse());
    default:
      return std::move(done)(CallResult{id, absl::UnimplementedError("unknown session call"), {}});
  }
}

const char* RpcHandler::SessionCallName(const pb::SessionCall& call) {
  const SessionCallEntry* entry = FindSessionCall(call.call_case());
  return entry != nullptr ? entry->metric.data() : "Session.Unknown";  // literals: NUL-terminated
}

}  // namespace phalanx::coord
