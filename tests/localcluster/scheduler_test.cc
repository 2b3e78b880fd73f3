#include "tests/localcluster/scheduler.h"

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::localcluster {
namespace {

using ::phalanx::testing::IsOk;
using ::testing::HasSubstr;

// Builders for the parts of Node and Pod objects the scheduler reads.
class NodeBuilder {
 public:
  explicit NodeBuilder(const std::string& name) {
    node_["metadata"]["name"] = Json::string(name);
    node_["metadata"]["labels"] = Json::object();
    node_["spec"] = Json::object();
    Gpus("0");
    Ready(true);
  }
  NodeBuilder& Gpus(const std::string& n) {
    node_["status"]["allocatable"]["nvidia.com/gpu"] = Json::string(n);
    return *this;
  }
  NodeBuilder& Ready(bool ready) {
    Json c = Json::object();
    c["type"] = Json::string("Ready");
    c["status"] = Json::string(ready ? "True" : "False");
    node_["status"]["conditions"] = Json::array();
    node_["status"]["conditions"][0] = c;
    return *this;
  }
  NodeBuilder& Label(const std::string& k, const std::string& v) {
    node_["metadata"]["labels"][k] = Json::string(v);
    return *this;
  }
  NodeBuilder& Taint(const std::string& k, const std::string& v, const std::string& effect) {
    Json t = Json::object();
    t["key"] = Json::string(k);
    t["value"] = Json::string(v);
    t["effect"] = Json::string(effect);
    Json& taints = node_["spec"]["taints"];
    if (!taints.is_array()) taints = Json::array();
    taints[taints.size()] = t;
    return *this;
  }
  NodeBuilder& Unschedulable() {
    node_["spec"]["unschedulable"] = Json::boolean(true);
    return *this;
  }
  Json Build() const { return node_; }

 private:
  Json node_ = Json::object();
};

class PodBuilder {
 public:
  explicit PodBuilder(const std::string& name) {
    pod_["metadata"]["name"] = Json::string(name);
    pod_["spec"]["containers"] = Json::array();
    pod_["spec"]["containers"][0]["name"] = Json::string("main");
  }
  // As a string limit ("2"), or as a number request when `as_number`.
  PodBuilder& Gpus(int n, bool as_number = false) {
    Json& resources = pod_["spec"]["containers"][0]["resources"];
    if (as_number) {
      resources["requests"]["nvidia.com/gpu"] = Json::number(n);
    } else {
      resources["limits"]["nvidia.com/gpu"] = Json::string(std::to_string(n));
    }
    return *this;
  }
  PodBuilder& OnNode(const std::string& node, const std::string& phase = "Running") {
    pod_["spec"]["nodeName"] = Json::string(node);
    pod_["status"]["phase"] = Json::string(phase);
    return *this;
  }
  PodBuilder& Selector(const std::string& k, const std::string& v) {
    pod_["spec"]["nodeSelector"][k] = Json::string(v);
    return *this;
  }
  PodBuilder& Toleration(const std::string& key, const std::string& op, const std::string& value,
                         const std::string& effect) {
    Json t = Json::object();
    if (!key.empty()) t["key"] = Json::string(key);
    t["operator"] = Json::string(op);
    if (!value.empty()) t["value"] = Json::string(value);
    if (!effect.empty()) t["effect"] = Json::string(effect);
    Json& list = pod_["spec"]["tolerations"];
    if (!list.is_array()) list = Json::array();
    list[list.size()] = t;
    return *this;
  }
  // spec.affinity, as JSON.
  PodBuilder& Affinity(const std::string& json) {
    pod_["spec"]["affinity"] = Json::parse(json);
    return *this;
  }
  PodBuilder& Label(const std::string& k, const std::string& v) {
    pod_["metadata"]["labels"][k] = Json::string(v);
    return *this;
  }
  PodBuilder& Namespace(const std::string& ns) {
    pod_["metadata"]["namespace"] = Json::string(ns);
    return *this;
  }
  Json Build() const { return pod_; }

 private:
  Json pod_ = Json::object();
};

TEST(PodGpuRequestTest, SumsLimitsElseRequests_StringsOrNumbers) {
  EXPECT_EQ(PodGpuRequest(PodBuilder("p").Build()), 0);
  EXPECT_EQ(PodGpuRequest(PodBuilder("p").Gpus(2).Build()), 2);
  EXPECT_EQ(PodGpuRequest(PodBuilder("p").Gpus(3, /*as_number=*/true).Build()), 3);
  Json two = PodBuilder("p").Gpus(1).Build();
  two["spec"]["containers"][1]["resources"]["requests"]["nvidia.com/gpu"] = Json::string("4");
  EXPECT_EQ(PodGpuRequest(two), 5);
}

struct ChooseCase {
  std::string name;
  Json pod;
  std::vector<Json> nodes;
  std::vector<Json> pods_on_nodes;
  std::optional<std::string> want;
  std::string want_why;  // substring of the message when nothing fits
};

// Each case's choice, and when nothing fits, the scheduler's message.
void ExpectChoices(const std::vector<ChooseCase>& cases) {
  for (const ChooseCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::string why_not;
    EXPECT_EQ(ChooseNode(c.pod, c.nodes, c.pods_on_nodes, &why_not), c.want);
    if (!c.want.has_value()) {
      EXPECT_THAT(why_not, HasSubstr(c.want_why));
    }
  }
}

TEST(ChooseNodeTest, Table) {
  const std::vector<ChooseCase> cases = {
      {"gpu fit: only the node with room",
       PodBuilder("p").Gpus(4).Build(),
       {NodeBuilder("a").Gpus("2").Build(), NodeBuilder("b").Gpus("8").Build()},
       {},
       "b",
       ""},
      {"bin packing: the fullest node that still fits",
       PodBuilder("p").Gpus(2).Build(),
       {NodeBuilder("a").Gpus("8").Build(), NodeBuilder("b").Gpus("8").Build(),
        NodeBuilder("c").Gpus("8").Build()},
       {PodBuilder("x").Gpus(4).OnNode("b").Build(), PodBuilder("y").Gpus(7).OnNode("c").Build()},
       "b",
       ""},
      {"ties broken by name",
       PodBuilder("p").Gpus(1).Build(),
       {NodeBuilder("b").Gpus("4").Build(), NodeBuilder("a").Gpus("4").Build()},
       {},
       "a",
       ""},
      {"finished pods free their GPUs",
       PodBuilder("p").Gpus(8).Build(),
       {NodeBuilder("a").Gpus("8").Build()},
       {PodBuilder("done").Gpus(8).OnNode("a", "Succeeded").Build(),
        PodBuilder("failed").Gpus(8).OnNode("a", "Failed").Build()},
       "a",
       ""},
      {"insufficient gpus everywhere",
       PodBuilder("p").Gpus(2).Build(),
       {NodeBuilder("a").Gpus("8").Build(), NodeBuilder("b").Gpus("1").Build()},
       {PodBuilder("x").Gpus(7).OnNode("a").Build()},
       std::nullopt,
       "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."},
      {"untolerated taint, and the message counts reasons",
       PodBuilder("p").Gpus(2).Build(),
       {NodeBuilder("a").Gpus("1").Build(), NodeBuilder("b").Gpus("1").Build(),
        NodeBuilder("c").Gpus("8").Taint("k", "v", "NoSchedule").Build()},
       {},
       std::nullopt,
       "0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2 Insufficient "
       "nvidia.com/gpu."},
      {"PreferNoSchedule taints do not block",
       PodBuilder("p").Build(),
       {NodeBuilder("a").Taint("k", "v", "PreferNoSchedule").Build()},
       {},
       "a",
       ""},
      {"toleration Equal matches key, value and effect",
       PodBuilder("p").Toleration("k", "Equal", "v", "NoSchedule").Build(),
       {NodeBuilder("a").Taint("k", "v", "NoSchedule").Build()},
       {},
       "a",
       ""},
      {"toleration with another value does not",
       PodBuilder("p").Toleration("k", "Equal", "w", "NoSchedule").Build(),
       {NodeBuilder("a").Taint("k", "v", "NoSchedule").Build()},
       {},
       std::nullopt,
       "untolerated taint {k: v}"},
      {"toleration Exists with no effect tolerates NoExecute too",
       PodBuilder("p").Toleration("k", "Exists", "", "").Build(),
       {NodeBuilder("a").Taint("k", "v", "NoExecute").Build()},
       {},
       "a",
       ""},
      {"empty key with Exists tolerates everything",
       PodBuilder("p").Toleration("", "Exists", "", "").Build(),
       {NodeBuilder("a").Taint("k", "v", "NoSchedule").Taint("j", "", "NoExecute").Build()},
       {},
       "a",
       ""},
      {"nodeSelector",
       PodBuilder("p").Selector("pool", "gpu").Build(),
       {NodeBuilder("a").Label("pool", "cpu").Build(),
        NodeBuilder("b").Label("pool", "gpu").Build()},
       {},
       "b",
       ""},
      {"nodeSelector matching nothing",
       PodBuilder("p").Selector("pool", "tpu").Build(),
       {NodeBuilder("a").Label("pool", "gpu").Build()},
       {},
       std::nullopt,
       "1 node(s) didn't match Pod's node affinity/selector"},
      {"not ready nodes are skipped",
       PodBuilder("p").Build(),
       {NodeBuilder("a").Ready(false).Build(), NodeBuilder("b").Build()},
       {},
       "b",
       ""},
      {"not ready everywhere",
       PodBuilder("p").Build(),
       {NodeBuilder("a").Ready(false).Build()},
       {},
       std::nullopt,
       "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }"},
      {"unschedulable nodes are skipped",
       PodBuilder("p").Build(),
       {NodeBuilder("a").Unschedulable().Build()},
       {},
       std::nullopt,
       "1 node(s) were unschedulable"},
      {"no nodes at all", PodBuilder("p").Build(), {}, {}, std::nullopt, "no nodes available"},
  };
  ExpectChoices(cases);
}

// Required node affinity as the operator writes it for a coordinator (issue 13): one term per
// `expressions` JSON array.
std::string Required(const std::vector<std::string>& expressions) {
  std::string terms;
  for (const std::string& e : expressions) {
    absl::StrAppend(&terms, terms.empty() ? "" : ",", R"({"matchExpressions":)", e, "}");
  }
  return absl::StrCat(
      R"({"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[)",
      terms, "]}}}");
}

// The coordinator's preferred anti-affinity to its job's task pods.
constexpr char kAwayFromTasks[] =
    R"({"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":100,)"
    R"("podAffinityTerm":{"labelSelector":{"matchLabels":{"job":"j","role":"task"}},)"
    R"("topologyKey":"kubernetes.io/hostname"}}]}})";

NodeBuilder Host(const std::string& name) {
  NodeBuilder node(name);
  node.Label("kubernetes.io/hostname", name);
  return node;
}

TEST(ChooseNodeTest, Affinity) {
  const Json task_on_a =
      PodBuilder("t").Label("job", "j").Label("role", "task").OnNode("a").Build();
  const std::vector<ChooseCase> cases = {
      {"NotIn hostname keeps the pod off a node under a notice",
       PodBuilder("p")
           .Affinity(Required({R"([{"key":"kubernetes.io/hostname",)"
                               R"("operator":"NotIn","values":["a"]}])"}))
           .Build(),
       {Host("a").Build(), Host("b").Build()},
       {},
       "b",
       ""},
      {"NotIn every node: nothing fits",
       PodBuilder("p")
           .Affinity(Required({R"([{"key":"kubernetes.io/hostname",)"
                               R"("operator":"NotIn","values":["a","b"]}])"}))
           .Build(),
       {Host("a").Build(), Host("b").Build()},
       {},
       std::nullopt,
       "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."},
      {"expressions of a term are ANDed",
       PodBuilder("p")
           .Affinity(Required({R"([{"key":"pool","operator":"In","values":["cpu"]},)"
                               R"({"key":"kubernetes.io/hostname","operator":"NotIn",)"
                               R"("values":["a"]}])"}))
           .Build(),
       {Host("a").Label("pool", "cpu").Build(), Host("b").Build(),
        Host("c").Label("pool", "cpu").Build()},
       {},
       "c",
       ""},
      {"terms are ORed",
       PodBuilder("p")
           .Affinity(Required({R"([{"key":"pool","operator":"In","values":["x"]}])",
                               R"([{"key":"zone","operator":"Exists"}])"}))
           .Build(),
       {Host("a").Build(), Host("b").Label("zone", "z1").Build()},
       {},
       "b",
       ""},
      {"DoesNotExist and Gt",
       PodBuilder("p")
           .Affinity(Required({R"([{"key":"spot","operator":"DoesNotExist"},)"
                               R"({"key":"cores","operator":"Gt","values":["8"]}])"}))
           .Build(),
       {Host("a").Label("cores", "16").Label("spot", "1").Build(),
        Host("b").Label("cores", "4").Build(), Host("c").Label("cores", "32").Build()},
       {},
       "c",
       ""},
      {"matchFields on metadata.name",
       PodBuilder("p")
           .Affinity(
               R"({"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":)"
               R"([{"matchFields":[{"key":"metadata.name","operator":"In","values":["b"]}]}]}}})")
           .Build(),
       {Host("a").Build(), Host("b").Build()},
       {},
       "b",
       ""},
      {"an empty term matches no node",
       PodBuilder("p").Affinity(Required({"[]"})).Build(),
       {Host("a").Build()},
       {},
       std::nullopt,
       "didn't match Pod's node affinity/selector"},
      {"preferred anti-affinity avoids the node of a matching pod",
       PodBuilder("p").Affinity(kAwayFromTasks).Build(),
       {Host("a").Build(), Host("b").Build()},
       {task_on_a},
       "b",
       ""},
      {"preferred anti-affinity is only a preference",
       PodBuilder("p").Affinity(kAwayFromTasks).Build(),
       {Host("a").Build()},
       {task_on_a},
       "a",
       ""},
      {"anti-affinity ignores other namespaces and ended pods",
       PodBuilder("p").Affinity(kAwayFromTasks).Build(),
       {Host("a").Build(), Host("b").Build()},
       {PodBuilder("t")
            .Label("job", "j")
            .Label("role", "task")
            .Namespace("other")
            .OnNode("a")
            .Build(),
        PodBuilder("u").Label("job", "j").Label("role", "task").OnNode("a", "Failed").Build()},
       "a",
       ""},
      {"preferred node affinity wins over bin packing",
       PodBuilder("p")
           .Affinity(R"({"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":)"
                     R"([{"weight":10,"preference":{"matchExpressions":[{"key":"pool",)"
                     R"("operator":"In","values":["cpu"]}]}}]}})")
           .Build(),
       {Host("a").Build(), Host("b").Label("pool", "cpu").Gpus("8").Build()},
       {},
       "b",
       ""},
  };
  ExpectChoices(cases);
}

// spec.placement's terms as the operator writes them (operator/controller/placement.h): with
// job j's task pods over the rack label, and (exclusive) away from every other job's.
constexpr char kWithJobInRack[] =
    R"({"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":)"
    R"({"matchExpressions":[{"key":"job","operator":"In","values":["j"]}]},)"
    R"("topologyKey":"rack"}]}})";
constexpr char kExclusiveInRack[] =
    R"({"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":)"
    R"({"matchExpressions":[{"key":"job","operator":"In","values":["j"]}]},)"
    R"("topologyKey":"rack"}]},)"
    R"("podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":)"
    R"({"matchExpressions":[{"key":"job","operator":"Exists"},)"
    R"({"key":"job","operator":"NotIn","values":["j"]}]},"topologyKey":"rack"},)"
    R"({"labelSelector":{"matchExpressions":[{"key":"job","operator":"Exists"}]},)"
    R"("namespaceSelector":{"matchExpressions":[{"key":"kubernetes.io/metadata.name",)"
    R"("operator":"NotIn","values":[""]}]},"topologyKey":"rack"}]}})";

TEST(ChooseNodeTest, RequiredPodAffinityAndAntiAffinity) {
  const auto in_rack = [](const std::string& name, const std::string& rack) {
    return Host(name).Label("rack", rack).Gpus("2").Build();
  };
  const std::vector<Json> racks = {in_rack("a", "r1"), in_rack("b", "r2"), in_rack("c", "r2")};
  const auto task = [](const std::string& job, const std::string& node) {
    return PodBuilder(job + "-" + node).Label("job", job).Gpus(1).OnNode(node).Build();
  };
  const Json j_pod = PodBuilder("p").Label("job", "j").Gpus(1).Affinity(kWithJobInRack).Build();
  const std::vector<ChooseCase> cases = {
      {"the first of its job goes wherever it fits (it matches its own term)",
       j_pod,
       racks,
       {},
       "a",
       ""},
      {"the rest follow it into its rack, not only its node",
       j_pod,
       racks,
       {task("j", "c"), task("j", "c")},
       "b",
       ""},
      {"no room left in the rack: Pending, the scheduler says why",
       j_pod,
       {in_rack("a", "r1"), in_rack("b", "r2")},
       {task("j", "b"), task("j", "b")},
       std::nullopt,
       "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match pod "
       "affinity rules."},
      {"a node without the topology label is in no domain",
       j_pod,
       {Host("a").Gpus("2").Build(), in_rack("b", "r1")},
       {},
       "b",
       ""},
      {"a pod that does not match its own term waits for one that does",
       PodBuilder("p").Label("job", "other").Affinity(kWithJobInRack).Build(),
       racks,
       {},
       std::nullopt,
       "3 node(s) didn't match pod affinity rules"},
      {"exclusive: another job's task pod keeps it out of that rack",
       PodBuilder("p").Label("job", "j").Gpus(1).Affinity(kExclusiveInRack).Build(),
       racks,
       {task("k", "a")},
       "b",
       ""},
      {"exclusive is symmetric: a placed exclusive job keeps other jobs out of its rack",
       PodBuilder("p").Label("job", "k").Gpus(1).Build(),
       racks,
       {PodBuilder("j-b").Label("job", "j").Gpus(1).Affinity(kExclusiveInRack).OnNode("b").Build()},
       "a",
       ""},
      {"exclusive counts jobs of other namespaces, one of the same name too",
       PodBuilder("p").Label("job", "j").Gpus(1).Affinity(kExclusiveInRack).Build(),
       racks,
       {PodBuilder("j-a").Label("job", "j").Namespace("other").Gpus(1).OnNode("a").Build()},
       "b",
       ""},
      {"a placed pod counts toward the affinity only if it matches every term",
       PodBuilder("p")
           .Label("job", "j")
           .Affinity(R"({"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[)"
                     R"({"labelSelector":{"matchLabels":{"job":"j"}},"topologyKey":"rack"},)"
                     R"({"labelSelector":{"matchLabels":{"app":"cache"}},"topologyKey":"rack"}]}})")
           .Build(),
       racks,
       {task("j", "b"), PodBuilder("cache").Label("app", "cache").OnNode("b").Build()},
       std::nullopt,
       "3 node(s) didn't match pod affinity rules"},
      {"both racks taken by other jobs: nothing fits",
       PodBuilder("p").Label("job", "j").Gpus(1).Affinity(kExclusiveInRack).Build(),
       racks,
       {task("k", "a"), task("m", "c")},
       std::nullopt,
       "3 node(s) didn't match pod anti-affinity rules"},
  };
  ExpectChoices(cases);
}

class SchedulePendingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_.EnableStatusSubresource("pods");
    for (Json node : {NodeBuilder("a").Gpus("4").Build(), NodeBuilder("b").Gpus("8").Build()}) {
      Json status = node.at("status");
      Json created = *store_.Create("nodes", "", node);
      created["status"] = status;
      ASSERT_THAT(store_.Update("nodes", "", created, true), IsOk());
    }
  }
  Json Get(const std::string& name) { return *store_.Get("pods", "ns", name); }
  static std::string Scheduled(const Json& pod, const std::string& field) {
    for (const Json& c : pod.at("status").at("conditions").as_array()) {
      if (kube::StringAt(c, "type") == "PodScheduled") return kube::StringAt(c, field);
    }
    return "";
  }

  phalanx::testing::FakeClock clock_;
  ObjectStore store_{clock_};
  StoreAccess access_{store_, clock_};
};

