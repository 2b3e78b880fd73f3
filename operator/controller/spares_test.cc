// The spares stage (spares.h) and what it takes from the rest of the pipeline: spec.spares pods
// are kept once every task has its pod; a spare the coordinator gave a failed task is that
// task's pod at once (no replacement pod), relabelled, counted once as a restart with an Event,
// and a new spare is started behind it; an ended spare is replaced; the spare pod's own shape.
#include "operator/controller/spares.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/kube/object_meta.h"
#include "operator/api/validation.h"
#include "operator/controller/plan.h"
#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// Spare slot `slot`'s pod of generation `generation`, Running.
PodView SparePod(int slot, int generation) {
  PodView pod = PodBuilder("j", -1).Build();
  pod.name = SparePodName("j", slot, generation);
  pod.index = -1;
  pod.incarnation = base::kNoIncarnation;
  pod.from_spare = true;
  pod.spare_slot = slot;
  pod.spare_generation = generation;
  return pod;
}

// Two tasks running (status written once), spec.spares = 1.
TestPass JobWithOneSpare() {
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  t.spec.spares = 1;
  t.previous.phase = kPhaseRunning;
  t.previous.start_time = kNow - absl::Minutes(1);  // the job has run: spares may start
  t.previous.tasks.resize(2);
  for (int i = 0; i < 2; ++i) {
    t.previous.tasks[static_cast<size_t>(i)].index = i;
    t.previous.tasks[static_cast<size_t>(i)].pod = TaskPodName("j", i, 0);
  }
  return t;
}

TEST(Spares, AreStartedOnceEveryTaskHasItsPodAndCountedReadyWhenTheyWait) {
  TestPass t = JobWithOneSpare();
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_THAT(Names(plan.create), ElementsAre("j-spare-0-0"));
  EXPECT_THAT(plan.status.spares.generations, ElementsAre(0));
  EXPECT_EQ(plan.status.spares.total, 1);
  EXPECT_EQ(plan.status.spares.ready, 0);

  // The next pass does not see its own create yet: it names the same pod (AlreadyExists, ours),
  // never a second spare.
  t.previous.spares = plan.status.spares;
  EXPECT_THAT(Names(PlanReconcile(t.Inputs()).create), ElementsAre("j-spare-0-0"));
  t.world.spare_pods.push_back(SparePod(0, 0));
  t.world.spares_waiting.insert("j-spare-0-0");
  plan = PlanReconcile(t.Inputs());
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_EQ(plan.status.spares.total, 1);
  EXPECT_EQ(plan.status.spares.ready, 1);

  // A job that has not run yet (every task at once) starts no spare: it would compete with the
  // job's own pods for nodes.
  TestPass starting = JobWithOneSpare();
  starting.previous.start_time.reset();
  starting.previous.phase = kPhaseStarting;
  starting.world.task_pods.back().phase = PodPhase::kPending;
  EXPECT_THAT(PlanReconcile(starting.Inputs()).create, IsEmpty());
}

TEST(Spares, ASpareGivenAFailedTaskIsItsPodRelabelledAndCountedOnceAndAnotherStarts) {
  TestPass t = JobWithOneSpare();
  t.previous.spares = {1, 1, 0, {0}};
  t.world.task_pods[1] = PodBuilder("j", 1, 0).Failed(137, "Error").Build();
  t.world.coordinator_failed[1] = {0, "session broken: connection lost", kNow};
  t.world.spare_pods.push_back(SparePod(0, 0));
  t.world.spare_takeovers["j-spare-0-0"] = {1, 1};
  t.world.coordinator_incarnations[1] = 1;
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  // No replacement task pod: the spare is the task's pod; a new spare starts behind it.
  EXPECT_THAT(Names(plan.create), ElementsAre("j-spare-0-1"));
  EXPECT_THAT(plan.relabel, ElementsAre(PodRelabel{"j-spare-0-0", 1, 1}));
  const TaskStatus& task = plan.status.tasks[1];
  EXPECT_EQ(task.incarnation, 1u);
  EXPECT_EQ(task.pod, "j-spare-0-0");
  EXPECT_EQ(task.spare_of, "j-spare-0-0");
  EXPECT_EQ(task.restarts, 1);
  EXPECT_EQ(task.last_failure_reason, "SpareTookOver");
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(plan.status.spares.takeovers, 1);
  EXPECT_THAT(plan.status.spares.generations, ElementsAre(1));
  EXPECT_THAT(Reasons(plan.events), Contains("SpareTookOver"));
  EXPECT_THAT(plan.replacements, Contains(Replacement{1, false, "SpareTookOver"}));

  // The next pass sees it relabelled (a task pod of incarnation 1): nothing is counted again.
  t.previous = plan.status;
  PodView relabelled = SparePod(0, 0);
  relabelled.index = 1;
  relabelled.incarnation = 1;
  t.world.spare_pods.clear();
  t.world.spare_takeovers.clear();
  t.world.task_pods.push_back(relabelled);
  t.world.spare_pods.push_back(SparePod(0, 1));
  plan = PlanReconcile(t.Inputs());
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(plan.relabel, IsEmpty());
  EXPECT_EQ(plan.status.restarts, 1);
  EXPECT_EQ(plan.status.tasks[1].spare_of, "j-spare-0-0");
  EXPECT_THAT(Reasons(plan.events), Not(Contains("SpareTookOver")));
}

