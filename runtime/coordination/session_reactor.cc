#include "runtime/coordination/session_reactor.h"

#include "runtime/coordination/proto_convert.h"
#include "runtime/coordination/session_calls.h"
#include "runtime/coordination/status_codec.h"

namespace phalanx::coord {

SessionReactor::SessionReactor(RpcHandler& handler, CoordinatorMetrics& metrics, base::Clock& clock,
                               absl::StatusOr<auth::Principal> auth)
    : handler_(handler), metrics_(metrics), clock_(clock) {
  if (!auth.ok()) {
    absl::MutexLock lock(&mu_);
    FinishLocked(auth.status());
    return;
  }
  principal_ = *auth;
  outbox_->Attach(this);
  StartRead(&request_);
}

void SessionReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The task closed its side or the connection broke: either way the session is over. gRPC
    // does not tell the two apart here, so it counts as the task's own close (Cancelled): no
    // spare takes it over (service.h), the operator replaces it from its pod's exit.
    if (session_.has_value()) {
      handler_.CloseSession(*session_, absl::CancelledError("stream closed by the task"));
    }
    absl::MutexLock lock(&mu_);
    if (writing_) {
      pending_finish_ = absl::OkStatus();
    } else {
      FinishLocked(absl::OkStatus());
    }
    return;
  }
  if (!session_.has_value()) {
    if (request_.kind_case() != v1::SessionRequest::kOpen) {
      absl::MutexLock lock(&mu_);
      FinishLocked(absl::InvalidArgumentError("the first session message must be 'open'"));
      return;
    }
    HandleOpen(request_.open());
    if (!session_.has_value()) return;  // refused: the stream is finishing, read no more
  } else if (request_.kind_case() == v1::SessionRequest::kCall) {
    HandleCall(request_.call());
  } else {
    // A heartbeat; a second 'open' or an unknown message still proves the task is alive.
    handler_.Heartbeat(*session_, request_);
  }
  StartRead(&request_);
}

void SessionReactor::HandleOpen(const v1::TaskRef& task) {
  absl::StatusOr<RpcHandler::Session> session =
      OpenAuthorizedSession(handler_, metrics_, principal_, task, outbox_);
  if (!session.ok()) {
    absl::MutexLock lock(&mu_);
    FinishLocked(session.status());
    return;
  }
  session_ = *session;
}

void SessionReactor::HandleCall(const v1::SessionCall& call) {
  RunSessionCall(handler_, metrics_, clock_, *session_, call, outbox_);
}

void SessionReactor::OnOutboxReady() {
  absl::MutexLock lock(&mu_);
  PumpLocked();
}

void SessionReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (pending_finish_.has_value()) {
    FinishLocked(*pending_finish_);
    return;
  }
  if (!ok) return;  // the stream is broken; the read side ends it
  PumpLocked();
}

void SessionReactor::PumpLocked() {
  if (writing_ || finished_) return;
  if (std::optional<SessionEvent> event = outbox_->Pop()) {
    write_buffer_ = ToProto(*event);
    writing_ = true;
    // More events behind this one: let gRPC send the burst in one write.
    grpc::WriteOptions options;
    if (!outbox_->Empty()) options.set_buffer_hint();
    StartWrite(&write_buffer_, options);
    return;
  }
  if (std::optional<absl::Status> final_status = outbox_->FinalStatus()) {
    FinishLocked(*final_status);
  }
}

void SessionReactor::FinishLocked(const absl::Status& status) {
  if (finished_) return;
  finished_ = true;
  Finish(ToGrpcStatus(status));
}

void SessionReactor::OnDone() {
  outbox_->Detach();
  if (session_.has_value()) {
    handler_.CloseSession(*session_, absl::UnavailableError("session stream ended"));
  }
  delete this;
}

}  // namespace phalanx::coord
