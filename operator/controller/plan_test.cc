// Table-style tests of the pure reconcile planner: children created, restart scope, maxRestarts,
// back-off, fatal exit codes, coordinator-reported failures, preemption, success policy,
// suspend, goodput.
#include "operator/controller/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/auth/credentials.h"
#include "common/kube/object_meta.h"
#include "operator/api/codec.h"
#include "operator/controller/blocked.h"
#include "operator/controller/desired_state.h"
#include "operator/controller/task_state.h"

namespace phalanx::op {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

Json Job() {
  return Json::parse(
      R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob",
          "metadata":{"name":"j","namespace":"ns","uid":"u1","generation":3},
          "spec":{"replicas":2}})");
}

TrainingJobSpec Spec(int replicas = 2) {
  TrainingJobSpec spec;
  spec.replicas = replicas;
  spec.pod_template = Json::parse(
      R"({"metadata":{"labels":{"team":"a"}},"spec":{"containers":[{"name":"main","image":"x",
          "command":["train"],"env":[{"name":"PHALANX_TASK_ID","value":"wrong"},{"name":"KEEP","value":"1"},{"name":"MASTER_PORT","value":"1234"}]}]}})");
  return spec;
}

PodView TaskPod(int index, Incarnation incarnation, PodPhase phase, bool ready = true) {
  PodView p;
  p.index = index;
  p.incarnation = incarnation;
  p.name = TaskPodName("j", index, incarnation);
  p.phase = phase;
  p.ready = ready;
  p.node = "node-0";
  return p;
}

JobObservation Healthy(int replicas = 2) {
  JobObservation w;
  w.has_secret = w.has_coordinator_service = w.has_tasks_service = true;
  PodView coordinator;
  coordinator.name = "j-coordinator";
  coordinator.phase = PodPhase::kRunning;
  coordinator.ip = "10.0.0.9";
  coordinator.ready = true;  // a coordinator that is down costs goodput (accounting.h)
  w.coordinator = coordinator;
  for (int i = 0; i < replicas; ++i) w.task_pods.push_back(TaskPod(i, 0, PodPhase::kRunning));
  return w;
}

ReconcilePlan Plan(const TrainingJobSpec& spec, const TrainingJobStatus& previous,
                   const JobObservation& world, absl::Time now = kNow) {
  static const Json job = Job();
  static const CoordinatorPlacement placement;
  return PlanReconcile({job, spec, previous, world, placement, "tok", now});
}

std::vector<std::string> Names(const std::vector<Json>& objects) {
  std::vector<std::string> names;
  for (const Json& o : objects) names.push_back(kube::MetaString(o, "name"));
  return names;
}

TEST(PlanTest, ANewJobGetsItsSecretServicesCoordinatorAndTaskPods) {
  JobObservation world;
  PodView coordinator;
  ReconcilePlan plan = Plan(Spec(), {}, world);
  EXPECT_THAT(Names(plan.create),
              ::testing::ElementsAre("j-token", "j-tasks", "j-coordinator", "j-coordinator",
                                     "j-task-0-0", "j-task-1-0"));
  EXPECT_EQ(plan.status.phase, kPhasePending);
  EXPECT_EQ(plan.status.observed_generation, 3);
  const Json& pod = plan.create.back();
  EXPECT_EQ(kube::LabelsOf(pod).at(kTaskLabel), "1");
  EXPECT_EQ(kube::LabelsOf(pod).at("team"), "a");
  EXPECT_EQ(kube::StringAt(pod, "spec.restartPolicy"), "Never");
  EXPECT_EQ(kube::ControllerOf(pod)->uid, "u1");
  std::map<std::string, std::string> env;
  for (const Json& e : pod.at("spec").at("containers").at(0).at("env").as_array()) {
    env[e.at("name").as_string()] = kube::StringAt(e, "value");
  }
  EXPECT_EQ(env["PHALANX_TASK_ID"], "1");  // reserved: ours wins over the template's
  EXPECT_EQ(env["KEEP"], "1");
  EXPECT_EQ(env["MASTER_PORT"], "1234");  // a default of ours: the template's wins
  EXPECT_EQ(env["PHALANX_COORDINATOR"], "j-coordinator.ns.svc:8470");
  EXPECT_EQ(env["WORLD_SIZE"], "2");
  EXPECT_EQ(env["RANK"], "1");
  EXPECT_EQ(env["PHALANX_INCARNATION"], "0");
  EXPECT_EQ(env["MASTER_ADDR"], "j-task-0.j-tasks.ns.svc");
}

