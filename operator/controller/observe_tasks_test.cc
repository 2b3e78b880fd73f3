// Table test of the observe stage (observe_tasks.h): one record per task, its incarnation the
// highest seen, its current pod and older ones, pods of indexes the job no longer has deleted.
#include "operator/controller/observe_tasks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/kube/object_meta.h"
#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAreArray;

TEST(ObserveTasks, Table) {
  struct Case {
    std::string name;
    std::vector<Incarnation> previous;  // status.tasks[i].incarnation
    std::vector<PodView> pods;
    std::vector<Incarnation> want_incarnations;
    std::vector<std::string> want_current;  // "" for none
    std::vector<std::string> want_stale;    // all tasks'
    std::vector<std::string> want_deleted;
  };
  const Case cases[] = {
      {"aNewJobHasARecordPerTaskAndNoPods", {}, {}, {0, 0}, {"", ""}, {}, {}},
      {"podsAtTheStatusIncarnationAreCurrent",
       {1, 0},
       {PodBuilder("j", 0, 1).Build(), PodBuilder("j", 1, 0).Build()},
       {1, 0},
       {"j-task-0-1", "j-task-1-0"},
       {},
       {}},
      {"aNewerPodRaisesTheIncarnationAndTheOlderOneIsStale",
       {0, 0},
       {PodBuilder("j", 0, 0).Build(), PodBuilder("j", 0, 2).Build()},
       {2, 0},
       {"j-task-0-2", ""},
       {"j-task-0-0"},
       {}},
      {"aStatusAheadOfEveryPodLeavesThemStale",
       {3, 0},
       {PodBuilder("j", 0, 2).Build()},
       {3, 0},
       {"", ""},
       {"j-task-0-2"},
       {}},
      {"podsOfIndexesBeyondReplicasAreDeleted",
       {},
       {PodBuilder("j", 2, 0).Build(), PodBuilder("j", 3, 0).Deleting().Build()},
       {0, 0},
       {"", ""},
       {},
       {"j-task-2-0"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2).Generation(7));
    for (size_t i = 0; i < c.previous.size(); ++i) {
      t.previous.tasks.emplace_back();
      t.previous.tasks.back().incarnation = c.previous[i];
    }
    t.world.task_pods = c.pods;
    JobPass pass = ObserveTasks(t.Inputs());
    EXPECT_EQ(pass.out.status.observed_generation, 7);
    EXPECT_TRUE(pass.out.status.tasks.empty());  // they live in the records during the pass
    ASSERT_EQ(pass.tasks.size(), 2u);
    std::vector<Incarnation> incarnations;
    std::vector<std::string> current, stale;
    for (size_t i = 0; i < pass.tasks.size(); ++i) {
      const TaskRecord& r = pass.tasks[i];
      EXPECT_EQ(r.status.index, static_cast<int>(i));
      incarnations.push_back(r.status.incarnation);
      current.push_back(r.pod.has_value() ? r.pod->name : "");
      for (const PodView& p : r.stale) stale.push_back(p.name);
    }
    EXPECT_THAT(incarnations, ElementsAreArray(c.want_incarnations));
    EXPECT_THAT(current, ElementsAreArray(c.want_current));
    EXPECT_THAT(stale, ElementsAreArray(c.want_stale));
    EXPECT_THAT(pass.out.delete_pods, ElementsAreArray(c.want_deleted));
  }
}

TEST(ObserveTasks, ShrunkReplicasDropTheExtraTaskStatuses) {
  TestPass t(TrainingJobBuilder("j").Tasks(1));
  t.previous.tasks.resize(3);
  t.previous.tasks[0].restarts = 2;
  JobPass pass = ObserveTasks(t.Inputs());
  ASSERT_EQ(pass.tasks.size(), 1u);
  EXPECT_EQ(pass.tasks[0].status.restarts, 2);
}

TEST(ViewOfPod, ReadsTheLabelsPhaseAndTermination) {
  const Json pod = Json::parse(R"({"metadata":{"name":"j-task-1-4","uid":"p1",
      "labels":{"phalanx.dev/task":"1","phalanx.dev/incarnation":"4"}},
      "spec":{"nodeName":"n2"},
      "status":{"phase":"Failed","podIP":"10.1.1.1",
        "conditions":[{"type":"DisruptionTarget","status":"True","reason":"PreemptionByScheduler",
                       "message":"Preempted by pod 4d2c on node n2"},
                      {"type":"Ready","status":"False"}],
        "containerStatuses":[{"state":{"terminated":{"exitCode":137,"reason":"OOMKilled"}}}]}})");
  const PodView v = ViewOfPod(pod);
  EXPECT_EQ(v.index, 1);
  EXPECT_EQ(v.incarnation, 4);
  EXPECT_EQ(v.phase, PodPhase::kFailed);
  EXPECT_TRUE(v.ended());
  EXPECT_EQ(v.node, "n2");
  EXPECT_TRUE(v.disruption_target);
  EXPECT_EQ(v.disruption, "PreemptionByScheduler: Preempted by pod 4d2c on node n2");
  EXPECT_FALSE(v.ready);
  EXPECT_EQ(v.exit_code, 137);
  EXPECT_EQ(v.reason, "OOMKilled");
  const PodView bare = ViewOfPod(Json::parse(R"({"metadata":{"name":"x",
      "labels":{"phalanx.dev/incarnation":"garbage"}},"status":{"phase":"Weird","reason":"Evicted"}})"));
  EXPECT_EQ(bare.index, -1);
  EXPECT_EQ(bare.incarnation, base::kNoIncarnation);
  EXPECT_EQ(bare.phase, PodPhase::kUnknown);
  EXPECT_EQ(bare.reason, "Evicted");
}

