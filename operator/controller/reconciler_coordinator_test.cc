// The reconciler over the in-memory API fake, for the coordinator pod (issue 13): a failed
// coordinator's CoordinatorRestarted Event reaches the API server; a coordinator on a node under
// a preemption notice is moved (deleted, recreated off that node) without counting a restart.
#include "operator/controller/reconciler_testing.h"

namespace phalanx::op {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

class ReconcilerCoordinatorTest : public ReconcilerTest {
 protected:
  // The job's pods created and running; the coordinator bound to `node`.
  void Running(const std::string& node) {
    CatchUp();
    Pass();
    absl::StatusOr<Json> coordinator = store_.Get(kPods.Qualified(), "ns", "j-coordinator");
    ASSERT_THAT(coordinator.status(), IsOk());
    (*coordinator)["spec"]["nodeName"] = Json::string(node);
    ASSERT_THAT(store_.Update(kPods.Qualified(), "ns", *coordinator, false).status(), IsOk());
    for (const char* pod : {"j-coordinator", "j-task-0-0", "j-task-1-0"}) SetPod(pod, "Running");
    CatchUp();
    clock_.Advance(absl::Seconds(5));
    Pass();
    ASSERT_EQ(DecodeStatus(Stored()).phase, kPhaseRunning);
  }

  void AddNode(const std::string& name, bool preempting) {
    Json node = Json::parse(absl::StrCat(R"({"apiVersion":"v1","kind":"Node","metadata":{"name":")",
                                         name, R"("},"spec":{}})"));
    if (preempting) {
      node["spec"]["taints"] = Json::parse(
          R"([{"key":"cloud.google.com/impending-node-termination","effect":"NoSchedule"}])");
    }
    ASSERT_THAT(store_.Create(kNodes.Qualified(), "", node).status(), IsOk());
    ASSERT_TRUE(Eventually([&] { return nodes_.Get("", name).has_value(); }, kWait));
  }

  std::string EventMessage(const std::string& reason) {
    auto events = store_.List("events", "ns", {}, 0, "");
    if (!events.ok()) return "";
    for (const Json& e : events->items) {
      if (kube::StringAt(e, "reason") == reason) return kube::StringAt(e, "message");
    }
    return "";
  }
};

TEST_F(ReconcilerCoordinatorTest, AFailedCoordinatorsRestartedEventReachesTheApiServer) {
  AddNode("node-1", false);
  Running("node-1");
  SetPod("j-coordinator", "Failed", 1);
  CatchUp();
  clock_.Advance(absl::Seconds(1));
  Pass();
  EXPECT_THAT(EventReasons(), Contains("CoordinatorRestarted"));
  EXPECT_THAT(EventMessage("CoordinatorRestarted"), HasSubstr("exited with code 1 (Error)"));
  const TrainingJobStatus status = DecodeStatus(Stored());
  EXPECT_EQ(status.coordinator.restarts, 1);
  EXPECT_EQ(status.coordinator.moves, 0);
}

TEST_F(ReconcilerCoordinatorTest, ACoordinatorOnANoticedNodeIsMovedOffItWithoutARestart) {
  AddNode("node-1", false);
  AddNode("node-2", true);  // also under a notice: the successor avoids it too
  Running("node-1");
  Json node = *store_.Get(kNodes.Qualified(), "", "node-1");
  node["spec"]["taints"] = Json::parse(
      R"([{"key":"cloud.google.com/impending-node-termination","effect":"NoSchedule"}])");
  ASSERT_THAT(store_.Update(kNodes.Qualified(), "", node, false).status(), IsOk());
  CatchUp();
  ASSERT_TRUE(Eventually(
      [&] { return NodeIsBeingPreempted(nodes_.Get("", "node-1").value_or(Json::object())); },
      kWait));
  const std::string old_uid =
      kube::MetaString(*store_.Get(kPods.Qualified(), "ns", "j-coordinator"), "uid");
  Pass();  // deletes the coordinator pod
  EXPECT_THAT(EventReasons(), Contains("CoordinatorMoving"));
  EXPECT_THAT(EventMessage("CoordinatorMoving"), HasSubstr("node node-1 has a preemption notice"));
  // While it terminates (graceful deletion) nothing is created and nothing more is counted.
  ASSERT_TRUE(kube::IsBeingDeleted(*store_.Get(kPods.Qualified(), "ns", "j-coordinator")));
  Pass();
  EXPECT_EQ(DecodeStatus(Stored()).coordinator.moves, 1);
  // Its kubelet stopped it (SIGTERM) and removes it; the next pass creates its successor.
  ASSERT_THAT(store_
                  .Delete(kPods.Qualified(), "ns", "j-coordinator", "",
                          kube::fake::ObjectStore::Propagation::kBackground, 0)
                  .status(),
              IsOk());
  CatchUp();
  Pass();
  absl::StatusOr<Json> successor = store_.Get(kPods.Qualified(), "ns", "j-coordinator");
  ASSERT_THAT(successor.status(), IsOk());
  EXPECT_NE(kube::MetaString(*successor, "uid"), old_uid);
  EXPECT_THAT(successor->at("spec").at("affinity").serialize(),
              HasSubstr(R"("operator":"NotIn","values":["node-1","node-2"])"));
  TrainingJobStatus status = DecodeStatus(Stored());
  EXPECT_EQ(status.coordinator.moves, 1);
  EXPECT_EQ(status.coordinator.restarts, 0);
  EXPECT_FALSE(status.coordinator.restart_after.has_value());
  EXPECT_EQ(status.restarts, 0);
  EXPECT_THAT(EventReasons(), Not(Contains("CoordinatorRestarted")));

  // Placed on node-3: the move is reported with both nodes.
  (*successor)["spec"]["nodeName"] = Json::string("node-3");
  ASSERT_THAT(store_.Update(kPods.Qualified(), "ns", *successor, false).status(), IsOk());
  SetPod("j-coordinator", "Running");
  CatchUp();
  Pass();
  EXPECT_THAT(EventMessage("CoordinatorMoved"), HasSubstr("from node node-1 to node node-3"));
  EXPECT_EQ(DecodeStatus(Stored()).coordinator.moving_from, "");
}

}  // namespace
}  // namespace phalanx::op
