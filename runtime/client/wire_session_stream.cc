#include "runtime/client/wire_session_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/coordination/bearer.h"
#include "runtime/coordination/error_details.h"
#include "runtime/coordination/proto_convert.h"
#include "runtime/coordination/wire_format.h"

namespace phalanx::client {

namespace pb = ::phalanx::coord::v1;

absl::StatusOr<WireSessionStream::Opened> WireSessionStream::Open(
    const std::string& address, const CoordinatorTls& tls, const std::string& token,
    const pb::RegisterRequest& request, absl::Duration timeout, Sink& sink, bool open_at_once,
    absl::FunctionRef<bool(absl::Duration)> pause) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  absl::StatusOr<std::shared_ptr<WireConnection>> connection =
      WireConnection::ForAddress(address, tls, deadline, pause);
  if (!connection.ok()) return connection.status();
  std::shared_ptr<WireSessionStream> stream(
      new WireSessionStream(*connection, request.task(), open_at_once, sink));
  pb::WireHello hello;
  hello.set_authorization(coord::BearerCredential(token));
  *hello.mutable_register_() = request;
  stream->id_ = stream->connection_->Attach(*stream, [&](uint32_t id) {
    std::string out;
    coord::AppendFrame(hello, id, out);
    if (open_at_once) {
      pb::SessionRequest open;
      *open.mutable_open() = request.task();
      coord::AppendFrame(open, id, out);
    }
    return out;
  });

  absl::MutexLock lock(&stream->mu_);
  stream->mu_.AwaitWithDeadline(absl::Condition(stream.get(), &WireSessionStream::Answered),
                                deadline);
  if (!stream->registered_.has_value()) {
    if (stream->end_.has_value()) return *stream->end_;
    // Nothing at all came on the connection meanwhile either: it is dead (a coordinator that
    // vanished without a reset); end it so that the next attempt dials afresh, unless other
    // tasks' sessions ride it (their heartbeat checks judge it for them). A short wait proves
    // nothing: the caller may have given little time.
    if (timeout >= absl::Seconds(1) && stream->connection_->last_read() < start) {
      stream->connection_->BreakUnlessInUse(
          stream->id_,
          absl::UnavailableError(absl::StrCat("the coordinator at ", address, " sent nothing for ",
                                              absl::FormatDuration(timeout))));
    }
    return absl::UnavailableError(absl::StrCat(
        "the coordinator at ", address, " did not answer within ", absl::FormatDuration(timeout)));
  }
  // With `open` sent at once its answer follows right behind: wait for it here (within the
  // deadline), so that Start() hands it over on the caller's thread.
  if (open_at_once) {
    stream->mu_.AwaitWithDeadline(absl::Condition(stream.get(), &WireSessionStream::Delivered),
                                  deadline);
  }
  Opened result;
  result.registered = std::move(*stream->registered_);
  result.stream = std::move(stream);
  return result;
}

WireSessionStream::~WireSessionStream() { Cancel(); }

void WireSessionStream::Start() {
  connection_->MarkInUse(id_);
  if (!open_sent_) {
    pb::SessionRequest open;
    *open.mutable_open() = task_;
    Send(open);
  }
  // What came before (the `opened` of an `open` sent with the hello) is handed over here, on the
  // caller's thread; the reader keeps queueing meanwhile, so the order holds.
  std::optional<absl::Status> end;
  while (true) {
    std::deque<coord::SessionEvent> events;
    {
      absl::MutexLock lock(&mu_);
      if (pending_.empty()) {
        started_ = true;
        if (end_.has_value() && !end_told_) {
          end_told_ = true;
          end = end_;
        }
        break;
      }
      events.swap(pending_);
    }
    for (coord::SessionEvent& event : events) sink_.OnSessionEvent(std::move(event));
  }
  if (end.has_value()) {
    sink_.OnSessionDone(*std::move(end));
    done_.Notify();
  }
}

void WireSessionStream::SendHeartbeat(int64_t sent_unix_micros) {
  pb::SessionRequest request;
  request.mutable_heartbeat()->set_sent_unix_micros(sent_unix_micros);
  Send(request);
}

void WireSessionStream::SendCall(pb::SessionCall call) {
  pb::SessionRequest request;
  *request.mutable_call() = std::move(call);
  Send(request);
}

void WireSessionStream::SendLeave(const std::string& reason) {
  pb::SessionRequest request;
  request.mutable_leave()->set_reason(reason);
  Send(request);
}

void WireSessionStream::Send(const pb::SessionRequest& request) {
  std::string frame;
  coord::AppendFrame(request, id_, frame);
  connection_->Send(std::move(frame));
}

void WireSessionStream::Cancel() {
  connection_->Detach(id_);  // the reader calls this stream no more
  bool tell = false;
  bool send_close = false;
  {
    absl::MutexLock lock(&mu_);
    if (!end_.has_value()) end_ = absl::CancelledError("session cancelled");
    if (started_ && !end_told_) {
      end_told_ = true;
      tell = true;
    }
    send_close = !close_sent_;
    close_sent_ = true;
  }
  if (send_close) {
    // The coordinator closes the task's session on it (the crash signal, unless the task shut
    // down first), as it does when a task's connection ends.
    std::string frame;
    coord::AppendCloseFrame(id_, frame);
    connection_->Send(std::move(frame));
  }
  if (tell) {
    sink_.OnSessionDone(absl::CancelledError("session cancelled"));
    done_.Notify();
  }
}

void WireSessionStream::WaitDone() {
  {
    absl::MutexLock lock(&mu_);
    if (!started_) return;  // never handed to the sink: nothing to wait for
  }
  done_.WaitForNotification();
}

void WireSessionStream::OnFrame(pb::WireServerFrame frame) {
  if (frame.has_end()) return End(coord::StatusFromFields(frame.end()));
  if (frame.has_registered()) {
    absl::MutexLock lock(&mu_);
    registered_ = std::move(*frame.mutable_registered());
    return;
  }
  if (!frame.has_event()) return;
  std::optional<coord::SessionEvent> event = coord::FromProto(frame.event());
  if (event.has_value()) Deliver(*std::move(event));
}

void WireSessionStream::OnPeerEvents(const std::vector<coord::SessionEvent>& events) {
  for (const coord::SessionEvent& event : events) Deliver(event);
}

void WireSessionStream::Deliver(coord::SessionEvent event) {
  {
    absl::MutexLock lock(&mu_);
    if (!started_) {
      pending_.push_back(std::move(event));
      return;
    }
  }
  sink_.OnSessionEvent(std::move(event));
}

void WireSessionStream::OnConnectionEnd(const absl::Status& status) { End(status); }

void WireSessionStream::End(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (end_.has_value()) return;
    end_ = status;
    if (!started_) return;  // Open or Start sees it
    end_told_ = true;
  }
  sink_.OnSessionDone(std::move(status));
  done_.Notify();
}

}  // namespace phalanx::client
