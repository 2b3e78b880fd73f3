// RpcCaller: unary calls to the coordinator, each with the job token and a deadline. Shared by
// CoordinationClientImpl (every call) and SessionChannel (Register), so the token and deadline
// are set in one place. A deadline is a span from when gRPC starts the call: it bounds a
// transport wait and decides nothing, so no clock is read for it (an injected FakeClock's time
// would mean nothing to gRPC). Thread-safe.
//
// Every call it starts is tracked until its callback has run and its ClientContext is gone:
// a context holds a reference to the gRPC channel, and the channel whose last reference drops
// on a gRPC callback thread makes gRPC 1.51 join that very thread when it releases its
// callback queue (an abort at exit, or a crash in a nexting thread, in a client's process).
// So the owner calls Close() and then WaitIdle() before it lets the channel go.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "runtime/coordination/bearer.h"
#include "runtime/coordination/status_codec.h"
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
    context.AddMetadata(coord::kAuthorizationHeader, coord::BearerCredential(token_));
    context.set_deadline(gpr_time_from_millis(absl::ToInt64Milliseconds(timeout), GPR_TIMESPAN));
  }

  // One call; `done` runs once, on a gRPC thread, by the deadline (at once, on this thread,
  // with CANCELLED after Close()). `wait_for_ready` waits for the coordinator to become
  // reachable (until the deadline) instead of failing at once.
  template <typename Req, typename Resp>
  void CallAsync(Method<Req, Resp> method, Req request, absl::Duration timeout, Reply<Resp> done,
                 bool wait_for_ready = false) const {
    struct InFlight {
      grpc::ClientContext context;
      Req request;
      Resp response;
      Reply<Resp> done;
    };
    auto call = std::make_shared<InFlight>();
    call->request = std::move(request);
    call->done = std::move(done);
    Prepare(call->context, timeout);
    call->context.set_wait_for_ready(wait_for_ready);
    grpc::ClientContext* const context = &call->context;
    // Only the callback holds the call for good (a weak reference lets Close() cancel it).
    if (!calls_->Add(std::shared_ptr<grpc::ClientContext>(call, context))) {
      std::move(call->done)(ShuttingDown(), Resp());
      return;
    }
    (stub_.async()->*method)(
        context, &call->request, &call->response,
        [call, context, calls = calls_](grpc::Status status) mutable {
          const bool closed = calls->Finishing(context);
          // Cancelled by Close(), not by a coordinator going away: nothing to retry.
          std::move(call->done)(closed && status.error_code() == grpc::StatusCode::CANCELLED
                                    ? ShuttingDown()
                                    : coord::FromGrpcStatus(status),
                                std::move(call->response));
          call.reset();  // drops the context's channel reference before the owner may go on
          calls->Finished();
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

  // Refuses new calls and cancels those in flight; their callbacks still run (CANCELLED).
  void Close() const { calls_->Close(); }

  // Waits until the callback of every call started has returned and released its context, for
  // at most `backstop` (gRPC ends cancelled calls promptly; real time, like gRPC's deadlines).
  // False if some call was still running when the backstop ran out.
  bool WaitIdle(absl::Duration backstop) const { return calls_->WaitIdle(backstop); }

 private:
  static absl::Status ShuttingDown() {
    return absl::CancelledError("the coordination client is shutting down");
  }

  // Shared with the callbacks, which touch it after `done` has run and may outlive the caller.
  class InFlightCalls {
   public:
    bool Add(const std::shared_ptr<grpc::ClientContext>& context) {
      absl::MutexLock lock(&mu_);
      if (closed_) return false;
      cancellable_.emplace(context.get(), context);
      ++unfinished_;
      return true;
    }
    // Whether Close() was called.
    bool Finishing(grpc::ClientContext* context) {
      absl::MutexLock lock(&mu_);
      cancellable_.erase(context);
      return closed_;
    }
    void Finished() {
      absl::MutexLock lock(&mu_);
      --unfinished_;
    }
    void Close() {
      std::vector<std::shared_ptr<grpc::ClientContext>> in_flight;
      {
        absl::MutexLock lock(&mu_);
        closed_ = true;
        for (auto& [raw, weak] : cancellable_) {
          if (std::shared_ptr<grpc::ClientContext> context = weak.lock()) {
            in_flight.push_back(std::move(context));
          }
        }
      }
      // Outside the lock: a cancelled call's callback may run on this thread. The references
      // keep each context alive meanwhile (and drop it here, on the owner's thread, if its
      // callback is already done).
      for (const auto& context : in_flight) context->TryCancel();
    }
    bool WaitIdle(absl::Duration backstop) {
      absl::MutexLock lock(&mu_);
      auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return unfinished_ == 0; };
      return mu_.AwaitWithTimeout(absl::Condition(&idle), backstop);
    }

   private:
    absl::Mutex mu_;
    bool closed_ ABSL_GUARDED_BY(mu_) = false;
    absl::flat_hash_map<grpc::ClientContext*, std::weak_ptr<grpc::ClientContext>> cancellable_
        ABSL_GUARDED_BY(mu_);
    int64_t unfinished_ ABSL_GUARDED_BY(mu_) = 0;
  };

  Stub& stub_;
  const std::string token_;
  const std::shared_ptr<InFlightCalls> calls_ = std::make_shared<InFlightCalls>();
};

}  // namespace phalanx::client
