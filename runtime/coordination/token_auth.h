// Credential check for every coordination call. The client sends `authorization: Bearer <cred>`
// metadata, where <cred> is either the job token (the operator and tools: may do anything) or a
// task credential (common/auth/credentials.h: may act only as its own task). Used by
// coordinator_server.cc and session_reactor.cc. Thread-safety: pure functions.
#pragma once

#include <grpcpp/server_context.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/auth/credentials.h"
#include "common/base/incarnation.h"
#include "runtime/coordination/bearer.h"
#include "runtime/proto/coordination.pb.h"

namespace phalanx::coord {

// Unauthenticated when the metadata is missing or holds neither the job token nor one of its
// task credentials. Compares in constant time.
absl::StatusOr<auth::Principal> CheckToken(const grpc::CallbackServerContext& ctx,
                                           const std::string& job_token);

// What a call needs of its caller: any member of the job, to speak for one task, or to be a
// spare waiting for a task (the only call a spare credential may make).
struct CallScope {
  static constexpr int kJobWide = -1;
  static constexpr int kSpare = -3;
  int task_id = kJobWide;
  base::Incarnation incarnation = 0;  // the incarnation the call speaks for (a task's call)
};
inline CallScope JobWide() { return CallScope{}; }
// A call that names `task` (its id and incarnation, as every task call does).
inline CallScope ForTask(const v1::TaskRef& task) {
  return CallScope{task.task_id() < 0 ? -2 : task.task_id(),
                   base::IncarnationFromWire(task.incarnation())};
}
inline CallScope SpareOnly() { return CallScope{CallScope::kSpare}; }

// PermissionDenied when a task credential is used to act as another task (hijacking its
// session, reporting errors as it, arriving at barriers for it) or as an incarnation it is not
// bound to (a zombie of an earlier incarnation registering as a newer one), when a spare
// credential is used for anything but waiting for its assignment, or a task credential to wait
// as a spare.
absl::Status Authorize(const auth::Principal& principal, CallScope scope);

}  // namespace phalanx::coord