TEST(PlanTest, ByPodIpTasksWaitForTheCoordinatorsAddress) {
  JobObservation world = Healthy();
  world.task_pods.clear();
  world.coordinator->phase = PodPhase::kPending;
  world.coordinator->ip.clear();
  CoordinatorPlacement placement;
  placement.address_by_pod_ip = true;
  const Json job = Job();
  const TrainingJobSpec spec = Spec();
  ReconcilePlan plan = PlanReconcile({job, spec, {}, world, placement, "tok", kNow});
  EXPECT_TRUE(plan.create.empty());
  EXPECT_GT(plan.requeue_after, absl::ZeroDuration());
  world.coordinator->phase = PodPhase::kRunning;
  world.coordinator->ip = "127.0.0.1";
  plan = PlanReconcile({job, spec, {}, world, placement, "tok", kNow});
  ASSERT_EQ(plan.create.size(), 2u);
  EXPECT_THAT(plan.create[0].serialize(), ::testing::HasSubstr("127.0.0.1:8470"));
}

TEST(PlanTest, AllRunningIsRunningAndIdempotent) {
  ReconcilePlan plan = Plan(Spec(), {}, Healthy());
  EXPECT_TRUE(plan.create.empty());
  EXPECT_TRUE(plan.delete_pods.empty());
  EXPECT_EQ(plan.status.phase, kPhaseRunning);
  EXPECT_EQ(plan.status.ready_tasks, 2);
  ReconcilePlan again = Plan(Spec(), plan.status, Healthy());
  EXPECT_TRUE(again.create.empty());
  EXPECT_TRUE(again.events.empty());
}

// Issue 30: a registration the operator did not make (a zombie, a forged jump of up to the
// coordinator's 1,000,000 a step) would make incarnation 1 stale at Register, and every later
// replacement too. The next incarnation is above the newest the coordinator registered, so the
// replacement supersedes it; what the coordinator registered for other tasks changes nothing.
TEST(PlanTest, TheNextIncarnationIsAboveTheNewestTheCoordinatorRegistered) {
  JobObservation world = Healthy();
  world.task_pods[1].phase = PodPhase::kFailed;
  world.task_pods[1].exit_code = 3;  // its session was superseded: Aborted
  world.task_pods[1].reason = "Error";
  world.coordinator_incarnations = {{0, 0}, {1, 1'000'000}};
  ReconcilePlan plan = Plan(Spec(), {}, world);
  EXPECT_THAT(Names(plan.create), ::testing::ElementsAre("j-task-1-1000001"));
  EXPECT_EQ(plan.status.tasks[1].incarnation, 1'000'001);
  EXPECT_EQ(plan.status.tasks[0].incarnation, 0);
  ASSERT_FALSE(plan.events.empty());
  EXPECT_THAT(plan.events[0].message, ::testing::HasSubstr("as incarnation 1000001"));
}

TEST(PlanTest, TaskScopeRestartsOnlyTheFailedTaskWithTheNextIncarnation) {
  JobObservation world = Healthy();
  world.task_pods[1].phase = PodPhase::kFailed;
  world.task_pods[1].exit_code = 1;
  world.task_pods[1].reason = "Error";
  ReconcilePlan plan = Plan(Spec(), {}, world);
  EXPECT_TRUE(plan.delete_pods.empty());  // the failed pod is kept for its logs (keepFailedPods)
  EXPECT_THAT(Names(plan.create), ::testing::ElementsAre("j-task-1-1"));
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(plan.status.tasks[1].incarnation, 1);
  EXPECT_EQ(plan.status.tasks[1].last_exit_code, 1);
  EXPECT_EQ(plan.status.tasks[0].incarnation, 0);
  EXPECT_EQ(plan.status.phase, kPhaseRestarting);
  ASSERT_FALSE(plan.events.empty());
  EXPECT_EQ(plan.events[0].reason, "TaskRestarted");
  ASSERT_EQ(plan.replacements.size(), 1u);
  EXPECT_FALSE(plan.replacements[0].preemption);
  EXPECT_EQ(plan.replacements[0].reason, "Error");
}

