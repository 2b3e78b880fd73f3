#include "tests/localcluster/scheduler.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/log.h"
#include "common/kube/object_meta.h"

namespace phalanx::localcluster {
namespace {

using kube::MetaString;
using kube::StringAt;

constexpr char kGpu[] = "nvidia.com/gpu";

using kube::FieldOrNull;

constexpr auto& Array = kube::ArrayOrEmpty;

// A resource quantity as Phalanx's pods write GPU counts: "2" or 2. Anything else is 0.
int64_t Quantity(const Json& value) {
  if (value.is_number()) return value.as_number().to_int64();
  int64_t n = 0;
  if (value.is_string() && absl::SimpleAtoi(value.as_string(), &n)) return n;
  return 0;
}

bool IsTerminated(const Json& pod) {
  const std::string phase = StringAt(pod, "status.phase");
  return phase == "Succeeded" || phase == "Failed";
}

bool IsReady(const Json& node) {
  for (const Json& c : Array(FieldOrNull(node, "status"), "conditions").as_array()) {
    if (StringAt(c, "type") == "Ready") return StringAt(c, "status") == "True";
  }
  return false;
}

// core/v1 Toleration.ToleratesTaint.
bool Tolerates(const Json& toleration, const std::string& key, const std::string& value,
               const std::string& effect) {
  const std::string t_effect = StringAt(toleration, "effect");
  if (!t_effect.empty() && t_effect != effect) return false;
  const std::string t_key = StringAt(toleration, "key");
  if (!t_key.empty() && t_key != key) return false;
  const std::string op = StringAt(toleration, "operator");
  if (op == "Exists") return true;
  return (op.empty() || op == "Equal") && StringAt(toleration, "value") == value;
}

bool PodTolerates(const Json& pod, const std::string& key, const std::string& value,
                  const std::string& effect) {
  for (const Json& t : Array(FieldOrNull(pod, "spec"), "tolerations").as_array()) {
    if (Tolerates(t, key, value, effect)) return true;
  }
  return false;
}

// core/v1 NodeSelectorRequirement against a node's labels (matchExpressions) or fields
// (matchFields: only metadata.name exists).
bool RequirementMatches(const Json& req, const std::map<std::string, std::string>& values) {
  const std::string op = StringAt(req, "operator");
  auto it = values.find(StringAt(req, "key"));
  const bool has = it != values.end();
  std::vector<std::string> listed;
  for (const Json& v : Array(req, "values").as_array()) {
    if (v.is_string()) listed.push_back(v.as_string());
  }
  const bool in = has && std::find(listed.begin(), listed.end(), it->second) != listed.end();
  if (op == "In") return in;
  if (op == "NotIn") return !in;
  if (op == "Exists") return has;
  if (op == "DoesNotExist") return !has;
  if ((op == "Gt" || op == "Lt") && has && listed.size() == 1) {
    int64_t have = 0, bound = 0;
    if (!absl::SimpleAtoi(it->second, &have) || !absl::SimpleAtoi(listed[0], &bound)) return false;
    return op == "Gt" ? have > bound : have < bound;
  }
  return false;
}

// core/v1 NodeSelectorTerm: every requirement holds; an empty term matches no node.
bool TermMatches(const Json& term, const Json& node) {
  const Json& expressions = Array(term, "matchExpressions");
  const Json& fields = Array(term, "matchFields");
  if (expressions.size() == 0 && fields.size() == 0) return false;
  const std::map<std::string, std::string> labels = kube::LabelsOf(node);
  for (const Json& req : expressions.as_array()) {
    if (!RequirementMatches(req, labels)) return false;
  }
  const std::map<std::string, std::string> names = {{"metadata.name", MetaString(node, "name")}};
  for (const Json& req : fields.as_array()) {
    if (!RequirementMatches(req, names)) return false;
  }
  return true;
}

const Json& AffinityOf(const Json& pod, const char* kind) {
  return FieldOrNull(FieldOrNull(FieldOrNull(pod, "spec"), "affinity"), kind);
}

// requiredDuringSchedulingIgnoredDuringExecution of the pod's node affinity: any term (they are
// ORed) matches; no such field matches every node.
bool RequiredNodeAffinityMatches(const Json& pod, const Json& node) {
  const Json& required = FieldOrNull(AffinityOf(pod, "nodeAffinity"),
                                     "requiredDuringSchedulingIgnoredDuringExecution");
  if (!required.is_object()) return true;
  for (const Json& term : Array(required, "nodeSelectorTerms").as_array()) {
    if (TermMatches(term, node)) return true;
  }
  return false;
}

// metav1.LabelSelector (matchLabels, and matchExpressions In/NotIn/Exists/DoesNotExist) against
// `labels`; a null selector matches nothing, an empty one everything.
bool SelectorMatches(const Json& selector, const std::map<std::string, std::string>& labels) {
  if (!selector.is_object()) return false;
  const Json& match = FieldOrNull(selector, "matchLabels");
  if (match.is_object()) {
    for (const auto& [k, v] : match.as_object()) {
      auto it = labels.find(k);
      if (it == labels.end() || !v.is_string() || it->second != v.as_string()) return false;
    }
  }
  for (const Json& req : Array(selector, "matchExpressions").as_array()) {
    if (!RequirementMatches(req, labels)) return false;
  }
  return true;
}

// ---- Required inter-pod affinity (kube-scheduler's InterPodAffinity filter, 1.28): a term names
// pods (labelSelector; in the namespaces it lists or its namespaceSelector picks, else the
// namespace of the pod that has the term) and a node label (topologyKey); the nodes sharing its
// value are one domain. Namespaces are known here only by their kubernetes.io/metadata.name
// label. ----

using Labels = std::map<std::string, std::string>;

std::vector<Json> RequiredTerms(const Json& pod, const char* kind) {
  const Json& terms =
      Array(AffinityOf(pod, kind), "requiredDuringSchedulingIgnoredDuringExecution");
  return std::vector<Json>(terms.as_array().begin(), terms.as_array().end());
}

// A pod as the inter-pod rules read it, parsed once per pass: the rules look at every placed pod
// for every pending one, and reading each placed pod's JSON there made a pass over thousands of
// pods take minutes (8,000 task pods of the operator's 1,000-job bench, issue 33).
struct PlacedPod {
  std::string ns;
  std::string node;  // "" while unbound
  Labels labels;
  bool terminated = false;
  std::vector<Json> required_anti;  // its required pod anti-affinity terms
};

PlacedPod PlacedPodOf(const Json& pod) {
  return PlacedPod{MetaString(pod, "namespace"), StringAt(pod, "spec.nodeName"),
                   kube::LabelsOf(pod), IsTerminated(pod), RequiredTerms(pod, "podAntiAffinity")};
}

// Whether `other` (a pod on a node, not terminated) is one that `term`, of a pod in namespace
// `ns`, names.
bool TermNames(const Json& term, const std::string& ns, const PlacedPod& other) {
  if (other.terminated) return false;
  const Json& namespaces = Array(term, "namespaces");
  const Json& namespace_selector = FieldOrNull(term, "namespaceSelector");
  bool in_namespace = namespaces.size() == 0 && namespace_selector.is_null() && other.ns == ns;
  for (const Json& n : namespaces.as_array()) {
    in_namespace |= n.is_string() && n.as_string() == other.ns;
  }
  in_namespace |= SelectorMatches(namespace_selector, {{"kubernetes.io/metadata.name", other.ns}});
  return in_namespace && SelectorMatches(FieldOrNull(term, "labelSelector"), other.labels);
}

// A preferred pod anti-affinity term of the pod being placed, with the values of its topology
// key where a placed pod it names runs (gathered once per pod, not once per node).
struct PreferredAnti {
  int64_t weight = 0;
  std::string key;
  std::set<std::string> taken;
};

std::vector<PreferredAnti> PreferredAntiOf(const Json& pod,
                                           const std::map<std::string, Labels>& labels_of,
                                           const std::vector<PlacedPod>& placed) {
  std::vector<PreferredAnti> out;
  const std::string ns = MetaString(pod, "namespace");
  for (const Json& term :
       Array(AffinityOf(pod, "podAntiAffinity"), "preferredDuringSchedulingIgnoredDuringExecution")
           .as_array()) {
    const Json& weight = FieldOrNull(term, "weight");
    if (!weight.is_integer()) continue;
    const Json& affinity_term = FieldOrNull(term, "podAffinityTerm");
    PreferredAnti anti{weight.as_integer(), StringAt(affinity_term, "topologyKey"), {}};
    const Json& selector = FieldOrNull(affinity_term, "labelSelector");
    for (const PlacedPod& other : placed) {
      if (other.terminated || other.ns != ns) continue;
      auto node = labels_of.find(other.node);
      if (node == labels_of.end()) continue;
      auto value = node->second.find(anti.key);
      if (value == node->second.end() || anti.taken.contains(value->second)) continue;
      if (SelectorMatches(selector, other.labels)) anti.taken.insert(value->second);
    }
    out.push_back(std::move(anti));
  }
  return out;
}

// How much `node` (labels `node_labels`) suits the pod's preferences (kube-scheduler's
// NodeAffinity and InterPodAffinity scores, unnormalized): the weights of the preferred node
// affinity terms it matches, less the weights of the preferred pod anti-affinity terms it would
// break (a matching pod of the same namespace, not terminated, in the same topology domain).
int64_t Preference(const Json& pod, const Json& node, const Labels& node_labels,
                   const std::vector<PreferredAnti>& anti) {
  int64_t score = 0;
  for (const Json& term :
       Array(AffinityOf(pod, "nodeAffinity"), "preferredDuringSchedulingIgnoredDuringExecution")
           .as_array()) {
    const Json& weight = FieldOrNull(term, "weight");
    if (weight.is_integer() && TermMatches(FieldOrNull(term, "preference"), node)) {
      score += weight.as_integer();
    }
  }
  for (const PreferredAnti& term : anti) {
    auto domain = node_labels.find(term.key);
    if (domain != node_labels.end() && term.taken.contains(domain->second)) score -= term.weight;
  }
  return score;
}

// A topology domain: (key, value).
using Domain = std::pair<std::string, std::string>;

// What the InterPodAffinity filter needs to know of the placed pods for one pod: the same for
// every node, so it is gathered once per pod, not once per node (at 1,600 pods on 50 nodes the
// per-node scan was most of a scheduling pass).
struct InterPodFacts {
  std::vector<std::string> affinity_keys;  // the required affinity terms' topology keys
  std::map<Domain, int> affinity_counts;   // domains of placed pods matching all of them
  bool matches_own = false;                // the pod matches all its own affinity terms
  std::map<Domain, int> anti;              // domains of placed pods its anti-affinity names
  std::map<Domain, int> existing;          // domains whose pods' anti-affinity names it
};

// `labels_of`: every node's labels by name.
InterPodFacts InterPodFactsOf(const Json& pod, const std::map<std::string, Labels>& labels_of,
                              const std::vector<PlacedPod>& pods) {
  InterPodFacts facts;
  const std::string ns = MetaString(pod, "namespace");
  const PlacedPod self = PlacedPodOf(pod);
  // The domain of `other`'s node for `key`, if its node has that label.
  auto domain_of = [&](const PlacedPod& other, const std::string& key) -> std::optional<Domain> {
    auto n = labels_of.find(other.node);
    if (n == labels_of.end()) return std::nullopt;
    auto v = n->second.find(key);
    if (v == n->second.end()) return std::nullopt;
    return Domain{key, v->second};
  };
  const std::vector<Json> affinity = RequiredTerms(pod, "podAffinity");
  for (const Json& term : affinity) facts.affinity_keys.push_back(StringAt(term, "topologyKey"));
  if (!affinity.empty()) {
    for (const PlacedPod& other : pods) {
      if (!std::all_of(affinity.begin(), affinity.end(),
                       [&](const Json& term) { return TermNames(term, ns, other); })) {
        continue;
      }
      for (const Json& term : affinity) {
        if (auto d = domain_of(other, StringAt(term, "topologyKey"))) ++facts.affinity_counts[*d];
      }
    }
    facts.matches_own = std::all_of(affinity.begin(), affinity.end(), [&](const Json& t) {
      return SelectorMatches(FieldOrNull(t, "labelSelector"), self.labels);
    });
  }
  for (const Json& term : self.required_anti) {
    for (const PlacedPod& other : pods) {
      if (!TermNames(term, ns, other)) continue;
      if (auto d = domain_of(other, StringAt(term, "topologyKey"))) ++facts.anti[*d];
    }
  }
  for (const PlacedPod& other : pods) {
    if (other.terminated) continue;
    for (const Json& term : other.required_anti) {
      if (!TermNames(term, other.ns, self)) continue;
      if (auto d = domain_of(other, StringAt(term, "topologyKey"))) ++facts.existing[*d];
    }
  }
  return facts;
}

// The InterPodAffinity filter's reason for a node with `node_labels`, or "", as kube-scheduler
// decides it:
//   - affinity: the placed pods that match *all* the pod's required affinity terms count for
//     each term's domain; the node must have every term's key and a counted pod in each term's
//     domain, unless none is counted anywhere and the pod matches all its own terms (the first
//     of a group goes anywhere);
//   - anti-affinity: no placed pod that a term names in that term's domain of the node;
//   - symmetry: no placed pod whose own required anti-affinity names this pod, in that term's
//     domain of the node.
std::string InterPodMisfit(const InterPodFacts& facts, const Labels& node_labels) {
  auto node_in = [&](const std::map<Domain, int>& counts) {
    for (const auto& [key, value] : node_labels) {
      if (auto c = counts.find({key, value}); c != counts.end() && c->second > 0) return true;
    }
    return false;
  };
  if (!facts.affinity_keys.empty()) {
    bool pods_exist = true;
    for (const std::string& key : facts.affinity_keys) {
      auto value = node_labels.find(key);
      if (value == node_labels.end()) return "node(s) didn't match pod affinity rules";
      auto c = facts.affinity_counts.find({value->first, value->second});
      pods_exist &= c != facts.affinity_counts.end() && c->second > 0;
    }
    const bool none_anywhere =
        std::all_of(facts.affinity_counts.begin(), facts.affinity_counts.end(),
                    [](const auto& c) { return c.second <= 0; });
    if (!pods_exist && !(none_anywhere && facts.matches_own)) {
      return "node(s) didn't match pod affinity rules";
    }
  }
  if (node_in(facts.anti)) return "node(s) didn't match pod anti-affinity rules";
  if (node_in(facts.existing)) return "node(s) didn't satisfy existing pods anti-affinity rules";
  return "";
}

// Why `node` cannot take `pod` (a kube-scheduler reason, counted per node), or "" if it can.
// Checks run in kube-scheduler's plugin order and the first failure is the node's reason.
std::string Misfit(const Json& pod, const Json& node, int64_t gpus_used, int64_t gpus_wanted,
                   const InterPodFacts& inter_pod, const Labels& node_labels) {
  const Json& spec = FieldOrNull(node, "spec");
  if (FieldOrNull(spec, "unschedulable").is_boolean() && spec.at("unschedulable").as_bool() &&
      !PodTolerates(pod, "node.kubernetes.io/unschedulable", "", "NoSchedule")) {
    return "node(s) were unschedulable";
  }
  // The node lifecycle controller taints a NotReady node; this cluster reads the condition.
  if (!IsReady(node)) return "node(s) had untolerated taint {node.kubernetes.io/not-ready: }";
  for (const Json& taint : Array(spec, "taints").as_array()) {
    const std::string effect = StringAt(taint, "effect");
    if (effect != "NoSchedule" && effect != "NoExecute") continue;
    const std::string key = StringAt(taint, "key");
    const std::string value = StringAt(taint, "value");
    if (!PodTolerates(pod, key, value, effect)) {
      return absl::StrCat("node(s) had untolerated taint {", key, ": ", value, "}");
    }
  }
  const Json& selector = FieldOrNull(FieldOrNull(pod, "spec"), "nodeSelector");
  if (selector.is_object()) {
    const std::map<std::string, std::string> labels = kube::LabelsOf(node);
    for (const auto& [key, value] : selector.as_object()) {
      auto it = labels.find(key);
      if (it == labels.end() || !value.is_string() || it->second != value.as_string()) {
        return "node(s) didn't match Pod's node affinity/selector";
      }
    }
  }
  if (!RequiredNodeAffinityMatches(pod, node)) {
    return "node(s) didn't match Pod's node affinity/selector";
  }
  const int64_t allocatable =
      Quantity(FieldOrNull(FieldOrNull(FieldOrNull(node, "status"), "allocatable"), kGpu));
  if (gpus_wanted > 0 && gpus_used + gpus_wanted > allocatable) {
    return absl::StrCat("Insufficient ", kGpu);
  }
  return InterPodMisfit(inter_pod, node_labels);
}

// ChooseNode with the GPUs in use per node already summed (the pass keeps them up to date);
// `pods` are the pods on nodes (for pod anti-affinity).
std::optional<std::string> ChooseWithUsage(const Json& pod, const std::vector<Json>& nodes,
                                           const std::map<std::string, int64_t>& gpus_used,
                                           const std::vector<PlacedPod>& pods,
                                           std::string* why_not) {
  if (nodes.empty()) {
    if (why_not != nullptr) *why_not = "no nodes available to schedule pods";
    return std::nullopt;
  }
  const int64_t wanted = PodGpuRequest(pod);
  // (less preferred, GPUs free after, name): preferences first, then bin packing.
  std::optional<std::tuple<int64_t, int64_t, std::string>> best;
  std::map<std::string, int> reasons;
  std::map<std::string, Labels> labels_of;  // node name -> its labels
  for (const Json& n : nodes) labels_of[MetaString(n, "name")] = kube::LabelsOf(n);
  const InterPodFacts inter_pod = InterPodFactsOf(pod, labels_of, pods);
  const std::vector<PreferredAnti> preferred_anti = PreferredAntiOf(pod, labels_of, pods);
  for (const Json& node : nodes) {
    const std::string name = MetaString(node, "name");
    auto used_it = gpus_used.find(name);
    const int64_t used = used_it == gpus_used.end() ? 0 : used_it->second;
    const std::string misfit = Misfit(pod, node, used, wanted, inter_pod, labels_of[name]);
    if (!misfit.empty()) {
      ++reasons[misfit];
      continue;
    }
    const int64_t allocatable =
        Quantity(FieldOrNull(FieldOrNull(FieldOrNull(node, "status"), "allocatable"), kGpu));
    std::tuple<int64_t, int64_t, std::string> score{
        -Preference(pod, node, labels_of[name], preferred_anti), allocatable - used - wanted, name};
    if (!best.has_value() || score < *best) best = std::move(score);
  }
  if (best.has_value()) return std::get<2>(*best);
  if (why_not != nullptr) {
    // kube-scheduler sorts the "<count> <reason>" strings.
    std::vector<std::string> parts;
    for (const auto& [reason, count] : reasons) parts.push_back(absl::StrCat(count, " ", reason));
    std::sort(parts.begin(), parts.end());
    *why_not =
        absl::StrCat("0/", nodes.size(), " nodes are available: ", absl::StrJoin(parts, ", "), ".");
  }
  return std::nullopt;
}

void AddUsage(const Json& pod, std::map<std::string, int64_t>& gpus_used) {
  const std::string node = StringAt(pod, "spec.nodeName");
  if (!node.empty() && !IsTerminated(pod)) gpus_used[node] += PodGpuRequest(pod);
}

}  // namespace

bool SetScheduledCondition(Json& pod, bool scheduled, const std::string& message, absl::Time now) {
  Json& status = pod["status"];
  if (!status.is_object()) status = Json::object();
  const std::string want = scheduled ? "True" : "False";
  const std::string reason = scheduled ? "" : "Unschedulable";
  Json& conditions = status["conditions"];
  if (!conditions.is_array()) conditions = Json::array();
  std::optional<size_t> index;
  for (size_t i = 0; i < conditions.size(); ++i) {
    if (StringAt(conditions[i], "type") == "PodScheduled") index = i;
  }
  std::string transition = kube::FormatKubeTime(now);
  if (index.has_value()) {
    const Json& old = conditions[*index];
    if (StringAt(old, "status") == want && StringAt(old, "reason") == reason &&
        StringAt(old, "message") == message) {
      return false;
    }
    if (StringAt(old, "status") == want) transition = StringAt(old, "lastTransitionTime");
  }
  Json condition = Json::object();
  condition["type"] = Json::string("PodScheduled");
  condition["status"] = Json::string(want);
  condition["lastProbeTime"] = Json::null();
  condition["lastTransitionTime"] = Json::string(transition);
  if (!reason.empty()) condition["reason"] = Json::string(reason);
  if (!message.empty()) condition["message"] = Json::string(message);
  conditions[index.value_or(conditions.size())] = condition;
  if (StringAt(pod, "status.phase").empty()) status["phase"] = Json::string("Pending");
  return true;
}

int64_t PodGpuRequest(const Json& pod) {
  int64_t total = 0;
  for (const Json& container : Array(FieldOrNull(pod, "spec"), "containers").as_array()) {
    const Json& resources = FieldOrNull(container, "resources");
    const Json& limit = FieldOrNull(FieldOrNull(resources, "limits"), kGpu);
    total +=
        Quantity(limit.is_null() ? FieldOrNull(FieldOrNull(resources, "requests"), kGpu) : limit);
  }
  return total;
}

std::optional<std::string> ChooseNode(const Json& pod, const std::vector<Json>& nodes,
                                      const std::vector<Json>& pods_on_nodes,
                                      std::string* why_not) {
  std::map<std::string, int64_t> gpus_used;
  std::vector<PlacedPod> placed;
  for (const Json& other : pods_on_nodes) {
    AddUsage(other, gpus_used);
    placed.push_back(PlacedPodOf(other));
  }
  return ChooseWithUsage(pod, nodes, gpus_used, placed, why_not);
}

int SchedulePending(ClusterAccess& access, base::Clock& clock) {
  // Cheap when nothing waits (the common case in the kubelet's loop): only pending pods are
  // copied out.
  static const kube::ObjectFilter kUnbound = *kube::ObjectFilter::Parse("", "spec.nodeName=");
  absl::StatusOr<ListResult> pending = access.List("pods", kUnbound);
  if (!pending.ok()) return 0;
  std::vector<Json> queue;
  for (Json& pod : pending->items) {
    if (!kube::IsBeingDeleted(pod)) queue.push_back(std::move(pod));
  }
  if (queue.empty()) return 0;
  std::sort(queue.begin(), queue.end(), [](const Json& a, const Json& b) {
    // Creation order: the timestamp has second precision; the name breaks ties stably.
    return std::tuple(MetaString(a, "creationTimestamp"), MetaString(a, "name"),
                      MetaString(a, "uid")) < std::tuple(MetaString(b, "creationTimestamp"),
                                                         MetaString(b, "name"),
                                                         MetaString(b, "uid"));
  });
  absl::StatusOr<ListResult> nodes = access.List("nodes", kube::ObjectFilter{});
  absl::StatusOr<ListResult> all = access.List("pods", kube::ObjectFilter{});
  if (!nodes.ok() || !all.ok()) return 0;
  std::map<std::string, int64_t> gpus_used;
  std::vector<PlacedPod> on_nodes;  // for pod (anti-)affinity; grows with what this pass binds
  for (const Json& pod : all->items) {
    AddUsage(pod, gpus_used);
    if (!StringAt(pod, "spec.nodeName").empty()) on_nodes.push_back(PlacedPodOf(pod));
  }

  int bound = 0;
  const absl::Time now = clock.Now();
  for (Json& pod : queue) {
    const std::string ns = MetaString(pod, "namespace");
    std::string why_not;
    std::optional<std::string> node =
        ChooseWithUsage(pod, nodes->items, gpus_used, on_nodes, &why_not);
    if (!node.has_value()) {
      if (SetScheduledCondition(pod, false, why_not, now)) {
        // A conflict means someone else changed the pod; the next pass re-reads it.
        access.Update("pods", ns, pod, /*status=*/true).IgnoreError();
      }
      continue;
    }
    absl::StatusOr<Json> updated = access.Bind(pod, *node);
    if (!updated.ok()) {
      if (!absl::IsNotFound(updated.status()) && !absl::IsAborted(updated.status())) {
        PHX_LOG(WARNING) << "scheduler: binding " << ns << "/" << MetaString(pod, "name") << " to "
                         << *node << ": " << updated.status();
      }
      continue;
    }
    ++bound;
    AddUsage(*updated, gpus_used);
    on_nodes.push_back(PlacedPodOf(*updated));
  }
  return bound;
}

absl::StatusOr<Json> StoreAccess::Bind(const Json& pod, const std::string& node) {
  // What the pods/binding subresource does: spec.nodeName (only while unset), then the
  // PodScheduled condition.
  if (!StringAt(pod, "spec.nodeName").empty()) {
    return absl::AbortedError("pod is already assigned to node " + StringAt(pod, "spec.nodeName"));
  }
  Json bound = pod;
  bound["spec"]["nodeName"] = Json::string(node);
  absl::StatusOr<Json> updated =
      store_.Update("pods", MetaString(pod, "namespace"), bound, /*status_subresource=*/false);
  if (!updated.ok()) return updated;
  if (!SetScheduledCondition(*updated, true, "", clock_.Now())) return updated;
  absl::StatusOr<Json> with_condition =
      store_.Update("pods", MetaString(pod, "namespace"), *updated, /*status_subresource=*/true);
  return with_condition.ok() ? with_condition : updated;
}

}  // namespace phalanx::localcluster
