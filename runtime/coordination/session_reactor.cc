#include "runtime/coordination/session_reactor.h"

#include "runtime/coordination/grpc_status.h"
#include "runtime/coordination/proto_convert.h"

namespace phalanx::coord {

SessionReactor::SessionReactor(CoordinationService& service, CoordinatorMetrics& metrics,
                               base::Clock& clock, absl::Status auth)
    : service_(service), metrics_(metrics), clock_(clock) {
  if (!auth.ok()) {
    absl::MutexLock lock(&mu_);
    FinishLocked(auth);
    return;
  }
  outbox_->Attach(this);
  StartRead(&request_);
}

void SessionReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The task closed its side or the connection broke: either way the session is over.
    if (session_id_ != 0) {
      service_.CloseSession(session_id_, absl::UnavailableError("stream closed by the task"));
    }
    absl::MutexLock lock(&mu_);
    if (writing_) {
      pending_finish_ = absl::OkStatus();
    } else {
      FinishLocked(absl::OkStatus());
    }
    return;
  }
  if (session_id_ == 0) {
    if (request_.kind_case() != v1::SessionRequest::kOpen) {
      absl::MutexLock lock(&mu_);
      FinishLocked(absl::InvalidArgumentError("the first session message must be 'open'"));
      return;
    }
    HandleOpen(request_.open());
    if (session_id_ == 0) return;  // refused: the stream is finishing, read no more
  } else if (request_.kind_case() == v1::SessionRequest::kCall) {
    HandleCall(request_.call());
  } else if (request_.kind_case() == v1::SessionRequest::kHeartbeat) {
    service_.Heartbeat(session_id_, request_.heartbeat().sent_unix_micros());
  } else {
    // A second 'open' or an unknown message still proves the task is alive.
    service_.Heartbeat(session_id_, 0);
  }
  StartRead(&request_);
}

void SessionReactor::HandleOpen(const v1::TaskRef& task) {
  absl::StatusOr<uint64_t> id = service_.OpenSession(FromProto(task), outbox_);
  if (!id.ok()) {
    absl::MutexLock lock(&mu_);
    FinishLocked(id.status());
    return;
  }
  session_id_ = *id;
  task_ = FromProto(task);
}

void SessionReactor::HandleCall(const v1::SessionCall& call) {
  // Completions may run on any thread and after this reactor is gone: they hold only the
  // outbox (shared) and plain values.
  struct Reply {
    std::shared_ptr<SessionOutbox> outbox;
    CoordinatorMetrics* metrics;
    base::Clock* clock;
    const char* method;
    uint64_t call_id;
    absl::Time start;
    void operator()(absl::Status status, std::string value = "") const {
      metrics->Rpc(method, status.code(), clock->Now() - start);
      outbox->Push(CallResult{call_id, std::move(status), std::move(value)});
      outbox->Notify();
    }
  };
  Reply reply{outbox_, &metrics_, &clock_, "", call.call_id(), clock_.Now()};
  switch (call.call_case()) {
    case v1::SessionCall::kBarrier: {
      reply.method = "Session.Barrier";
      const v1::BarrierRequest& req = call.barrier();
      service_.Barrier(task_, req.barrier_id(), absl::Milliseconds(req.timeout_ms()),
                       {req.tasks().begin(), req.tasks().end()},
                       [reply](absl::Status s) { reply(std::move(s)); });
      return;
    }
    case v1::SessionCall::kKvInsert: {
      reply.method = "Session.KeyValueInsert";
      const v1::KeyValueInsertRequest& req = call.kv_insert();
      reply(service_.KvInsert(req.key(), req.value(), req.allow_overwrite()));
      return;
    }
    case v1::SessionCall::kKvGet: {
      reply.method = "Session.KeyValueGet";
      const v1::KeyValueGetRequest& req = call.kv_get();
      service_.KvGet(req.key(), task_, absl::Milliseconds(req.timeout_ms()),
                     [reply](absl::StatusOr<std::string> value) {
                       if (value.ok()) {
                         reply(absl::OkStatus(), *std::move(value));
                       } else {
                         reply(value.status());
                       }
                     });
      return;
    }
    default:
      reply.method = "Session.Unknown";
      reply(absl::UnimplementedError("unknown session call"));
  }
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
  if (session_id_ != 0) {
    service_.CloseSession(session_id_, absl::UnavailableError("session stream ended"));
  }
  delete this;
}

}  // namespace phalanx::coord