TEST(PlanTest, JobScopeRestartsEveryTask) {
  TrainingJobSpec spec = Spec();
  spec.failure_policy.restart_scope = RestartScope::kJob;
  JobObservation world = Healthy();
  world.task_pods[0].phase = PodPhase::kFailed;
  ReconcilePlan plan = Plan(spec, {}, world);
  // The failed pod is kept (keepFailedPods); the running one is deleted.
  EXPECT_THAT(plan.delete_pods, ::testing::UnorderedElementsAre("j-task-1-0"));
  EXPECT_THAT(Names(plan.create), ::testing::ElementsAre("j-task-0-1", "j-task-1-1"));
  EXPECT_EQ(plan.status.restarts, 1);
}

TEST(PlanTest, CoordinatorReportedFailureRestartsAPodThatLooksRunning) {
  JobObservation world = Healthy();
  world.coordinator_failed[0] = {0, "heartbeat timeout"};
  // Once the wait for the pod's own exit status (task_state.h) has passed.
  TrainingJobStatus previous;
  previous.tasks.resize(2);
  previous.tasks[0].failure_reported_at = kNow - kExitStatusWait;
  ReconcilePlan plan = Plan(Spec(), previous, world);
  EXPECT_THAT(plan.delete_pods, ::testing::ElementsAre("j-task-0-0"));
  EXPECT_THAT(Names(plan.create), ::testing::ElementsAre("j-task-0-1"));
  EXPECT_EQ(plan.status.tasks[0].last_failure_reason, "CoordinatorDeclaredFailed");
  ASSERT_FALSE(plan.events.empty());
  EXPECT_THAT(plan.events[0].message, ::testing::HasSubstr("heartbeat timeout"));
  // A report about an older incarnation is ignored.
  world.coordinator_failed[0] = {-5, "old"};
  EXPECT_TRUE(Plan(Spec(), {}, world).delete_pods.empty());
}

// nprocPerNode 2: the operator manages 2 pods, the coordinator sees 4 tasks (issue 18).
TEST(PlanTest, SeveralRanksPerPod_GetTheirTasksCredentialsAndTheFirstTasksEnv) {
  TrainingJobSpec spec = Spec();
  spec.nproc_per_node = 2;
  ReconcilePlan plan = Plan(spec, {}, JobObservation{});
  std::map<std::string, Json> created;
  for (const Json& o : plan.create) created[kube::MetaString(o, "name")] = o;
  ASSERT_TRUE(created.contains("j-token") && created.contains("j-task-1-0"));
  // The first pods' credentials, bound to the launcher's range of incarnation 0.
  const Json& data = created["j-token"].at("stringData");
  EXPECT_EQ(data.at(TaskCredentialKey(3)).as_string(), auth::TaskCredential("tok", 3, 0, 999));
  EXPECT_FALSE(data.has_field(TaskCredentialKey(4)));
  std::string coordinator_args;
  for (const auto& [name, o] : created) {
    if (kube::LabelsOf(o).contains(kRoleLabel) &&
        kube::LabelsOf(o).at(kRoleLabel) == "coordinator" && kube::StringAt(o, "kind") == "Pod") {
      coordinator_args = o.at("spec").at("containers").at(0).at("args").serialize();
    }
  }
  EXPECT_THAT(coordinator_args, ::testing::HasSubstr("--num_tasks=4"));

  const Json& pod = created["j-task-1-0"];
  std::map<std::string, std::string> env;
  for (const Json& e : pod.at("spec").at("containers").at(0).at("env").as_array()) {
    env[e.at("name").as_string()] = kube::StringAt(e, "value");
  }
  EXPECT_EQ(env["PHALANX_TASK_ID"], "2");
  EXPECT_EQ(env["PHALANX_NUM_TASKS"], "4");
  EXPECT_EQ(env["PHALANX_NPROC_PER_NODE"], "2");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["PHALANX_TOKEN_FILE"], LocalTokenFile(2));
  // Only this pod's two credentials, each its own file.
  std::string items;
  for (const Json& v : pod.at("spec").at("volumes").as_array()) {
    if (v.at("name").as_string() == "phalanx-token") items = v.at("secret").at("items").serialize();
  }
  EXPECT_THAT(items, ::testing::HasSubstr(TaskCredentialKey(2)));
  EXPECT_THAT(items, ::testing::HasSubstr(TaskCredentialKey(3)));
  EXPECT_THAT(items, ::testing::Not(::testing::HasSubstr(TaskCredentialKey(1) + "\"")));
  EXPECT_THAT(items, ::testing::HasSubstr("token-3"));
}

