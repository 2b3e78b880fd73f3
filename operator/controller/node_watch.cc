#include "operator/controller/node_watch.h"

#include <algorithm>

#include "common/kube/object_meta.h"
#include "operator/api/types.h"

namespace phalanx::op {

std::vector<std::string> PodNodeName(const Json& pod) {
  std::string node = kube::StringAt(pod, "spec.nodeName");
  if (node.empty()) return {};
  return {std::move(node)};
}

std::vector<std::string> JobKeysOnNode(kube::Informer& pods, const Json& node) {
  std::vector<std::string> keys;
  for (const Json& pod : pods.ByIndex(kPodsByNodeIndex, kube::MetaString(node, "name"))) {
    std::optional<kube::OwnerReference> owner = kube::ControllerOf(pod);
    if (!owner.has_value() || owner->kind != kKind) continue;
    const std::string key = kube::MetaString(pod, "namespace") + "/" + owner->name;
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  return keys;
}

bool NodePreemptionFilter::Changed(const Json& node) {
  const bool now = NodeIsBeingPreempted(node);
  absl::MutexLock lock(&mu_);
  auto [it, first] = preempting_.try_emplace(kube::MetaString(node, "name"), now);
  if (first) return now;
  const bool changed = it->second != now;
  it->second = now;
  return changed;
}

}  // namespace phalanx::op
