// What both session transports (the gRPC SessionReactor and the WireSessionServer) do alike
// with a session's `open` and calls, so that the checks, metrics and answers cannot drift apart
// between them. Thread-safe (stateless).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "common/auth/credentials.h"
#include "common/base/clock.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/rpc_handler.h"
#include "runtime/coordination/session_outbox.h"

namespace phalanx::coord {

// Opens `task`'s session for a caller presenting `principal`. Checked here, not per call: every
// call on the session acts for the task that opened it, so a task credential opens only its own
// task's (PermissionDenied, counted as an auth failure). Otherwise as RpcHandler::OpenSession.
absl::StatusOr<RpcHandler::Session> OpenAuthorizedSession(RpcHandler& handler,
                                                          CoordinatorMetrics& metrics,
                                                          const auth::Principal& principal,
                                                          const pb::TaskRef& task,
                                                          std::shared_ptr<SessionOutbox> outbox);

// Runs a call carried on `session`. Its result goes to `outbox` (and the transport is told),
// timed and counted under the call's name ("Session.Barrier"). The result may come on any
// thread and after the transport is gone: the completion holds only the outbox and plain values.
void RunSessionCall(RpcHandler& handler, CoordinatorMetrics& metrics, base::Clock& clock,
                    const RpcHandler::Session& session, const pb::SessionCall& call,
                    std::shared_ptr<SessionOutbox> outbox);

}  // namespace phalanx::coord
