#include "runtime/coordination/token_auth.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace phalanx::coord {

absl::StatusOr<auth::Principal> CheckToken(const grpc::CallbackServerContext& ctx,
                                           const std::string& job_token) {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find(kAuthorizationHeader);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError("missing job token (authorization metadata)");
  }
  absl::StatusOr<absl::string_view> credential = ParseBearer(
      absl::string_view(it->second.data(), it->second.size()), "authorization metadata");
  if (!credential.ok()) return credential.status();
  return auth::Authenticate(job_token, *credential);
}

absl::Status Authorize(const auth::Principal& principal, CallScope scope) {
  if (principal.is_spare() || scope.task_id == CallScope::kSpare) {
    if (principal.is_spare() && scope.task_id == CallScope::kSpare) return absl::OkStatus();
    return absl::PermissionDeniedError(
        principal.is_spare()
            ? absl::StrCat("the credential of spare ", principal.spare,
                           " may only wait to be assigned a task (AwaitAssignment)")
            : std::string("only a spare's credential may wait to be assigned a task"));
  }
  if (principal.admin() || scope.task_id == CallScope::kJobWide) return absl::OkStatus();
  if (scope.task_id == principal.task_id) {
    // Unbound (v1) credentials leave a garbage incarnation to the service's own check.
    if (!principal.incarnation_bound() || (scope.incarnation >= principal.min_incarnation &&
                                           scope.incarnation <= principal.max_incarnation)) {
      return absl::OkStatus();
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "the credential of task ", principal.task_id, " is for incarnation",
        principal.min_incarnation == principal.max_incarnation
            ? absl::StrCat(" ", principal.min_incarnation)
            : absl::StrCat("s ", principal.min_incarnation, "-", principal.max_incarnation),
        " and may not act as incarnation ", scope.incarnation,
        " (only the pod of that incarnation holds its credential)"));
  }
  return absl::PermissionDeniedError(absl::StrCat("the credential of task ", principal.task_id,
                                                  " may not act as task ", scope.task_id));
}

}  // namespace phalanx::coord