TEST(Spares, APreemptedTaskTakenOverCountsAsAPreemptionNotARestart) {
  TestPass t = JobWithOneSpare();
  t.previous.tasks[1].preempting_since = kNow - absl::Seconds(3);
  t.world.task_pods[1] = PodBuilder("j", 1, 0).Failed(4, "Error").Build();  // left: exit 4
  t.world.spare_pods.push_back(SparePod(0, 0));
  t.world.spare_takeovers["j-spare-0-0"] = {1, 1};
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_EQ(plan.status.preemptions, 1);
  EXPECT_EQ(plan.status.restarts, 0);
  EXPECT_EQ(plan.status.spares.takeovers, 1);
  EXPECT_EQ(plan.status.tasks[1].last_failure_reason, "Preempted");
  EXPECT_FALSE(plan.status.tasks[1].preempting_since.has_value());
  EXPECT_THAT(plan.replacements, Contains(Replacement{1, true, "SpareTookOver"}));
}

TEST(Spares, AnEndedSpareIsReplacedAndLoweringSparesDeletesTheNewest) {
  TestPass t = JobWithOneSpare();
  t.previous.spares = {1, 0, 0, {0}};
  PodView ended = SparePod(0, 0);
  ended.phase = PodPhase::kFailed;
  t.world.spare_pods.push_back(ended);
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_THAT(plan.delete_pods, Contains("j-spare-0-0"));
  EXPECT_THAT(Names(plan.create), ElementsAre("j-spare-0-1"));

  // Two live spares for spec.spares 1 (it was lowered).
  TestPass lowered = JobWithOneSpare();
  lowered.previous.spares = {2, 0, 0, {0, 0}};
  lowered.world.spare_pods = {SparePod(0, 0), SparePod(1, 0)};
  plan = PlanReconcile(lowered.Inputs());
  EXPECT_THAT(plan.delete_pods, ElementsAre("j-spare-1-0"));
  EXPECT_EQ(plan.status.spares.total, 1);
  EXPECT_THAT(plan.status.spares.generations, ElementsAre(0));
}

TEST(Spares, AFailedPodWaitsForTheCoordinatorsWordWhileASpareWaits) {
  // The pod's exit reached the operator before the coordinator's snapshot (which would name the
  // spare that took the task over): no replacement yet, a look again within the grace.
  TestPass t = JobWithOneSpare();
  PodView failed = PodBuilder("j", 1, 0).Failed(137, "Error").Build();
  failed.finished_at = kNow - absl::Seconds(1);
  t.world.task_pods[1] = failed;
  t.world.spare_pods.push_back(SparePod(0, 0));
  t.world.spares_waiting.insert("j-spare-0-0");
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_THAT(Names(plan.create), IsEmpty());
  EXPECT_EQ(plan.status.tasks[1].incarnation, 0u);
  EXPECT_GT(plan.requeue_after, absl::ZeroDuration());
  EXPECT_LE(plan.requeue_after, absl::Seconds(2));
  // The coordinator has spoken without a take-over (or the grace passed): replaced as usual.
  t.world.coordinator_failed[1] = {0, "session broken", kNow};
  EXPECT_THAT(Names(PlanReconcile(t.Inputs()).create), Contains("j-task-1-1"));
  t.world.coordinator_failed.clear();
  t.now = kNow + absl::Seconds(3);
  EXPECT_THAT(Names(PlanReconcile(t.Inputs()).create), Contains("j-task-1-1"));
}

TEST(Spares, ATakeOverWithMaxRestartsSpentFailsTheJob) {
  TestPass t = JobWithOneSpare();
  t.spec.failure_policy.max_restarts = 1;
  t.previous.restarts = 1;
  t.world.spare_pods.push_back(SparePod(0, 0));
  t.world.spare_takeovers["j-spare-0-0"] = {1, 1};
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_EQ(plan.status.phase, kPhaseFailed);
  EXPECT_EQ(ConditionOf(plan.status, "Failed"), "True/MaxRestartsExceeded");
}

TEST(Spares, AFatalExitOfThePodTakenOverFailsTheJobOnceKnown) {
  TestPass t = JobWithOneSpare();
  t.spec.failure_policy.fatal_exit_codes = {2};
  t.previous.tasks[1].incarnation = 1;  // the take-over was counted in an earlier pass
  t.previous.tasks[1].pod = "j-spare-0-0";
  t.previous.restarts = 1;
  t.world.task_pods[1] = PodBuilder("j", 1, 0).Failed(2, "Error").Build();
  PodView taken = SparePod(0, 0);
  taken.index = 1;
  taken.incarnation = 1;
  t.world.task_pods.push_back(taken);
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_EQ(ConditionOf(plan.status, "Failed"), "True/FatalFailure");
}

