// A strategic merge patch subset (what `kubectl apply` sends for built-in kinds): objects merge
// like JSON merge patch; lists of objects that all carry a merge key ("name", else "mountPath",
// else "containerPort") merge element by element; `$patch: delete` on an element removes it and
// `$patch: replace` replaces; `$setElementOrder/…`, `$retainKeys` and `$deleteFromPrimitiveList/…`
// directives are accepted and ignored. Real API servers take merge keys from each field's schema;
// this guesses them from the data, which is enough for the kinds kubectl applies here. Pure.
#pragma once

#include <cpprest/json.h>

namespace phalanx::localcluster {

web::json::value StrategicMerge(web::json::value target, const web::json::value& patch);

}  // namespace phalanx::localcluster