// The pod cache keeps what the operator reads of a pod and drops the rest (main.cc's pod
// informer): every field of the view is the same from the trimmed pod, which is much smaller.
TEST(TrimCachedPod, KeepsWhatTheViewReads_DropsTheSpecsRest) {
  Json pod = Json::parse(R"({"metadata":{"name":"j-coordinator","uid":"p9",
      "creationTimestamp":"2026-12-02T10:00:00Z","deletionTimestamp":"2026-12-02T10:05:00Z",
      "labels":{"phalanx.dev/task":"2","phalanx.dev/incarnation":"3","phalanx.dev/spare":"1"},
      "ownerReferences":[{"uid":"job-uid","controller":true}],
      "managedFields":[{"manager":"phalanx-operator","operation":"Update"}]},
    "spec":{"nodeName":"n1","restartPolicy":"Never","volumes":[{"name":"token"}],
      "affinity":{"podAntiAffinity":{}},
      "containers":[{"name":"coordinator","image":"phalanx:dev","command":["phalanx-coordinator"],
        "env":[{"name":"PHALANX_JOB","value":"j"},{"name":"PHALANX_NUM_TASKS","value":"8"}],
        "ports":[{"name":"metrics","containerPort":8471},{"name":"grpc","containerPort":8470}]}]},
    "status":{"phase":"Running","podIP":"10.0.0.9",
      "conditions":[{"type":"Ready","status":"True"},
                    {"type":"PodScheduled","status":"False","reason":"Unschedulable",
                     "message":"0/3 nodes are available"}],
      "containerStatuses":[{"state":{"waiting":{"reason":"CrashLoopBackOff","message":"back-off"}}}]}})");
  const std::string before = pod.serialize();
  const PodView full = ViewOfPod(pod);
  TrimCachedPod(pod);
  const PodView trimmed = ViewOfPod(pod);
  EXPECT_EQ(trimmed.name, full.name);
  EXPECT_EQ(trimmed.uid, full.uid);
  EXPECT_EQ(trimmed.index, 2);
  EXPECT_EQ(trimmed.incarnation, full.incarnation);
  EXPECT_EQ(trimmed.phase, PodPhase::kRunning);
  EXPECT_EQ(trimmed.node, "n1");
  EXPECT_EQ(trimmed.ip, full.ip);
  EXPECT_EQ(trimmed.grpc_port, 8470);
  EXPECT_FALSE(trimmed.serves_tls);  // a task pod's arguments are dropped, never read
  EXPECT_TRUE(trimmed.being_deleted);
  EXPECT_EQ(trimmed.ready, full.ready);
  EXPECT_TRUE(trimmed.from_spare);
  EXPECT_EQ(trimmed.waiting_reason, "CrashLoopBackOff");
  EXPECT_EQ(trimmed.created, full.created);
  EXPECT_TRUE(trimmed.unschedulable);
  EXPECT_EQ(trimmed.unschedulable_message, full.unschedulable_message);
  EXPECT_EQ(kube::ControllerOf(pod)->uid, "job-uid");
  const std::string after = pod.serialize();
  EXPECT_EQ(after.find("managedFields"), std::string::npos);
  EXPECT_EQ(after.find("PHALANX_JOB"), std::string::npos);
  EXPECT_EQ(after.find("volumes"), std::string::npos);
  EXPECT_LT(after.size(), before.size());
  // A pod with no spec, or garbage for one, is left as it is.
  Json bare = Json::parse(R"({"metadata":{"name":"x"},"spec":"garbage"})");
  TrimCachedPod(bare);
  EXPECT_EQ(bare.at("spec").as_string(), "garbage");
}

// A coordinator pod keeps its arguments: whether it serves TLS decides how the link speaks to it.
TEST(TrimCachedPod, ACoordinatorKeepsWhetherItServesTls) {
  for (const bool tls : {false, true}) {
    SCOPED_TRACE(tls);
    Json pod = Json::parse(absl::StrCat(
        R"({"metadata":{"name":"j-coordinator","labels":{"phalanx.dev/role":"coordinator"}},
            "spec":{"containers":[{"name":"coordinator","args":["--listen=0.0.0.0:8470")",
        tls ? R"(,"--tls_cert_file=/var/run/phalanx/tls/tls.crt")" : "", R"(]}]}})"));
    EXPECT_EQ(ViewOfPod(pod).serves_tls, tls);
    TrimCachedPod(pod);
    EXPECT_EQ(ViewOfPod(pod).serves_tls, tls);
  }
  // A task pod whose user passes the same flag is no TLS coordinator.
  Json task = Json::parse(R"({"metadata":{"name":"j-task-0-0","labels":{"phalanx.dev/role":"task"}},
      "spec":{"containers":[{"name":"w","args":["--tls_cert_file=x"]}]}})");
  EXPECT_FALSE(ViewOfPod(task).serves_tls);
}

TEST(NodePreemptionDeadline, ReadsTheAgentsAnnotation) {
  const struct {
    std::string name;
    std::string node;
    absl::Time want;
  } cases[] = {
      {"annotated",
       R"({"metadata":{"annotations":{"phalanx.dev/preemption-deadline":"2027-01-15T08:00:30Z"}}})",
       absl::FromUnixSeconds(1800000030)},
      {"noAnnotation", R"({"metadata":{"name":"n"}})", absl::InfiniteFuture()},
      {"garbage", R"({"metadata":{"annotations":{"phalanx.dev/preemption-deadline":"soon"}}})",
       absl::InfiniteFuture()},
      {"notAString", R"({"metadata":{"annotations":{"phalanx.dev/preemption-deadline":5}}})",
       absl::InfiniteFuture()},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(NodePreemptionDeadline(Json::parse(c.node)), c.want);
  }
}

}  // namespace
}  // namespace phalanx::op