// The node agent's clique channel (docs/adr/0004): the node's address from the downward API,
// the agent's port from the operator; a job can turn it off.
TEST(PlanTest, TaskPodsGetTheNodeAgentsChannelUnlessTheJobTurnsItOff) {
  const Json job = Job();
  const CoordinatorPlacement placement;
  TrainingJobSpec spec = Spec();
  auto task_pod_env = [&](const ReconcilePlan& plan) {
    for (const Json& o : plan.create) {
      if (kube::MetaString(o, "name") == "j-task-0-0") {
        return o.at("spec").at("containers").at(0).at("env").serialize();
      }
    }
    return std::string();
  };
  PlanInputs in{job, spec, {}, JobObservation{}, placement, "tok", kNow};
  in.agent_clique_port = 8479;
  const std::string env = task_pod_env(PlanReconcile(in));
  EXPECT_THAT(
      env,
      ::testing::HasSubstr(
          R"({"name":"PHALANX_NODE_IP","valueFrom":{"fieldRef":{"fieldPath":"status.hostIP"}}})"));
  EXPECT_THAT(env, ::testing::HasSubstr(
                       R"({"name":"PHALANX_CLIQUE_ADDRESS","value":"$(PHALANX_NODE_IP):8479"})"));
  // Defined before it is used: Kubernetes expands $(VAR) only from earlier entries.
  EXPECT_LT(env.find("PHALANX_NODE_IP"), env.find("PHALANX_CLIQUE_ADDRESS"));
  spec.node_agent = false;
  EXPECT_THAT(task_pod_env(PlanReconcile(in)),
              ::testing::Not(::testing::HasSubstr("PHALANX_CLIQUE")));
  spec.node_agent = true;
  in.agent_clique_port = 0;  // the operator has no agent channel
  EXPECT_THAT(task_pod_env(PlanReconcile(in)),
              ::testing::Not(::testing::HasSubstr("PHALANX_CLIQUE")));
}

TEST(PlanTest, SeveralRanksPerPod_CoordinatorTasksMapToTheirPods) {
  TrainingJobSpec spec = Spec();
  EXPECT_EQ(PodOfTask(spec, 3, 7).index, 3);  // one rank per pod: the same numbers
  EXPECT_EQ(PodOfTask(spec, 3, 7).incarnation, 7u);
  spec.nproc_per_node = 2;
  EXPECT_EQ(PodOfTask(spec, 3, 2 * kLocalIncarnationStride + 5).index, 1);
  EXPECT_EQ(PodOfTask(spec, 3, 2 * kLocalIncarnationStride + 5).incarnation, 2u);
}

TEST(PlanTest, SeveralRanksPerPod_AFailedRankGetsTheLaunchersRestartWindow) {
  TrainingJobSpec spec = Spec();
  spec.nproc_per_node = 2;
  JobObservation world = Healthy();
  world.coordinator_failed[1] = {0, "session broken"};
  TrainingJobStatus previous;
  previous.tasks.resize(2);
  previous.tasks[1].failure_reported_at = kNow - kExitStatusWait;
  // Past the one-rank wait: the pod's launcher may still be restarting the rank in place.
  ReconcilePlan plan = Plan(spec, previous, world);
  EXPECT_TRUE(plan.delete_pods.empty());
  EXPECT_EQ(plan.status.tasks[1].state, TaskState::kAwaitingExit);
  // A report that outlives the launcher's window (a hung rank) fails the pod.
  previous.tasks[1].failure_reported_at = kNow - kLocalRestartWait;
  plan = Plan(spec, previous, world);
  EXPECT_THAT(plan.delete_pods, ::testing::ElementsAre("j-task-1-0"));
}

