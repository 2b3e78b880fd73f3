#include "runtime/client/session_stream.h"

#include "runtime/coordination/bearer.h"
#include "runtime/coordination/proto_convert.h"
#include "runtime/coordination/status_codec.h"

namespace phalanx::client {

GrpcSessionStream::GrpcSessionStream(coord::v1::Coordination::Stub& stub, const std::string& token,
                                     coord::TaskRef task, Sink& sink)
    : sink_(sink) {
  context_.AddMetadata(coord::kAuthorizationHeader, coord::BearerCredential(token));
  stub.async()->Session(&context_, this);
  absl::MutexLock lock(&mu_);
  *write_buffer_.mutable_open() = coord::ToProto(task);
}

void GrpcSessionStream::Start() {
  {
    absl::MutexLock lock(&mu_);
    writing_ = true;
    StartWrite(&write_buffer_);
  }
  StartRead(&read_buffer_);
  StartCall();
}

void GrpcSessionStream::SendHeartbeat(int64_t sent_unix_micros) {
  absl::MutexLock lock(&mu_);
  if (heartbeat_queued_) return;  // one waiting heartbeat proves as much as two
  coord::v1::SessionRequest request;
  request.mutable_heartbeat()->set_sent_unix_micros(sent_unix_micros);
  queue_.push_back(std::move(request));
  heartbeat_queued_ = true;
  PumpLocked();
}

void GrpcSessionStream::SendCall(coord::v1::SessionCall call) {
  coord::v1::SessionRequest request;
  *request.mutable_call() = std::move(call);
  Send(std::move(request));
}

void GrpcSessionStream::SendLeave(const std::string& reason) {
  coord::v1::SessionRequest request;
  request.mutable_leave()->set_reason(reason);
  Send(std::move(request));
}

void GrpcSessionStream::Send(coord::v1::SessionRequest request) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(request));
  PumpLocked();
}

void GrpcSessionStream::PumpLocked() {
  if (writing_ || queue_.empty()) return;
  write_buffer_ = std::move(queue_.front());
  queue_.pop_front();
  if (write_buffer_.has_heartbeat()) heartbeat_queued_ = false;
  writing_ = true;
  // With more queued behind it, let gRPC hold this message and send the burst in one write.
  grpc::WriteOptions options;
  if (!queue_.empty()) options.set_buffer_hint();
  StartWrite(&write_buffer_, options);
}

void GrpcSessionStream::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) return;  // the stream is ending; OnDone follows and fails the pending calls
  PumpLocked();
}

void GrpcSessionStream::OnReadDone(bool ok) {
  if (!ok) return;  // the stream is ending; OnDone carries the status
  if (std::optional<coord::SessionEvent> event = coord::FromProto(read_buffer_)) {
    sink_.OnSessionEvent(std::move(*event));
  }
  StartRead(&read_buffer_);
}

void GrpcSessionStream::OnDone(const grpc::Status& status) {
  sink_.OnSessionDone(coord::FromGrpcStatus(status));
  done_.Notify();
}

}  // namespace phalanx::client
