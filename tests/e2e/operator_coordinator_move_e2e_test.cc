// The operator end to end on the local cluster when the node that hosts the coordinator is
// preempted (issue 13): the operator moves the coordinator off it before the node's pods are
// evicted, the tasks reconnect to its successor and keep training, and the job succeeds with no
// restart spent: not a task's (status.restarts), not the coordinator's (status.coordinator.
// restarts; the move is status.coordinator.moves). Once with the tasks on other nodes, once with
// a task on the same node (that task checkpoints and moves as well).
#include "tests/e2e/operator_e2e_fixture.h"

namespace phalanx::e2e {
namespace {

// Three nodes with 2 GPUs each; every task asks for 2, so each task has a node of its own.
class CoordinatorMoveE2eTest : public OperatorE2eTest {
 protected:
  CoordinatorMoveE2eTest() {
    nodes_ = 3;
    gpus_per_node_ = 2;
  }

  // A 2-task job, Running, both tasks past their first periodic checkpoint; `coordinator` is
  // its spec.coordinator ("" for none).
  void StartJob(const std::string& coordinator) {
    ASSERT_OK_JOB(CreateJob(JobOptions{.steps = 300,
                                       .preemption = R"({"checkpointGraceSeconds":20})",
                                       .gpus = 2,
                                       .coordinator = coordinator}));
    ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                           absl::Seconds(90)))
        << Job().serialize();
    ASSERT_TRUE(
        Eventually([&] { return WorkerEvents("checkpoint").size() == 2; }, absl::Seconds(60)));
  }

  kube::Json Pod(const std::string& name) {
    absl::StatusOr<kube::Json> pod = client_->Get(op::kPods, "default", name);
    return pod.ok() ? *pod : kube::Json::null();
  }

  // The message of each Event of the job with `reason`.
  std::vector<std::string> JobEvents(const std::string& reason) {
    std::vector<std::string> out;
    absl::StatusOr<kube::ObjectList> events = client_->List(
        {"", "v1", "events", true}, "default", {.field_selector = "involvedObject.name=train"});
    if (!events.ok()) return out;
    for (const kube::Json& e : events->items) {
      if (kube::StringAt(e, "reason") == reason) out.push_back(kube::StringAt(e, "message"));
    }
    return out;
  }

  // Preempts `node` (taint now, evict its pods after 15 s) and checks that a successor
  // coordinator runs on another node before that eviction, then that the job succeeds with no
  // restart spent. Returns the final job.
  kube::Json PreemptTheCoordinatorsNodeAndSucceed(const std::string& node) {
    const kube::Json before = Pod("train-coordinator");
    const absl::Time preempted = absl::Now();
    EXPECT_TRUE(
        client_->Raw("POST", absl::StrCat("/admin/nodes/", node, "/preempt?graceSeconds=15")).ok());
    const bool moved = Eventually(
        [&] {
          const kube::Json now = Pod("train-coordinator");
          return !now.is_null() &&
                 kube::MetaString(now, "uid") != kube::MetaString(before, "uid") &&
                 kube::StringAt(now, "status.phase") == "Running";
        },
        absl::Seconds(60));
    const absl::Duration took = absl::Now() - preempted;
    EXPECT_TRUE(moved) << Job().serialize();
    RecordProperty("coordinator_moved_after_ms", absl::StrCat(absl::ToInt64Milliseconds(took)));
    // Before the node's pods are evicted (15 s after the notice).
    EXPECT_LT(took, absl::Seconds(15));
    const kube::Json successor = Pod("train-coordinator");
    EXPECT_NE(kube::StringAt(successor, "spec.nodeName"), node);
    EXPECT_THAT(successor.serialize(), ::testing::HasSubstr(absl::StrCat(
                                           R"("operator":"NotIn","values":[")", node, "\"]")));
    const bool succeeded = Eventually(
        [&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; }, absl::Seconds(240));
    const kube::Json done = Job();
    EXPECT_TRUE(succeeded) << done.serialize();
    const kube::Json& status = done.at("status");
    EXPECT_EQ(status.at("restarts").as_integer(), 0) << done.serialize();
    const kube::Json& coordinator = kube::FieldOrNull(status, "coordinator");
    EXPECT_EQ(kube::FieldOrNull(coordinator, "restarts").as_integer(), 0) << done.serialize();
    EXPECT_EQ(kube::FieldOrNull(coordinator, "moves").as_integer(), 1) << done.serialize();
    EXPECT_THAT(JobEvents("CoordinatorMoving"),
                ::testing::ElementsAre(
                    ::testing::HasSubstr(absl::StrCat("node ", node, " has a preemption notice"))));
    EXPECT_THAT(JobEvents("CoordinatorMoved"),
                ::testing::ElementsAre(::testing::HasSubstr(absl::StrCat(
                    "from node ", node, " to node ", kube::StringAt(successor, "spec.nodeName")))));
    EXPECT_THAT(JobEvents("CoordinatorRestarted"), ::testing::IsEmpty());
    for (const auto& [pod, lines] : WorkerEvents("recovered")) {
      for (const std::string& line : lines) RecordProperty("recovered_" + pod, line);
    }
    return done;
  }
};