TEST(Spares, AreDeletedWhenTheJobSuspendsOrItsGangIsReleased) {
  TestPass t = JobWithOneSpare();
  t.spec.suspend = true;
  t.world.spare_pods.push_back(SparePod(0, 0));
  EXPECT_THAT(PlanReconcile(t.Inputs()).delete_pods, Contains("j-spare-0-0"));
}

TEST(Spares, ASpareServedTaskWhosePodVanishedIsAFailureNotANewStart) {
  TestPass t = JobWithOneSpare();
  t.previous.tasks[1].incarnation = 1;
  t.previous.tasks[1].pod = "j-spare-0-0";
  t.previous.tasks[1].spare_of = "j-spare-0-0";
  t.previous.tasks[1].state = TaskState::kRunning;
  t.previous.spares = {0, 0, 1, {1}};
  t.world.task_pods.pop_back();  // j-spare-0, task 1's pod, is gone
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_EQ(plan.status.tasks[1].last_failure_reason, "PodDeleted");
  EXPECT_EQ(plan.status.tasks[1].incarnation, 2u);
}

TEST(Spares, GoWithTheJobWhenItFails) {
  TestPass t = JobWithOneSpare();
  t.spec.failure_policy.max_restarts = 0;
  t.world.task_pods[1] = PodBuilder("j", 1, 0).Failed(1, "Error").Build();
  t.world.spare_pods.push_back(SparePod(0, 0));
  ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_EQ(plan.status.phase, kPhaseFailed);
  EXPECT_THAT(plan.delete_pods, Contains("j-spare-0-0"));
}

TEST(SparePod, IsTheTemplateWithASpareIdentityAndTheSpareCredentialOnly) {
  TrainingJobBuilder b("j");
  TrainingJobSpec spec = b.Spec();
  spec.spares = 1;
  const Json pod = DesiredSparePod(b.Build(), spec, 4, 2, "j-coordinator.ns.svc:8470");
  EXPECT_EQ(kube::MetaString(pod, "name"), "j-spare-4-2");
  const std::map<std::string, std::string> labels = kube::LabelsOf(pod);
  EXPECT_EQ(labels.at(kRoleLabel), "spare");
  EXPECT_EQ(labels.at(kSpareLabel), "4");
  EXPECT_EQ(labels.at(kSpareGenerationLabel), "2");
  EXPECT_FALSE(labels.contains(kTaskLabel));
  EXPECT_FALSE(pod.at("spec").has_field("hostname"));
  std::map<std::string, std::string> env;
  for (const Json& e : pod.at("spec").at("containers").at(0).at("env").as_array()) {
    env[e.at("name").as_string()] =
        e.has_field("value") ? e.at("value").as_string()
                             : e.at("valueFrom").at("fieldRef").at("fieldPath").as_string();
  }
  EXPECT_EQ(env["PHALANX_SPARE"], "4");
  EXPECT_EQ(env["PHALANX_POD_NAME"], "metadata.name");
  EXPECT_FALSE(env.contains("PHALANX_TASK_ID"));  // the template's "wrong" value is dropped too
  EXPECT_FALSE(env.contains("RANK"));
  EXPECT_EQ(env["KEEP"], "1");
  std::string items;
  for (const Json& v : pod.at("spec").at("volumes").as_array()) {
    if (v.at("name").as_string() != "phalanx-token") continue;
    for (const Json& item : v.at("secret").at("items").as_array()) {
      items += item.at("key").as_string() + "->" + item.at("path").as_string() + ";";
    }
  }
  EXPECT_EQ(items, "spare->token;");
}

TEST(SpareSpec, IsBoundedByReplicasAndNeedsOneRankPerPodAndTaskScope) {
  TrainingJobSpec spec = TrainingJobBuilder("j").Tasks(2).Spec();
  spec.spares = 3;
  EXPECT_THAT(ValidateSpec(spec), Contains(HasSubstr("spec.spares: must be between 0 and")));
  spec.spares = 1;
  spec.nproc_per_node = 2;
  EXPECT_THAT(ValidateSpec(spec), Contains(HasSubstr("nprocPerNode 1")));
  spec.nproc_per_node = 1;
  spec.failure_policy.restart_scope = RestartScope::kJob;
  EXPECT_THAT(ValidateSpec(spec), Contains(HasSubstr("restartScope Task")));
  spec.failure_policy.restart_scope = RestartScope::kTask;
  EXPECT_THAT(ValidateSpec(spec), Not(Contains(HasSubstr("spec.spares"))));
}

}  // namespace
}  // namespace phalanx::op