TEST(PlanTest, BackoffThenMaxRestartsFailsTheJob) {
  TrainingJobSpec spec = Spec();
  spec.failure_policy.max_restarts = 2;
  spec.failure_policy.backoff = {absl::Seconds(10), absl::Seconds(60)};
  TrainingJobStatus previous;
  previous.restarts = 1;
  previous.last_restart_time = kNow - absl::Seconds(4);
  JobObservation world = Healthy();
  world.task_pods[0].phase = PodPhase::kFailed;
  ReconcilePlan plan = Plan(spec, previous, world);
  EXPECT_TRUE(plan.create.empty());  // still backing off
  EXPECT_EQ(plan.requeue_after, absl::Seconds(6));
  EXPECT_EQ(plan.status.tasks[0].state, TaskState::kBackingOff);
  plan = Plan(spec, previous, world, kNow + absl::Seconds(6));
  EXPECT_THAT(Names(plan.create), ::testing::ElementsAre("j-task-0-1"));
  EXPECT_EQ(plan.status.restarts, 2);

  previous.restarts = 2;
  plan = Plan(spec, previous, world, kNow + absl::Seconds(100));
  EXPECT_EQ(plan.status.phase, kPhaseFailed);
  EXPECT_EQ(plan.status.conditions.back().type, "Running");
  bool failed_condition = false;
  for (const Condition& c : plan.status.conditions) {
    if (c.type == "Failed" && c.status == "True" && c.reason == "MaxRestartsExceeded") {
      failed_condition = true;
    }
  }
  EXPECT_TRUE(failed_condition);
  EXPECT_TRUE(plan.create.empty());
}

// RestartBackoff and ClassifyFailure have their tables in failure_policy_test.cc.

TEST(PlanTest, FatalExitCodesAndReasonsFailTheJobAtOnce) {
  TrainingJobSpec spec = Spec();
  spec.failure_policy.fatal_exit_codes = {42};
  JobObservation world = Healthy();
  world.task_pods[1].phase = PodPhase::kFailed;
  world.task_pods[1].exit_code = 42;
  ReconcilePlan plan = Plan(spec, {}, world);
  EXPECT_EQ(plan.status.phase, kPhaseFailed);
  EXPECT_THAT(plan.delete_pods, ::testing::Contains("j-task-0-0"));
}

TEST(PlanTest, PreemptionOpensACheckpointRoundThenMovesTheTaskWithoutSpendingRestarts) {
  TrainingJobSpec spec = Spec();
  spec.preemption.checkpoint_grace = absl::Seconds(30);
  spec.failure_policy.max_restarts = 0;
  JobObservation world = Healthy();
  world.preempting_nodes["node-0"] = absl::InfiniteFuture();
  world.task_pods[1].node = "node-1";
  ReconcilePlan plan = Plan(spec, {}, world);
  // Task 0's preemption starts now (what the reconciler notifies the coordinator of), once.
  EXPECT_EQ(plan.status.tasks[0].preempting_since, kNow);
  EXPECT_FALSE(plan.status.tasks[1].preempting_since.has_value());
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "PreemptionNotice");
  EXPECT_THAT(plan.events[0].message, ::testing::HasSubstr("task 0 on node node-0"));
  EXPECT_TRUE(plan.delete_pods.empty());
  EXPECT_EQ(plan.requeue_after, absl::Seconds(30));
  EXPECT_EQ(plan.status.tasks[0].state, TaskState::kPreempting);
  // Later passes do not notify again; after the grace the task moves.
  ReconcilePlan later = Plan(spec, plan.status, world, kNow + absl::Seconds(10));
  EXPECT_EQ(later.status.tasks[0].preempting_since, kNow);
  EXPECT_TRUE(later.events.empty());
  EXPECT_TRUE(later.delete_pods.empty());
  later = Plan(spec, plan.status, world, kNow + absl::Seconds(30));
  EXPECT_THAT(later.delete_pods, ::testing::ElementsAre("j-task-0-0"));
  EXPECT_THAT(Names(later.create), ::testing::ElementsAre("j-task-0-1"));
  EXPECT_EQ(later.status.preemptions, 1);
  EXPECT_EQ(later.status.restarts, 0);
  EXPECT_NE(later.status.phase, kPhaseFailed);
}

