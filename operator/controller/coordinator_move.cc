#include "operator/controller/coordinator_move.h"

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"

namespace phalanx::op {
namespace {

// Why the coordinator pod must leave its node ("" when it need not).
std::string WhyMove(const PlanInputs& in, const PodView& pod) {
  const PreemptionPolicy& policy = in.spec.preemption;
  auto node = in.world.preempting_nodes.find(pod.node);
  // A pod that already ended there was evicted with its node: not a coordinator failure.
  const bool ended = pod.ended();
  if (node != in.world.preempting_nodes.end() && (policy.on_node_taints || ended)) {
    std::string why = absl::StrCat("node ", pod.node, " has a preemption notice");
    if (node->second != absl::InfiniteFuture()) {
      absl::StrAppend(&why, " (deadline ", kube::FormatKubeTime(node->second), ")");
    }
    return why;
  }
  if (pod.disruption_target && (policy.on_disruption_target || ended)) {
    return absl::StrCat("pod ", pod.name, " is being disrupted (DisruptionTarget)");
  }
  return "";
}

}  // namespace

std::vector<std::string> NodesToAvoid(const JobObservation& world) {
  std::vector<std::string> nodes;
  for (const auto& [node, deadline] : world.preempting_nodes) nodes.push_back(node);
  return nodes;
}

Next MoveCoordinator(const PlanInputs& in, JobPass& pass) {
  CoordinatorStatus& c = pass.out.status.coordinator;
  const std::optional<PodView>& pod = in.world.coordinator;
  // The successor of a move is placed: say where it went.
  if (!c.moving_from.empty() && pod.has_value() && pod->uid != c.last_moved_pod &&
      !pod->node.empty()) {
    pass.out.events.push_back(
        {false, "CoordinatorMoved",
         absl::StrCat("coordinator moved from node ", c.moving_from, " to node ", pod->node,
                      " (move ", c.moves, "); tasks reconnect to it")});
    c.moving_from.clear();
  }
  if (!pod.has_value() || pod->uid.empty() || pod->uid == c.last_moved_pod) {
    return Next::kContinue;  // none, or this one is already moving
  }
  // A pod someone else is deleting goes anyway; its successor is created once it is gone.
  if (pod->being_deleted && !pod->ended()) return Next::kContinue;
  const std::string why = WhyMove(in, *pod);
  if (why.empty()) return Next::kContinue;
  ++c.moves;
  c.last_moved_pod = pod->uid;
  c.moving_from = pod->node;
  // An ended pod is deleted by the "children" stage, which does not count it as a restart
  // (last_moved_pod); a running one is deleted here.
  if (pod->live()) pass.out.delete_pods.push_back(pod->name);
  const std::string action = pod->ended() ? "its coordinator pod ended there"
                                          : absl::StrCat("deleting coordinator pod ", pod->name);
  pass.out.events.push_back(
      {false, "CoordinatorMoving",
       absl::StrCat(why, ": ", action,
                    "; its successor starts elsewhere as soon as it is gone (not a restart: no "
                    "back-off, no task restarted)")});
  return Next::kContinue;
}

}  // namespace phalanx::op
