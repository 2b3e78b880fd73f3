// RpcHandler: translates coordination protos to CoordinationService calls and back: the one
// place that does, for unary RPCs (coordinator_server.cc) and for the calls and heartbeats carried
// on a Session stream (session_reactor.cc) alike, so both transports convert the same way. Knows
// nothing of gRPC (those two do transport, auth and metrics). Validates the parts of a request
// the service cannot see (missing task, absurd numbers). Thread-safe (stateless).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "common/auth/credentials.h"
#include "runtime/coordination/service.h"
#include "runtime/coordination/session_outbox.h"
#include "runtime/proto/coordination.pb.h"

namespace phalanx::coord {

namespace pb = ::phalanx::coord::v1;

class RpcHandler {
 public:
  // Called exactly once with the call's result; the response is filled before it.
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  explicit RpcHandler(CoordinationService& service) : service_(service) {}

  // Each method's errors are the service method's, plus InvalidArgument for a request that is
  // missing its task or carries a malformed field.
  absl::Status Register(const pb::RegisterRequest& req, pb::RegisterResponse* resp);
  // PermissionDenied when `principal` is a task credential bound to incarnations older than the
  // task's newest registered one: a zombie's job-wide calls (key-value, watch), which name no
  // incarnation that Authorize could check (ADR 0006).
  absl::Status CheckNotSuperseded(const auth::Principal& principal);
  absl::Status ReportError(const pb::ReportErrorRequest& req);
  void Barrier(const pb::BarrierRequest& req, Done done);
  absl::Status CancelBarrier(const pb::CancelBarrierRequest& req);
  absl::Status KvInsert(const pb::KeyValueInsertRequest& req);
  void KvGet(const pb::KeyValueGetRequest& req, pb::KeyValueGetResponse* resp, Done done);
  absl::Status KvTryGet(const pb::KeyValueTryGetRequest& req, pb::KeyValueGetResponse* resp);
  absl::Status KvGetDir(const pb::KeyValueGetDirRequest& req, pb::KeyValueGetDirResponse* resp);
  absl::Status KvDelete(const pb::KeyValueDeleteRequest& req, pb::KeyValueDeleteResponse* resp);
  absl::Status KvAdd(const pb::KeyValueAddRequest& req, pb::KeyValueAddResponse* resp);
  absl::Status KvCompareAndSet(const pb::KeyValueCompareAndSetRequest& req,
                               pb::KeyValueCompareAndSetResponse* resp);
  void WatchJobState(const pb::WatchJobStateRequest& req, pb::WatchJobStateResponse* resp,
                     Done done);
  void GetAliveTasks(const pb::GetAliveTasksRequest& req, pb::GetAliveTasksResponse* resp,
                     Done done);
  absl::Status NotifyPreemption(const pb::NotifyPreemptionRequest& req,
                                pb::NotifyPreemptionResponse* resp);
  absl::Status ReportRolledBack(const pb::ReportRolledBackRequest& req,
                                pb::ReportRolledBackResponse* resp);
  absl::Status ReportStepping(const pb::ReportSteppingRequest& req);
  // For spare `slot` (its credential's): fills resp's assignment, not its credential (the
  // server, which holds the job token, adds that). InvalidArgument for a missing or long pod name.
  void AwaitAssignment(int slot, const pb::AwaitAssignmentRequest& req,
                       pb::AwaitAssignmentResponse* resp, Done done);
  void ReportSyncStep(const pb::ReportSyncStepRequest& req, pb::ReportSyncStepResponse* resp,
                      Done done);
  void Shutdown(const pb::ShutdownRequest& req, Done done);

  // ---- The Session stream's messages (SessionReactor is their transport) ----
  // A session speaks for the task that opened it: its calls act for that task, whatever task
  // their requests name (a session is already tied to one incarnation, so a mismatch cannot
  // be honoured anyway), and every message on it counts as a heartbeat.
  struct Session {
    uint64_t id = 0;
    TaskRef task;
  };
  // Errors: as CoordinationService::OpenSession.
  absl::StatusOr<Session> OpenSession(const pb::TaskRef& task,
                                      std::shared_ptr<SessionOutbox> outbox);
  // Any message but `open` and a call; only a heartbeat carries the time its ack echoes. A
  // `leave` is the task's departure (CoordinationService::Leave).
  void Heartbeat(const Session& session, const pb::SessionRequest& message);
  // The stream ended (`why`); see CoordinationService::CloseSession.
  void CloseSession(const Session& session, const absl::Status& why);
  // Many streams ended at once (their connection did); see CoordinationService::CloseSessions.
  void CloseSessions(const std::vector<Session>& sessions, const absl::Status& why);
  // Runs a call carried on the stream. `done` gets its result exactly once, with the call's id;
  // errors are those of the unary method of the same name, Unimplemented for an unknown call.
  using CallDone = absl::AnyInvocable<void(CallResult) &&>;
  void SessionCall(const Session& session, const pb::SessionCall& call, CallDone done);
  // The name per-method metrics count a session call under ("Session.Barrier"). Beside
  // SessionCall so that the calls a session can carry are listed in one file.
  static const char* SessionCallName(const pb::SessionCall& call);

 private:
  // The conversions both transports share; `task` is the caller (or the waiter, for KvGet).
  void Barrier(const TaskRef& task, const pb::BarrierRequest& req, Done done);
  void KvGet(std::optional<TaskRef> waiter, const pb::KeyValueGetRequest& req, ValueCallback done);

  CoordinationService& service_;
};

}  // namespace phalanx::coord
