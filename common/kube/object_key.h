// Object keys: the "namespace/name" strings (just "name" for cluster-scoped objects) that the
// informer cache and the controller work queue use to name objects, as client-go's
// MetaNamespaceKeyFunc does. Pure; thread-safe.
#pragma once

#include <cpprest/json.h>

#include <string>
#include <utility>

#include "common/kube/object_meta.h"

namespace phalanx::kube {

inline std::string KeyFor(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

// "ns/name", or "name" when the object has no namespace.
inline std::string KeyOf(const web::json::value& object) {
  return KeyFor(MetaString(object, "namespace"), MetaString(object, "name"));
}

// The inverse of KeyOf: {namespace, name}; namespace "" for a key without a '/'.
inline std::pair<std::string, std::string> SplitKey(const std::string& key) {
  const size_t slash = key.find('/');
  if (slash == std::string::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

}  // namespace phalanx::kube
