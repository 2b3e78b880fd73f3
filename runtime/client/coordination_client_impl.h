// CoordinationClientImpl: the CoordinationClient. Its session (registration, heartbeats, events
// and the hot calls) rides the session wire by default (ADR 0005: one connection per process,
// each task a stream on it) or a gRPC Session stream (PHALANX_SESSION_TRANSPORT=grpc, or where
// the coordinator has no wire); every other call is a unary gRPC call on the client's own
// channel. Composed of three parts, each with its own header:
//   SessionChannel   (session_channel.h)    the session thread: registration, heartbeats,
//                                           events, reconnects over either transport
//   RpcCaller        (rpc_caller.h)         unary calls with the token and a deadline
//   SyncPointTracker (sync_point_tracker.h) what ReachedSyncPoint answers
// This class converts between the client's types and the protos (one place, as RpcHandler is
// on the server) and sends each call on the session when one is open, as an RPC otherwise.
// Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "runtime/client/client_config.h"
#include "runtime/client/coordination_client.h"
#include "runtime/client/rpc_caller.h"
#include "runtime/client/session_channel.h"
#include "runtime/client/sync_point_tracker.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::client {

class CoordinationClientImpl final : public CoordinationClient, private SessionChannel::Listener {
 public:
  // Does not connect yet (see Connect). InvalidArgument for an unusable config.
  static absl::StatusOr<std::unique_ptr<CoordinationClientImpl>> Create(
      ClientConfig config, ClientCallbacks callbacks = {},
      base::Clock& clock = base::RealClock::Get());
  // Stops the session. Without a prior Shutdown() the service sees this task's session break.
  ~CoordinationClientImpl() override;

  TaskRef task() const override { return {config_.task_id, config_.incarnation}; }
  int num_tasks() const override { return config_.num_tasks; }

  absl::Status Connect(absl::Duration timeout) override;
  absl::Status WaitUntilConnected(absl::Duration timeout) override;
  bool connected() const override;

  absl::Status Barrier(const std::string& id, absl::Duration timeout,
                       const std::vector<int>& tasks = {}) override;
  void BarrierAsync(const std::string& id, absl::Duration timeout, const std::vector<int>& tasks,
                    absl::AnyInvocable<void(absl::Status) &&> done) override;
  absl::Status CancelBarrier(const std::string& id) override;
  void CancelBarrierAsync(const std::string& id,
                          absl::AnyInvocable<void(absl::Status) &&> done) override;
  absl::Status KvInsert(const std::string& key, const std::string& value,
                        bool allow_overwrite) override;
  absl::StatusOr<std::string> KvGet(const std::string& key, absl::Duration timeout) override;
  void KvInsertAsync(const std::string& key, const std::string& value, bool allow_overwrite,
                     absl::AnyInvocable<void(absl::Status) &&> done) override;
  void KvGetAsync(const std::string& key, absl::Duration timeout,
                  absl::AnyInvocable<void(absl::StatusOr<std::string>) &&> done) override;
  absl::StatusOr<std::string> KvTryGet(const std::string& key) override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> KvGetDir(
      const std::string& directory) override;
  absl::StatusOr<int> KvDelete(const std::string& key) override;
  absl::StatusOr<int64_t> KvAdd(const std::string& key, int64_t delta) override;
  absl::StatusOr<CompareSetResult> KvCompareAndSet(const std::string& key,
                                                   const std::optional<std::string>& expected,
                                                   const std::string& desired) override;
  absl::Status ReportError(const std::string& message) override;
  absl::Status ReportRolledBack(const std::string& recovery, absl::Duration rolled_back) override;
  absl::Status ReportStepping() override;
  absl::StatusOr<JobSnapshot> WatchJobState(uint64_t known_version,
                                            absl::Duration timeout) override;
  absl::StatusOr<std::vector<TaskRef>> GetAliveTasks(const std::vector<int>& tasks,
                                                     absl::Duration timeout) override;
  absl::StatusOr<PreemptionRound> NotifyPreemption(const PreemptionNotice& notice) override;
  absl::StatusOr<bool> ReachedSyncPoint(int64_t step) override;
  absl::Status Shutdown(absl::Duration timeout) override;
  absl::Status Leave(const std::string& reason, absl::Duration timeout) override;

 private:
  using Stub = RpcCaller::Stub;

  CoordinationClientImpl(ClientConfig config, ClientCallbacks callbacks, base::Clock& clock);

  // The RPC deadline for a call that itself waits `timeout`.
  absl::Duration WaitingDeadline(absl::Duration timeout) const;
  // Sends `request` on the session when one is open (cheaper than an RPC: no call set-up per
  // request) and as the unary `method` with `deadline` otherwise. `field` is where the request
  // goes in a SessionCall; `done` gets the status and the response's value, if it has one.
  template <typename Req, typename Resp>
  void CallOnSessionOrRpc(Req* (coord::v1::SessionCall::*field)(),
                          RpcCaller::Method<Req, Resp> method, Req request, absl::Duration deadline,
                          SessionChannel::CallDone done);
  // The same for a short call whose answer is its unary RPC's whole response (on the session
  // it comes serialized in the CallResult's value); waits for it.
  template <typename Req, typename Resp>
  absl::StatusOr<Resp> CallForResponse(Req* (coord::v1::SessionCall::*field)(),
                                       RpcCaller::Method<Req, Resp> method, Req request);

  // SessionChannel::Listener (session thread).
  void OnCoordinatorRestarted() override;
  void OnPreemptionRound(const PreemptionRound& round) override;
  // Sends this task's early report for `round` (async) and feeds the answer to the tracker.
  void ReportSyncStepAsync(const PreemptionRound& round, int64_t step);
  coord::v1::ReportSyncStepRequest SyncStepReport(const PreemptionRound& round, int64_t step) const;

  const ClientConfig config_;
  const ClientCallbacks callbacks_;
  base::Clock& clock_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
  std::unique_ptr<RpcCaller> rpc_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // no new early reports
  SyncPointTracker sync_ ABSL_GUARDED_BY(mu_);
  // ReportStepping reached this coordinator (a restarted one has forgotten it).
  bool stepping_reported_ ABSL_GUARDED_BY(mu_) = false;
  // The coordinator answered a session key-value call (add, try-get, compare-and-set, delete)
  // Unimplemented: it predates them, so they go as unary RPCs.
  std::atomic<bool> session_lacks_kv_calls_{false};

  // Last: its thread calls into the members above, so it is stopped (destroyed) first.
  std::unique_ptr<SessionChannel> session_;
};

}  // namespace phalanx::client
