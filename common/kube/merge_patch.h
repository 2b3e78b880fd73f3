// JSON merge patch (RFC 7386), the patch type controllers use for small changes and the one the
// local cluster applies for merge, strategic-merge (lists replaced whole: a documented
// simplification) and server-side apply patches. Pure; thread-safe.
#pragma once

#include <cpprest/json.h>

namespace phalanx::kube {

// `target` with `patch` merged in: objects merge key by key, null deletes a key, anything else
// (arrays included) replaces.
web::json::value MergePatch(web::json::value target, const web::json::value& patch);

}  // namespace phalanx::kube