TEST(PlanTest, TheNodesAnnouncedDeadlineEndsTheCheckpointBeforeTheGraceWould) {
  TrainingJobSpec spec = Spec();
  spec.preemption.checkpoint_grace = absl::Seconds(60);
  JobObservation world = Healthy();
  world.preempting_nodes["node-0"] = kNow + absl::Seconds(30);  // a GCE VM's 30 s
  world.task_pods[1].node = "node-1";
  ReconcilePlan plan = Plan(spec, {}, world);
  EXPECT_THAT(plan.notices,
              ::testing::ElementsAre(PreemptionNotice{0, kNow, kNow + absl::Seconds(30)}));
  EXPECT_EQ(plan.requeue_after, absl::Seconds(30));
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_THAT(plan.events[0].message, ::testing::HasSubstr("(in 30s)"));
  // The notice stays in every plan while the task checkpoints; it moves at the node's deadline.
  ReconcilePlan later = Plan(spec, plan.status, world, kNow + absl::Seconds(10));
  EXPECT_EQ(later.notices, plan.notices);
  later = Plan(spec, plan.status, world, kNow + absl::Seconds(30));
  EXPECT_TRUE(later.notices.empty());
  EXPECT_THAT(Names(later.create), ::testing::ElementsAre("j-task-0-1"));
}

TEST(PlanTest, ATaskThatExitsAfterItsPreemptionCheckpointIsMovedAtOnceAsAPreemption) {
  TrainingJobSpec spec = Spec();
  spec.preemption.checkpoint_grace = absl::Seconds(30);
  spec.failure_policy.max_restarts = 0;
  JobObservation world = Healthy();
  world.preempting_nodes["node-0"] = absl::InfiniteFuture();
  world.task_pods[1].node = "node-1";
  ReconcilePlan noticed = Plan(spec, {}, world);
  ASSERT_EQ(noticed.status.tasks[0].preempting_since, kNow);
  // Task 0 checkpointed at the sync step and exited non-zero well before the grace ran out.
  world.task_pods[0].phase = PodPhase::kFailed;
  world.task_pods[0].exit_code = 4;
  ReconcilePlan moved = Plan(spec, noticed.status, world, kNow + absl::Seconds(2));
  EXPECT_THAT(Names(moved.create), ::testing::ElementsAre("j-task-0-1"));
  EXPECT_EQ(moved.status.preemptions, 1);
  EXPECT_EQ(moved.status.restarts, 0);
  EXPECT_NE(moved.status.phase, kPhaseFailed);
  ASSERT_EQ(moved.replacements.size(), 1u);
  EXPECT_TRUE(moved.replacements[0].preemption);
  EXPECT_EQ(moved.replacements[0].reason, "NodePreempted");
  // Off a preempted node and without an open round the same exit is an ordinary failure (and
  // maxRestarts is 0).
  world.preempting_nodes.clear();
  ReconcilePlan failed = Plan(spec, Plan(spec, {}, Healthy()).status, world);
  EXPECT_EQ(failed.status.phase, kPhaseFailed);
}