TEST_F(SchedulePendingTest, BindsByBinPacking_AndCountsWhatItBoundInThePass) {
  for (const char* name : {"p1", "p2", "p3"}) {
    ASSERT_THAT(store_.Create("pods", "ns", PodBuilder(name).Gpus(4).Build()), IsOk());
  }
  EXPECT_EQ(SchedulePending(access_, clock_), 3);
  // p1 fills a (4 of 4); p2 and p3 share b (8).
  EXPECT_EQ(kube::StringAt(Get("p1"), "spec.nodeName"), "a");
  EXPECT_EQ(kube::StringAt(Get("p2"), "spec.nodeName"), "b");
  EXPECT_EQ(kube::StringAt(Get("p3"), "spec.nodeName"), "b");
  EXPECT_EQ(Scheduled(Get("p1"), "status"), "True");
  EXPECT_EQ(kube::StringAt(Get("p1"), "status.phase"), "Pending");
  EXPECT_EQ(SchedulePending(access_, clock_), 0) << "nothing left to bind";
}

TEST_F(SchedulePendingTest, Unschedulable_MarkedOnce_ThenBoundWhenRoomAppears) {
  ASSERT_THAT(store_.Create("pods", "ns", PodBuilder("big").Gpus(16).Build()), IsOk());
  EXPECT_EQ(SchedulePending(access_, clock_), 0);
  Json pod = Get("big");
  EXPECT_EQ(Scheduled(pod, "status"), "False");
  EXPECT_EQ(Scheduled(pod, "reason"), "Unschedulable");
  EXPECT_EQ(Scheduled(pod, "message"), "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.");
  const uint64_t version = store_.resource_version();
  clock_.Advance(absl::Seconds(5));
  EXPECT_EQ(SchedulePending(access_, clock_), 0);
  EXPECT_EQ(store_.resource_version(), version) << "an unchanged verdict is not rewritten";

  pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = Json::string("8");
  ASSERT_THAT(store_.Update("pods", "ns", pod, false), IsOk());
  EXPECT_EQ(SchedulePending(access_, clock_), 1);
  EXPECT_EQ(kube::StringAt(Get("big"), "spec.nodeName"), "b");
  EXPECT_EQ(Scheduled(Get("big"), "status"), "True");
}

