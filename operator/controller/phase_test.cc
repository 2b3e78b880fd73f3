// Table test of the phase stage (phase.h).
#include "operator/controller/phase.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "operator/api/codec.h"
#include "operator/controller/blocked.h"
#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT

TEST(SetPhaseAndConditions, Table) {
  struct Case {
    std::string name;
    std::function<void(TestPass&)> given;  // two tasks running
    std::string want_phase;
    std::string want_running;  // the Running condition
    bool want_start_time;
    absl::Duration want_requeue = absl::ZeroDuration();
  };
  auto refused = [](TestPass& t) {
    t.previous.phase = kPhaseBlocked;
    SetCondition(t.previous.conditions,
                 {kConditionChildrenReady, "False", kReasonFailedCreate, "forbidden", kNow, 3},
                 kNow);
  };
  const Case cases[] = {
      {"everyTaskRunning", [](TestPass&) {}, kPhaseRunning, "True/AllTasksRunning", true},
      {"runningOrDone", [](TestPass& t) { t.world.task_pods[1].phase = PodPhase::kSucceeded; },
       kPhaseRunning, "True/AllTasksRunning", true},
      {"oneRunning", [](TestPass& t) { t.world.task_pods[1].phase = PodPhase::kPending; },
       kPhaseStarting, "False/Starting", false},
      {"noneRunningYet", [](TestPass& t) { t.world.task_pods.clear(); }, kPhasePending,
       "False/Pending", false},
      {"noneRunningAfterItRan",
       [](TestPass& t) {
         t.world.task_pods.clear();
         t.previous.start_time = kNow - absl::Hours(1);
       },
       kPhaseStarting, "False/Starting", true},
      {"aFailedTaskMeansRestarting",
       [](TestPass& t) { t.world.task_pods[1].phase = PodPhase::kFailed; }, kPhaseRestarting,
       "False/Restarting", false},
      {"refusedAndStillToCreateStaysBlocked",
       [&](TestPass& t) {
         refused(t);
         t.world = JobObservation{};
       },
       kPhaseBlocked, "False/Blocked", false},
      {"refusedButNothingToCreateLeavesBlocked", refused, kPhaseRunning, "True/AllTasksRunning",
       true},
      {"withoutTheCoordinatorsAddressLooksAgainSoon",
       [](TestPass& t) {
         t.placement.address_by_pod_ip = true;
         t.world.coordinator->phase = PodPhase::kPending;
       },
       kPhaseRunning, "True/AllTasksRunning", true, absl::Milliseconds(500)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2));
    c.given(t);
    JobPass pass = t.Before("phase");
    const absl::Duration requeue_before = pass.out.requeue_after;
    EXPECT_EQ(SetPhaseAndConditions(t.Inputs(), pass), Next::kContinue);
    EXPECT_EQ(pass.out.status.phase, c.want_phase);
    EXPECT_EQ(ConditionOf(pass.out.status, "Running"), c.want_running);
    EXPECT_EQ(pass.out.status.start_time.has_value(), c.want_start_time);
    if (c.want_requeue != absl::ZeroDuration()) {
      EXPECT_EQ(pass.out.requeue_after, c.want_requeue);
    } else {
      EXPECT_EQ(pass.out.requeue_after, requeue_before);
    }
  }
}

}  // namespace
}  // namespace phalanx::op