TEST(PlanTest, JobScopePreemptionLabelsThePreemptedTaskAndCountsItAsAPreemption) {
  TrainingJobSpec spec = Spec();
  spec.failure_policy.restart_scope = RestartScope::kJob;
  JobObservation world = Healthy();
  world.preempting_nodes["node-0"] = absl::InfiniteFuture();
  world.task_pods[1].node = "node-1";
  ReconcilePlan noticed = Plan(spec, {}, world);
  world.task_pods[0].phase = PodPhase::kFailed;  // left after its checkpoint
  ReconcilePlan moved = Plan(spec, noticed.status, world, kNow + absl::Seconds(1));
  EXPECT_THAT(Names(moved.create), ::testing::ElementsAre("j-task-0-1", "j-task-1-1"));
  EXPECT_EQ(moved.status.tasks[0].last_failure_reason, "Preempted");
  EXPECT_EQ(moved.status.tasks[1].last_failure_reason, "JobRestart");
  ASSERT_EQ(moved.replacements.size(), 2u);
  EXPECT_TRUE(moved.replacements[0].preemption);
  EXPECT_FALSE(moved.replacements[1].preemption);
  EXPECT_EQ(moved.status.preemptions, 1);
  EXPECT_EQ(moved.status.restarts, 0);
}

TEST(PlanTest, PreemptionsThatCountTowardMaxRestartsCanExhaustIt) {
  TrainingJobSpec spec = Spec();
  spec.failure_policy.max_restarts = 0;
  spec.failure_policy.preemptions_count_toward_max_restarts = true;
  JobObservation world = Healthy();
  world.preempting_nodes["node-0"] = absl::InfiniteFuture();
  world.task_pods[1].node = "node-1";
  ReconcilePlan noticed = Plan(spec, {}, world);
  world.task_pods[0].phase = PodPhase::kFailed;
  ReconcilePlan done = Plan(spec, noticed.status, world, kNow + absl::Seconds(1));
  EXPECT_EQ(done.status.phase, kPhaseFailed);
  EXPECT_TRUE(done.create.empty());
}

TEST(PlanTest, AnEvictedPodIsReplacedOnceGoneAsAPreemption) {
  ReconcilePlan running = Plan(Spec(), {}, Healthy());
  JobObservation world = Healthy();
  world.task_pods[1].being_deleted = true;
  world.task_pods[1].disruption_target = true;
  ReconcilePlan terminating = Plan(Spec(), running.status, world);
  EXPECT_TRUE(terminating.create.empty());
  EXPECT_EQ(terminating.status.tasks[1].state, TaskState::kTerminating);
  world.task_pods.pop_back();  // the eviction finished
  ReconcilePlan moved = Plan(Spec(), terminating.status, world);
  EXPECT_THAT(Names(moved.create), ::testing::ElementsAre("j-task-1-1"));
  EXPECT_EQ(moved.status.preemptions, 1);
  EXPECT_EQ(moved.status.restarts, 0);
}

TEST(PlanTest, ARunningPodThatVanishesIsANewIncarnationNotAReuse) {
  ReconcilePlan running = Plan(Spec(), {}, Healthy());
  JobObservation world = Healthy();
  world.task_pods.erase(world.task_pods.begin());  // task 0's pod deleted by someone
  ReconcilePlan plan = Plan(Spec(), running.status, world);
  EXPECT_THAT(Names(plan.create), ::testing::ElementsAre("j-task-0-1"));
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(plan.status.tasks[0].last_failure_reason, "PodDeleted");
  // A pod created but not yet seen in the cache is not "vanished": no second pod, no restart.
  JobObservation fresh = Healthy();
  fresh.task_pods.clear();
  ReconcilePlan first = Plan(Spec(), {}, fresh);
  ReconcilePlan again = Plan(Spec(), first.status, fresh);
  EXPECT_THAT(Names(again.create), ::testing::ElementsAre("j-task-0-0", "j-task-1-0"));
  EXPECT_EQ(again.status.restarts, 0);
}

TEST(PlanTest, SuccessPolicies) {
  JobObservation world = Healthy();
  world.task_pods[0].phase = PodPhase::kSucceeded;
  EXPECT_NE(Plan(Spec(), {}, world).status.phase, kPhaseSucceeded);
  TrainingJobSpec task_zero = Spec();
  task_zero.success_policy = SuccessPolicy::kTaskZero;
  ReconcilePlan plan = Plan(task_zero, {}, world);
  EXPECT_EQ(plan.status.phase, kPhaseSucceeded);
  EXPECT_THAT(plan.delete_pods, ::testing::Contains("j-task-1-0"));
  world.task_pods[1].phase = PodPhase::kSucceeded;
  EXPECT_EQ(Plan(Spec(), {}, world).status.phase, kPhaseSucceeded);
}

