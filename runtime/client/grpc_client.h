// GrpcCoordinationClient: the CoordinationClient over gRPC, one connection per client (as
// separate ranks would have). A session thread registers the task, keeps its Session stream
// alive with heartbeats, dispatches events to the callbacks, and on a break reconnects with
// backoff and re-registers the same incarnation (a restarted coordinator accepts it; a live
// one that declared this incarnation failed answers Aborted, which is fatal).
// Thread-safe.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "runtime/client/client_config.h"
#include "runtime/client/coordination_client.h"
#include "runtime/client/session_stream.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::client {

class GrpcCoordinationClient final : public CoordinationClient, public SessionStream::Sink {
 public:
  // Does not connect yet (see Connect). InvalidArgument for an unusable config.
  static absl::StatusOr<std::unique_ptr<GrpcCoordinationClient>> Create(
      ClientConfig config, ClientCallbacks callbacks = {},
      base::Clock& clock = base::RealClock::Get());
  // Stops the session. Without a prior Shutdown() the service sees this task's session break.
  ~GrpcCoordinationClient() override;

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
  absl::Status ReportError(const std::string& message) override;
  absl::StatusOr<JobSnapshot> WatchJobState(uint64_t known_version,
                                            absl::Duration timeout) override;
  absl::StatusOr<std::vector<TaskRef>> GetAliveTasks(const std::vector<int>& tasks,
                                                     absl::Duration timeout) override;
  absl::StatusOr<PreemptionRound> NotifyPreemption(const PreemptionNotice& notice) override;
  absl::StatusOr<bool> ReachedSyncPoint(int64_t step) override;
  absl::Status Shutdown(absl::Duration timeout) override;

 private:
  using Stub = coord::v1::Coordination::Stub;
  template <typename Req, typename Resp>
  using AsyncMethod = void (Stub::async::*)(grpc::ClientContext*, const Req*, Resp*,
                                             std::function<void(grpc::Status)>);
  template <typename Resp>
  using Reply = absl::AnyInvocable<void(absl::Status, Resp) &&>;

  GrpcCoordinationClient(ClientConfig config, ClientCallbacks callbacks, base::Clock& clock);

  // One unary call with the job token and a deadline `timeout` from now.
  template <typename Req, typename Resp>
  void CallAsync(AsyncMethod<Req, Resp> method, Req request, absl::Duration timeout,
                 Reply<Resp> done, bool wait_for_ready = false);
  // The blocking form; the wait is bounded by the call's deadline.
  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(AsyncMethod<Req, Resp> method, Req request, absl::Duration timeout,
                            bool wait_for_ready = false);
  // The RPC deadline for a call that itself waits `timeout`.
  absl::Duration WaitingDeadline(absl::Duration timeout) const;

  using CallDone = absl::AnyInvocable<void(absl::Status, std::string) &&>;
  // Sends `call` on the open session and returns its id; nullopt (with `done` untouched) when
  // there is none, and the caller falls back to a unary RPC.
  std::optional<uint64_t> StartSessionCall(coord::v1::SessionCall call, CallDone& done);
  // SessionStream::Sink (gRPC threads).
  void OnSessionEvent(coord::SessionEvent event) override;
  void OnSessionDone(absl::Status status) override;

  void SessionLoop();
  // Runs one open stream until it ends; returns its final status.
  absl::Status RunStream(SessionStream& stream, bool reconnect, bool coordinator_restarted);
  void Dispatch(coord::SessionEvent event, bool reconnect, bool coordinator_restarted);
  void SetFatal(const absl::Status& status);
  // Waits `delay` unless stopping; returns true when stopping.
  bool SleepUnlessStopping(absl::Duration delay);

  const ClientConfig config_;
  const ClientCallbacks callbacks_;
  base::Clock& clock_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool session_opened_ ABSL_GUARDED_BY(mu_) = false;  // the current stream got its `opened`
  std::optional<absl::Status> fatal_ ABSL_GUARDED_BY(mu_);
  std::string coordinator_id_ ABSL_GUARDED_BY(mu_);
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  absl::Duration heartbeat_timeout_ ABSL_GUARDED_BY(mu_) = absl::Seconds(10);
  std::deque<coord::SessionEvent> events_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> stream_done_ ABSL_GUARDED_BY(mu_);
  SessionStream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;  // while a session is connected
  uint64_t next_call_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, CallDone> pending_calls_ ABSL_GUARDED_BY(mu_);
  absl::Time last_contact_ ABSL_GUARDED_BY(mu_);
  // Preemption sync: the open round (from the session) and what this task agreed for it.
  // The task's step is reported the moment a round arrives, from the session thread, as the
  // first step it has not checked yet: a report that waited for the training loop's next
  // ReachedSyncPoint could deadlock against a peer that checked this step before it heard of
  // the round and now waits for us in the step's collective.
  std::optional<PreemptionRound> active_round_ ABSL_GUARDED_BY(mu_);
  uint64_t finished_round_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<std::pair<uint64_t, int64_t>> agreed_ ABSL_GUARDED_BY(mu_);    // round, step
  std::optional<std::pair<uint64_t, int64_t>> reported_ ABSL_GUARDED_BY(mu_);  // round, step
  uint64_t report_failed_round_ ABSL_GUARDED_BY(mu_) = 0;  // its async report failed: retry
  int64_t next_unchecked_step_ ABSL_GUARDED_BY(mu_) = 0;
  // Early reports still in flight: the destructor cancels them and waits for their callbacks.
  std::set<grpc::ClientContext*> reports_in_flight_ ABSL_GUARDED_BY(mu_);
  // Sends this task's report for `round` (async) and records the agreement when it comes.
  void ReportSyncStepAsync(const PreemptionRound& round, int64_t step);
  // How long a report for `round` may wait: until its deadline (10 min if none), at least 1 s.
  absl::Duration RoundWait(const PreemptionRound& round) const;
  coord::v1::ReportSyncStepRequest SyncStepReport(const PreemptionRound& round,
                                                  int64_t step) const;
  // The round ended without this task (deadline passed, or the coordinator closed it).
  void FinishRoundLocked(uint64_t round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::thread session_thread_;
};

}  // namespace phalanx::client
