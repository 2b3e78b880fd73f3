// RpcHandler: translates coordination protos to CoordinationService calls and back. Knows
// nothing of gRPC (grpc_server.h does transport, auth and metrics). Validates the parts of a
// request the service cannot see (missing task, absurd numbers). Thread-safe (stateless).
#pragma once

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "runtime/coordination/service.h"
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
  absl::Status ReportError(const pb::ReportErrorRequest& req);
  void Barrier(const pb::BarrierRequest& req, Done done);
  absl::Status CancelBarrier(const pb::CancelBarrierRequest& req);
  absl::Status KvInsert(const pb::KeyValueInsertRequest& req);
  void KvGet(const pb::KeyValueGetRequest& req, pb::KeyValueGetResponse* resp, Done done);
  absl::Status KvTryGet(const pb::KeyValueTryGetRequest& req, pb::KeyValueGetResponse* resp);
  absl::Status KvGetDir(const pb::KeyValueGetDirRequest& req, pb::KeyValueGetDirResponse* resp);
  absl::Status KvDelete(const pb::KeyValueDeleteRequest& req, pb::KeyValueDeleteResponse* resp);
  void WatchJobState(const pb::WatchJobStateRequest& req, pb::WatchJobStateResponse* resp,
                     Done done);
  void GetAliveTasks(const pb::GetAliveTasksRequest& req, pb::GetAliveTasksResponse* resp,
                     Done done);
  absl::Status NotifyPreemption(const pb::NotifyPreemptionRequest& req,
                                pb::NotifyPreemptionResponse* resp);
  void ReportSyncStep(const pb::ReportSyncStepRequest& req, pb::ReportSyncStepResponse* resp,
                      Done done);
  void Shutdown(const pb::ShutdownRequest& req, Done done);

 private:
  CoordinationService& service_;
};

}  // namespace phalanx::coord
