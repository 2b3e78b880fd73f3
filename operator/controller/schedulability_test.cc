// Table tests of the schedulability stage (schedulability.h): the Unschedulable condition with
// the scheduler's message, its bounds, and one Event per transition.
#include "operator/controller/schedulability.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "operator/api/codec.h"
#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::HasSubstr;

constexpr char kNoGpu[] = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.";

// Task `i`'s pod waits for a node with the scheduler's `message`.
std::function<void(TestPass&)> Unschedulable(int i, std::string message = kNoGpu) {
  return [i, message](TestPass& t) {
    PodView& pod = t.world.task_pods[static_cast<size_t>(i)];
    pod.phase = PodPhase::kPending;
    pod.ready = false;
    pod.node.clear();
    pod.unschedulable = true;
    pod.unschedulable_message = message;
  };
}

std::function<void(TestPass&)> WasUnschedulable(bool value) {
  return [value](TestPass& t) {
    SetCondition(t.previous.conditions,
                 {"Unschedulable", value ? "True" : "False", value ? "PodUnschedulable" : "x",
                  "before", kNow - absl::Minutes(5), 3},
                 kNow - absl::Minutes(5));
  };
}

TEST(MarkUnschedulable, Table) {
  struct Case {
    std::string name;
    std::vector<std::function<void(TestPass&)>> given;  // 4 tasks, all running
    std::string want_condition;                         // ConditionOf(..., "Unschedulable")
    std::string want_message;                           // a substring; "" for none
    std::vector<std::string> want_events;
  };
  const std::string long_message(1000, 'x');
  const Case cases[] = {
      {"aJobThatNeverWaitedForANodeHasNoCondition", {}, "none", "", {}},
      {"oneTaskWithoutANodeSetsItWithTheSchedulersWords",
       {Unschedulable(1)},
       "True/PodUnschedulable",
       "task 1: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
       {"Unschedulable"}},
      {"stillUnschedulableRaisesNoSecondEvent",
       {WasUnschedulable(true), Unschedulable(1)},
       "True/PodUnschedulable",
       "task 1: 0/3",
       {}},
      {"scheduledAgainTurnsItFalseWithANormalEvent",
       {WasUnschedulable(true)},
       "False/AllTasksScheduled",
       "every task pod has a node",
       {"Scheduled"}},
      {"alreadyFalseStaysQuiet", {WasUnschedulable(false)}, "False/AllTasksScheduled", "", {}},
      {"moreThanThreeTasksAreCounted",
       {Unschedulable(0), Unschedulable(1), Unschedulable(2), Unschedulable(3)},
       "True/PodUnschedulable",
       "task 0: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.; task 1: 0/3 nodes are "
       "available: 3 Insufficient nvidia.com/gpu.; task 2: 0/3 nodes are available: 3 "
       "Insufficient nvidia.com/gpu.; and 1 more",
       {"Unschedulable"}},
      {"aLongSchedulerMessageIsCut",
       {Unschedulable(2, long_message)},
       "True/PodUnschedulable",
       "task 2: " + std::string(kMaxSchedulerMessage, 'x') + "...",
       {"Unschedulable"}},
      {"aPodBeingDeletedDoesNotCount",
       {Unschedulable(1), [](TestPass& t) { t.world.task_pods[1].being_deleted = true; }},
       "none",
       "",
       {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(4));
    for (const auto& given : c.given) given(t);
    JobPass pass = t.Before("schedulability");
    EXPECT_EQ(MarkUnschedulable(t.Inputs(), pass), Next::kContinue);
    EXPECT_EQ(ConditionOf(pass.out.status, "Unschedulable"), c.want_condition);
    for (const Condition& cond : pass.out.status.conditions) {
      if (cond.type != "Unschedulable") continue;
      EXPECT_THAT(cond.message, HasSubstr(c.want_message));
      EXPECT_LE(cond.message.size(), 4 * (kMaxSchedulerMessage + 40));
    }
    EXPECT_EQ(Reasons(pass.out.events), c.want_events);
  }
}

// The whole pass: a replacement that finds no node keeps the job's condition, and the pod's
// PodScheduled condition as the scheduler writes it is what the stage reads.
TEST(MarkUnschedulable, ReadsThePodsPodScheduledCondition) {
  const PodView v = ViewOfPod(Json::parse(R"({"metadata":{"name":"j-task-1-0",
      "labels":{"phalanx.dev/task":"1","phalanx.dev/incarnation":"0"}},
      "status":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"False",
      "reason":"Unschedulable","message":"0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}})"));
  EXPECT_TRUE(v.unschedulable);
  EXPECT_EQ(v.unschedulable_message, kNoGpu);
  const PodView scheduled = ViewOfPod(Json::parse(R"({"metadata":{"name":"p"},
      "status":{"conditions":[{"type":"PodScheduled","status":"True"}]}})"));
  EXPECT_FALSE(scheduled.unschedulable);

  TestPass t(TrainingJobBuilder("j").Tasks(2));
  t.world.task_pods[1] = v;
  const ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_EQ(ConditionOf(plan.status, "Unschedulable"), "True/PodUnschedulable");
  EXPECT_THAT(Reasons(plan.events), ::testing::Contains("Unschedulable"));
}

TEST(JobIsUnschedulable, ReadsTheJobsCondition) {
  EXPECT_FALSE(JobIsUnschedulable(Json::parse(R"({"metadata":{"name":"j"}})")));
  EXPECT_TRUE(JobIsUnschedulable(Json::parse(
      R"({"status":{"conditions":[{"type":"Running","status":"False"},
          {"type":"Unschedulable","status":"True"}]}})")));
  EXPECT_FALSE(JobIsUnschedulable(
      Json::parse(R"({"status":{"conditions":[{"type":"Unschedulable","status":"False"}]}})")));
}

}  // namespace
}  // namespace phalanx::op
