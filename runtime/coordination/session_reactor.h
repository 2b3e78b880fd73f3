// SessionReactor: the server side of one task's Session stream (gRPC callback API).
//
// Reads `open` then heartbeats and calls, and hands each to the RpcHandler, which converts it
// to a service call (the reactor itself never touches the service: one conversion layer);
// writes the events the service queues in the session's outbox, one write in flight at a time,
// in order. When the client's stream breaks (killed process, reset connection) the service
// hears of it at once through CloseSession: that is the sub-100 ms crash signal. Records
// per-call metrics for calls carried on the stream. Deletes itself in OnDone.
// Thread-safety: gRPC calls the On* methods from its threads; mu_ serialises the write side.
#pragma once

#include <grpcpp/support/server_callback.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/auth/credentials.h"
#include "common/base/clock.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/rpc_handler.h"
#include "runtime/coordination/session_outbox.h"
#include "runtime/proto/coordination.pb.h"

namespace phalanx::coord {

class SessionReactor final : public grpc::ServerBidiReactor<v1::SessionRequest, v1::SessionEvent>,
                             public SessionOutbox::Listener {
 public:
  // `auth` is the result of the token check; a failed check ends the stream at once. A task
  // credential may open a session only for its own task (PermissionDenied otherwise).
  SessionReactor(RpcHandler& handler, CoordinatorMetrics& metrics, base::Clock& clock,
                 absl::StatusOr<auth::Principal> auth);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;
  void OnOutboxReady() override;

 private:
  void HandleOpen(const v1::TaskRef& task);
  // Runs a call carried on the stream; its result is queued on the outbox as a CallResult.
  void HandleCall(const v1::SessionCall& call);
  // Starts the next write or, once the outbox is closed and drained, finishes the stream.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RpcHandler& handler_;
  CoordinatorMetrics& metrics_;
  base::Clock& clock_;
  std::shared_ptr<SessionOutbox> outbox_ = std::make_shared<SessionOutbox>();
  auth::Principal principal_;   // who the caller's credential speaks for
  v1::SessionRequest request_;  // only touched by the read side (one read at a time)
  // Read side only (and OnDone, after the last read): set once `open` was accepted.
  std::optional<RpcHandler::Session> session_;

  absl::Mutex mu_;
  v1::SessionEvent write_buffer_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Set when the read side ended: finish once the in-flight write (if any) completes.
  std::optional<absl::Status> pending_finish_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::coord
