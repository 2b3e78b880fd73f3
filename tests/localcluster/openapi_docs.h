// The OpenAPI v3 documents kubectl reads before it writes: /openapi/v3 (one entry per served
// group/version) and /openapi/v3/<gv> (one PATCH operation per kind). They carry no schemas —
// only what tells kubectl that the server validates fields itself (the `fieldValidation` query
// parameter), so kubectl sends its objects for server-side validation instead of downloading
// schemas to validate them locally. `kubectl explain` therefore has nothing to show here.
#pragma once

#include <cpprest/json.h>

#include <optional>
#include <string>

#include "tests/localcluster/resource_registry.h"

namespace phalanx::localcluster {

web::json::value OpenApiV3Root(const ResourceRegistry& registry);
// `gv_path` is "api/v1" or "apis/GROUP/VERSION"; nullopt when not served.
std::optional<web::json::value> OpenApiV3GroupVersion(const ResourceRegistry& registry,
                                                      const std::string& gv_path);

}  // namespace phalanx::localcluster
