// RpcCaller: unary calls to the coordinator, each with the job token and a deadline. Shared by
// GrpcCoordinationClient (every call) and SessionChannel (Register), so the token and deadline
// are set in one place. A deadline is a span from when gRPC starts the call: it bounds a
// transport wait and decides nothing, so no clock is read for it (an injected FakeClock's time
// would mean nothing to gRPC). Thread-safe (immutable state; gRPC's stub is thread-safe).
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <string>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "runtime/coordination/grpc_status.h"
#include "runtime/coordination/token_auth.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::client {

class RpcCaller {
 public:
  using Stub = coord::v1::Coordination::Stub;
  template <typename Req, typename Resp>
  using Method = void (Stub::async::*)(grpc::ClientContext*, const Req*, Resp*,
                                       std::function<void(grpc::Status)>);
  template <typename Resp>
  using Reply = absl::AnyInvocable<void(absl::Status, Resp) &&>;

  RpcCaller(Stub& stub, std::string token) : stub_(stub), token_(std::move(token)) {}

  Stub& stub() const { return stub_; }

  // Sets the token and a deadline `timeout` after the call starts on a context the caller owns
  // (for calls the caller must be able to cancel).
  void Prepare(grpc::ClientContext& context, absl::Duration timeout) const {
    context.AddMetadata(coord::kAuthorizationHeader, "Bearer " + token_);
    context.set_deadline(gpr_time_from_millis(absl::ToInt64Milliseconds(timeout), GPR_TIMESPAN));
  }

  // One call; `done` runs once, on a gRPC thread, by the deadline. `wait_for_ready` waits for
  // the coordinator to become reachable (until the deadline) instead of failing at once.
  template <typename Req, typename Resp>
  void CallAsync(Method<Req, Resp> method, Req request, absl::Duration timeout, Reply<Resp> done,
                 bool wait_for_ready = false) const {
    struct InFlight {
      grpc::ClientContext context;
      Req request;
      Resp response;
      Reply<Resp> done;
    };
    auto* call = new InFlight;
    call->request = std::move(request);
    call->done = std::move(done);
    Prepare(call->context, timeout);
    call->context.set_wait_for_ready(wait_for_ready);
    (stub_.async()->*method)(
        &call->context, &call->request, &call->response, [call](grpc::Status status) {
          std::move(call->done)(coord::FromGrpcStatus(status), std::move(call->response));
          delete call;
        });
  }

  // The blocking form; the wait is bounded by the call's deadline.
  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(Method<Req, Resp> method, Req request, absl::Duration timeout,
                            bool wait_for_ready = false) const {
    absl::Notification done;
    absl::StatusOr<Resp> result;
    CallAsync<Req, Resp>(
        method, std::move(request), timeout,
        [&](absl::Status status, Resp response) {
          if (status.ok()) {
            result = std::move(response);
          } else {
            result = status;
          }
          done.Notify();
        },
        wait_for_ready);
    done.WaitForNotification();  // gRPC completes every call by its deadline
    return result;
  }

 private:
  Stub& stub_;
  const std::string token_;
};

}  // namespace phalanx::client
