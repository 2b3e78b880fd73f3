// kube::Json: the one JSON type for Kubernetes objects across Phalanx (cpprestsdk's value, as the
// REST client decodes them). Every other component names it through this alias (`using
// kube::Json;`) rather than declaring its own.
#pragma once

#include <cpprest/json.h>

namespace phalanx::kube {

using Json = web::json::value;

}  // namespace phalanx::kube