TEST(PlanTest, SuspendDeletesPodsAndResumeRecreatesThem) {
  TrainingJobSpec spec = Spec();
  spec.suspend = true;
  ReconcilePlan plan = Plan(spec, {}, Healthy());
  EXPECT_EQ(plan.status.phase, kPhaseSuspended);
  EXPECT_THAT(plan.delete_pods,
              ::testing::UnorderedElementsAre("j-task-0-0", "j-task-1-0", "j-coordinator"));
  JobObservation empty = Healthy();
  empty.task_pods.clear();
  empty.coordinator.reset();
  spec.suspend = false;
  ReconcilePlan resumed = Plan(spec, plan.status, empty);
  EXPECT_THAT(Names(resumed.create),
              ::testing::ElementsAre("j-coordinator", "j-task-0-1", "j-task-1-1"));
  EXPECT_EQ(resumed.status.restarts, 0);  // a resume is not a restart
  // Suspending again while suspended changes nothing.
  spec.suspend = true;
  ReconcilePlan again = Plan(spec, plan.status, Healthy());
  EXPECT_EQ(again.status.tasks[0].incarnation, 1);
}

TEST(PlanTest, GoodputCountsRunningTimeAsProductiveAndRestartingAsLost) {
  TrainingJobStatus previous;
  previous.phase = kPhaseRunning;
  previous.accounted_until = kNow - absl::Seconds(10);
  // Steady and recent: nothing is booked (no status rewrite on every pass).
  ReconcilePlan plan = Plan(Spec(), previous, Healthy());
  EXPECT_DOUBLE_EQ(plan.status.productive_seconds, 0);
  EXPECT_EQ(plan.status.accounted_until, previous.accounted_until);
  // After the accounting period, it is.
  plan = Plan(Spec(), previous, Healthy(), kNow + absl::Seconds(30));
  EXPECT_DOUBLE_EQ(plan.status.productive_seconds, 40);
  // A phase change books at once: Restarting time is lost time.
  TrainingJobStatus restarting = plan.status;
  restarting.phase = kPhaseRestarting;
  plan = Plan(Spec(), restarting, Healthy(), kNow + absl::Seconds(33));
  EXPECT_EQ(plan.status.phase, kPhaseRunning);
  EXPECT_DOUBLE_EQ(plan.status.lost_seconds, 3);
}

TEST(PlanTest, ConditionTimesMoveOnlyWhenStatusFlips) {
  ReconcilePlan first = Plan(Spec(), {}, Healthy());
  absl::Time running_since;
  for (const Condition& c : first.status.conditions) {
    if (c.type == "Running") running_since = c.last_transition_time;
  }
  ReconcilePlan second = Plan(Spec(), first.status, Healthy(), kNow + absl::Seconds(50));
  for (const Condition& c : second.status.conditions) {
    if (c.type == "Running") {
      EXPECT_EQ(c.last_transition_time, running_since);
    }
  }
}

}  // namespace
}  // namespace phalanx::op

namespace phalanx::op {
namespace {

TEST(PlanTest, ARefusedJobStaysBlockedWhileItsChildrenAreStillToCreate) {
  TrainingJobStatus previous;
  previous.phase = kPhaseBlocked;
  SetCondition(previous.conditions,
               {kConditionChildrenReady, "False", kReasonFailedCreate, "forbidden", kNow, 3}, kNow);
  // Nothing exists yet: the pass will try again, and until that works the job stays Blocked
  // (recomputing Pending would make every retry write status twice).
  EXPECT_EQ(Plan(Spec(), previous, JobObservation{}).status.phase, kPhaseBlocked);
  // Everything exists (the retry worked): the planner's own phase.
  EXPECT_EQ(Plan(Spec(), previous, Healthy()).status.phase, kPhaseRunning);
}

}  // namespace
}  // namespace phalanx::op
