// Table tests of the children stages (children.h).
#include "operator/controller/children.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAreArray;

TEST(EnsureJobChildren, Table) {
  struct Case {
    std::string name;
    std::function<void(TestPass&)> given;
    std::vector<std::string> want_created;
    std::vector<std::string> want_deleted;
    std::vector<std::string> want_events;
    std::string want_address;
    absl::Duration want_requeue;
  };
  const std::string by_dns = "j-coordinator.ns.svc:8470";
  const Case cases[] = {
      {"everythingThereCreatesNothing", [](TestPass&) {}, {}, {}, {}, by_dns, absl::ZeroDuration()},
      {"aNewJobGetsItsSecretServicesAndCoordinator",
       [](TestPass& t) { t.world = JobObservation{}; },
       {"j-token", "j-tasks", "j-coordinator", "j-coordinator"},
       {},
       {},
       by_dns,
       absl::ZeroDuration()},
      {"anEndedCoordinatorIsDeletedAndRecreatedOnceGone",
       [](TestPass& t) { t.world.coordinator->phase = PodPhase::kFailed; },
       {},
       {"j-coordinator"},
       {"CoordinatorRestarted"},
       by_dns,
       absl::Seconds(1)},
      {"anEndedCoordinatorBeingDeletedIsWaitedFor",
       [](TestPass& t) {
         t.world.coordinator->phase = PodPhase::kSucceeded;
         t.world.coordinator->being_deleted = true;
       },
       {},
       {},
       {},
       by_dns,
       absl::Seconds(1)},
      {"byPodIpThereIsNoAddressUntilTheCoordinatorRuns",
       [](TestPass& t) {
         t.placement.address_by_pod_ip = true;
         t.world.coordinator->phase = PodPhase::kPending;
       },
       {},
       {},
       {},
       "",
       absl::ZeroDuration()},
      {"byPodIpARunningCoordinatorGivesItsIp",
       [](TestPass& t) { t.placement.address_by_pod_ip = true; },
       {},
       {},
       {},
       "10.0.0.9:8470",
       absl::ZeroDuration()},
      {"olderIncarnationsAreDeleted",
       [](TestPass& t) {
         t.world.task_pods.push_back(PodBuilder("j", 1, 1).Build());  // 1-0 is now stale
         t.world.task_pods.push_back(PodBuilder("j", 0, 3).Build());
         t.world.task_pods.push_back(PodBuilder("j", 0, 2).Deleting().Build());
       },
       {},
       {"j-task-0-0", "j-task-1-0"},
       {},
       by_dns,
       absl::ZeroDuration()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2));
    c.given(t);
    JobPass pass = t.Before("children");
    EXPECT_EQ(EnsureJobChildren(t.Inputs(), pass), Next::kContinue);
    EXPECT_THAT(Names(pass.out.create), ElementsAreArray(c.want_created));
    EXPECT_THAT(pass.out.delete_pods, ElementsAreArray(c.want_deleted));
    EXPECT_THAT(Reasons(pass.out.events), ElementsAreArray(c.want_events));
    EXPECT_EQ(pass.coordinator_address, c.want_address);
    EXPECT_EQ(pass.out.requeue_after, c.want_requeue);
  }
}

TEST(EnsureTaskPods, Table) {
  struct Case {
    std::string name;
    std::function<void(TestPass&)> given;
    std::vector<std::string> want_created;
  };
  const Case cases[] = {
      {"everyTaskHasItsPod", [](TestPass&) {}, {}},
      {"missingPodsAreCreatedAtTheTasksIncarnation",
       [](TestPass& t) {
         t.world.task_pods.clear();
         t.previous.tasks.resize(2);
         t.previous.tasks[1].incarnation = 4;
       },
       {"j-task-0-0", "j-task-1-4"}},
      {"notWithoutTheCoordinatorsAddress",
       [](TestPass& t) {
         t.world.task_pods.clear();
         t.placement.address_by_pod_ip = true;
         t.world.coordinator->phase = PodPhase::kPending;
       },
       {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2));
    c.given(t);
    JobPass pass = t.Before("task pods");
    EnsureTaskPods(t.Inputs(), pass);
    EXPECT_THAT(Names(pass.out.create), ElementsAreArray(c.want_created));
    for (const TaskRecord& r : pass.tasks) {
      if (r.event == TaskEvent::kNoPod && !c.want_created.empty()) {
        EXPECT_EQ(r.status.pod, TaskPodName("j", r.status.index, r.status.incarnation));
      }
    }
  }
}

}  // namespace
}  // namespace phalanx::op
