// The one table that maps Kubernetes API responses to absl::Status (CONVENTIONS.md):
//   404 NotFound · 409 AlreadyExists (reason AlreadyExists) or Aborted (a conflict: requeue)
//   410 OutOfRange (resourceVersion too old: relist) · 400/422 InvalidArgument
//   401/403 PermissionDenied · 429, 5xx and transport errors Unavailable (retry with backoff)
// Pure functions; thread-safe.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace phalanx::kube {

// The status for an API response. `body` may be a Kubernetes `Status` object (its reason and
// message are used) or anything else (its start is quoted). `what` names the request, e.g.
// "GET /api/v1/namespaces/default/pods/p".
absl::Status StatusFromResponse(int http_status, std::string_view body, std::string_view what);

// True for the codes a caller should retry with backoff (429, 5xx, transport).
bool IsRetryable(const absl::Status& status);

}  // namespace phalanx::kube
