#include "runtime/coordination/session_calls.h"

#include <utility>

#include "runtime/coordination/token_auth.h"

namespace phalanx::coord {

absl::StatusOr<RpcHandler::Session> OpenAuthorizedSession(RpcHandler& handler,
                                                          CoordinatorMetrics& metrics,
                                                          const auth::Principal& principal,
                                                          const pb::TaskRef& task,
                                                          std::shared_ptr<SessionOutbox> outbox) {
  if (absl::Status allowed = Authorize(principal, ForTask(task)); !allowed.ok()) {
    metrics.AuthFailure();
    return allowed;
  }
  return handler.OpenSession(task, std::move(outbox));
}

void RunSessionCall(RpcHandler& handler, CoordinatorMetrics& metrics, base::Clock& clock,
                    const RpcHandler::Session& session, const pb::SessionCall& call,
                    std::shared_ptr<SessionOutbox> outbox) {
  handler.SessionCall(
      session, call,
      [outbox = std::move(outbox), metrics = &metrics, clock = &clock,
       method = RpcHandler::SessionCallName(call), start = clock.Now()](CallResult result) {
        metrics->Rpc(method, result.status.code(), clock->Now() - start);
        outbox->Push(std::move(result));
        outbox->Notify();
      });
}

}  // namespace phalanx::coord
