#include "common/kube/merge_patch.h"

namespace phalanx::kube {

web::json::value MergePatch(web::json::value target, const web::json::value& patch) {
  if (!patch.is_object()) return patch;
  if (!target.is_object()) target = web::json::value::object();
  for (const auto& [key, value] : patch.as_object()) {
    if (value.is_null()) {
      if (target.has_field(key)) target.erase(key);
      continue;
    }
    web::json::value current = target.has_field(key) ? target.at(key) : web::json::value::null();
    target[key] = MergePatch(std::move(current), value);
  }
  return target;
}

}  // namespace phalanx::kube