TEST_F(CoordinatorMoveE2eTest, ACoordinatorAloneOnAPreemptedNodeMovesAndNoTaskRestarts) {
  // The coordinator prefers node-2; the tasks (2 GPUs each) fill node-0 and node-1.
  StartJob(R"({"affinity":{"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[)"
           R"({"weight":50,"preference":{"matchExpressions":[{"key":"kubernetes.io/hostname",)"
           R"("operator":"In","values":["node-2"]}]}}]}}})");
  if (HasFatalFailure()) return;
  ASSERT_EQ(kube::StringAt(Pod("train-coordinator"), "spec.nodeName"), "node-2");
  for (int i = 0; i < 2; ++i) {
    ASSERT_NE(kube::StringAt(Pod(absl::StrCat("train-task-", i, "-0")), "spec.nodeName"), "node-2");
  }
  const kube::Json done = PreemptTheCoordinatorsNodeAndSucceed("node-2");
  // No task was preempted or replaced: the first incarnations ran to the end.
  EXPECT_EQ(done.at("status").at("preemptions").as_integer(), 0) << done.serialize();
  for (const auto& [pod, lines] : WorkerEvents("start")) {
    EXPECT_TRUE(absl::EndsWith(pod, "-0")) << pod << " is a replacement";
  }
  EXPECT_EQ(WorkerEvents("done").size(), 2u);
}

TEST_F(CoordinatorMoveE2eTest, ACoordinatorSharingAPreemptedNodeWithATaskMovesWithIt) {
  StartJob("");
  if (HasFatalFailure()) return;
  // Scheduled first (the tasks wait for its address), the coordinator takes node-0 and task 0,
  // bin-packed, joins it there.
  const std::string node = kube::StringAt(Pod("train-coordinator"), "spec.nodeName");
  ASSERT_EQ(kube::StringAt(Pod("train-task-0-0"), "spec.nodeName"), node);
  const kube::Json done = PreemptTheCoordinatorsNodeAndSucceed(node);
  // Task 0 was preempted and moved; that is a preemption, not a restart.
  EXPECT_GE(done.at("status").at("preemptions").as_integer(), 1) << done.serialize();
  // Its checkpoint round survived the coordinator's move (or was re-opened on the successor,
  // whose pod UID differs): task 0 left at an agreed sync step it checkpointed at, and its
  // replacement resumed from a checkpoint at or after it.
  EXPECT_THAT(JobEvents("CheckpointRoundOpened"),
              ::testing::Contains(::testing::HasSubstr("task(s) 0")));
  const auto left = WorkerEvents("left_for_preemption");
  ASSERT_TRUE(left.contains("default_train-task-0-0")) << "task 0 never left at a sync step";
  const std::string left_at = EventField(left.at("default_train-task-0-0").front(), "step");
  const auto sync = WorkerEvents("sync_checkpoint");
  ASSERT_TRUE(sync.contains("default_train-task-0-0"));
  std::set<std::string> synced;
  for (const std::string& line : sync.at("default_train-task-0-0")) {
    synced.insert(EventField(line, "step"));
  }
  EXPECT_TRUE(synced.contains(left_at)) << left_at;
  for (const auto& [pod, lines] : WorkerEvents("start")) {
    if (!absl::StartsWith(pod, "default_train-task-0-") || absl::EndsWith(pod, "-0")) continue;
    for (const std::string& line : lines) {
      EXPECT_GE(std::stoi(EventField(line, "resume_step")), std::stoi(left_at)) << line;
    }
  }
}

}  // namespace
}  // namespace phalanx::e2e