// A pod bound earlier in the same pass counts for the anti-affinity of the pods after it.
TEST_F(SchedulePendingTest, AntiAffinitySeesPodsBoundInTheSamePass) {
  ASSERT_THAT(store_.Create("pods", "ns",
                            PodBuilder("task").Label("job", "j").Label("role", "task").Build()),
              IsOk());
  clock_.Advance(absl::Seconds(1));  // created after the task (creation order)
  ASSERT_THAT(
      store_.Create("pods", "ns", PodBuilder("coordinator").Affinity(kAwayFromTasks).Build()),
      IsOk());
  for (const char* node : {"a", "b"}) {
    Json n = *store_.Get("nodes", "", node);
    n["metadata"]["labels"]["kubernetes.io/hostname"] = Json::string(node);
    ASSERT_THAT(store_.Update("nodes", "", n, false), IsOk());
  }
  EXPECT_EQ(SchedulePending(access_, clock_), 2);
  EXPECT_EQ(kube::StringAt(Get("task"), "spec.nodeName"), "a");  // bin packing: the fuller node
  EXPECT_EQ(kube::StringAt(Get("coordinator"), "spec.nodeName"), "b");
}

TEST_F(SchedulePendingTest, SkipsPodsBeingDeleted) {
  Json pod = PodBuilder("going").Build();
  pod["metadata"]["finalizers"] = Json::array();
  pod["metadata"]["finalizers"][0] = Json::string("x");
  ASSERT_THAT(store_.Create("pods", "ns", pod), IsOk());
  ASSERT_THAT(store_.Delete("pods", "ns", "going"), IsOk());
  EXPECT_EQ(SchedulePending(access_, clock_), 0);
  EXPECT_EQ(kube::StringAt(Get("going"), "spec.nodeName"), "");
}

}  // namespace
}  // namespace phalanx::localcluster
