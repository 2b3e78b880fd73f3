// Table tests of the children stages (children.h).
#include "operator/controller/children.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "operator/controller/blocked.h"
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

// Issue 16 item 5: a coordinator that keeps ending is recreated after a back-off that doubles
// (bounded), each ended pod is counted once with its exit in status.coordinator, and the stage
// asks to be woken when the back-off ends.
TEST(EnsureJobChildren, CoordinatorRestartBackOff) {
  struct Case {
    std::string name;
    std::function<void(TestPass&)> given;
    std::vector<std::string> want_created;
    std::vector<std::string> want_events;
    int want_restarts;
    absl::Duration want_backoff;  // restart_after - now
    absl::Duration want_requeue;
  };
  const auto ended = [](TestPass& t) {
    PodView& c = *t.world.coordinator;
    c.uid = "pod-uid-2";
    c.phase = PodPhase::kFailed;
    c.exit_code = 2;
    c.reason = "Error";
    c.message = "cannot listen on 0.0.0.0:8470";
  };
  // The last restart was 5 s ago and waited 2 s.
  const auto after_a_2s_backoff = [](TestPass& t) {
    CoordinatorStatus& c = t.previous.coordinator;
    c.restarts = 2;
    c.last_restart_time = kNow - absl::Seconds(5);
    c.restart_after = kNow - absl::Seconds(3);
    c.last_failed_pod = "pod-uid-1";
  };
  const Case cases[] = {
      {"theFirstEndWaitsTheFirstDelay",
       ended,
       {},
       {"CoordinatorRestarted"},
       1,
       absl::Seconds(1),
       absl::Seconds(1)},
      {"eachEndSoonAfterTheLastDoublesTheDelay",
       [&](TestPass& t) {
         after_a_2s_backoff(t);
         ended(t);
       },
       {},
       {"CoordinatorRestarted"},
       3,
       absl::Seconds(4),
       absl::Seconds(4)},
      {"theDelayIsBounded",
       [&](TestPass& t) {
         after_a_2s_backoff(t);
         t.previous.coordinator.restart_after = kNow + absl::Seconds(55);  // waited 60 s
         ended(t);
       },
       {},
       {"CoordinatorRestarted"},
       3,
       absl::Seconds(60),
       absl::Seconds(60)},
      {"aCoordinatorThatStayedUpStartsAgainFromTheFirstDelay",
       [&](TestPass& t) {
         after_a_2s_backoff(t);
         t.previous.coordinator.last_restart_time = kNow - absl::Minutes(11);
         t.previous.coordinator.restart_after = kNow - absl::Minutes(10);
         ended(t);
       },
       {},
       {"CoordinatorRestarted"},
       3,
       absl::Seconds(1),
       absl::Seconds(1)},
      {"theSameEndedPodCountsOnce",
       [&](TestPass& t) {
         ended(t);
         t.previous.coordinator.restarts = 1;
         t.previous.coordinator.last_restart_time = kNow - absl::Seconds(1);
         t.previous.coordinator.restart_after = kNow + absl::Seconds(3);
         t.previous.coordinator.last_failed_pod = "pod-uid-2";
       },
       {},
       {},
       1,
       absl::Seconds(3),
       absl::Seconds(3)},
      {"aGoneCoordinatorIsNotRecreatedBeforeItsBackOffEnds",
       [&](TestPass& t) {
         after_a_2s_backoff(t);
         t.previous.coordinator.restart_after = kNow + absl::Seconds(7);
         t.world.coordinator.reset();
       },
       {},
       {},
       2,
       absl::Seconds(7),
       absl::Seconds(7)},
      {"aGoneCoordinatorIsRecreatedOnceItsBackOffEnded",
       [&](TestPass& t) {
         after_a_2s_backoff(t);
         t.world.coordinator.reset();
       },
       {"j-coordinator"},
       {},
       2,
       absl::Seconds(-3),
       absl::ZeroDuration()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2));
    c.given(t);
    JobPass pass = t.Before("children");
    EXPECT_EQ(EnsureJobChildren(t.Inputs(), pass), Next::kContinue);
    EXPECT_THAT(Names(pass.out.create), ElementsAreArray(c.want_created));
    EXPECT_THAT(Reasons(pass.out.events), ElementsAreArray(c.want_events));
    const CoordinatorStatus& st = pass.out.status.coordinator;
    EXPECT_EQ(st.restarts, c.want_restarts);
    ASSERT_TRUE(st.restart_after.has_value());
    EXPECT_EQ(*st.restart_after - kNow, c.want_backoff);
    EXPECT_EQ(pass.out.requeue_after, c.want_requeue);
    if (!c.want_events.empty()) {
      EXPECT_EQ(st.last_exit_code, 2);
      EXPECT_EQ(st.last_exit_reason, "Error");
      EXPECT_EQ(st.last_exit_message, "cannot listen on 0.0.0.0:8470");
      EXPECT_EQ(st.last_failed_pod, "pod-uid-2");
      EXPECT_THAT(pass.out.events[0].message,
                  ::testing::HasSubstr("exited with code 2 (Error): cannot listen"));
    }
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

// Task pods wait for the coordinator's first answer with the job's token; a wait past 30 s
// is told on the job (a Warning Event) and looked at again, instead of only in the operator's
// log.
TEST(EnsureTaskPods, AnUnansweredCoordinatorHoldsTaskPodsAndIsToldAfterItsGrace) {
  for (const absl::Duration running_for : {absl::Seconds(10), absl::Seconds(45)}) {
    SCOPED_TRACE(running_for);
    TestPass t(TrainingJobBuilder("j").Tasks(2));
    t.world.task_pods.clear();
    t.world.coordinator->created = kNow - running_for;
    t.world.coordinator_unproven = true;
    JobPass pass = t.Before("task pods");
    EnsureTaskPods(t.Inputs(), pass);
    EXPECT_TRUE(pass.out.create.empty());
    if (running_for < absl::Seconds(30)) {
      EXPECT_TRUE(pass.out.events.empty());
      EXPECT_EQ(pass.out.requeue_after, absl::Seconds(30) - running_for);
    } else {
      ASSERT_EQ(pass.out.events.size(), 1u);
      EXPECT_EQ(pass.out.events[0].reason, "CoordinatorUnanswered");
      EXPECT_THAT(pass.out.events[0].message, ::testing::HasSubstr("j-coordinator"));
      EXPECT_EQ(pass.out.requeue_after, absl::Seconds(30));
    }
  }
  // Answered: the pods, and nothing told.
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  t.world.task_pods.clear();
  t.world.coordinator->created = kNow - absl::Seconds(45);
  JobPass pass = t.Before("task pods");
  EnsureTaskPods(t.Inputs(), pass);
  EXPECT_EQ(pass.out.create.size(), 2u);
  EXPECT_TRUE(pass.out.events.empty());
}

}  // namespace
}  // namespace phalanx::op

namespace phalanx::op {
namespace {

// TLS is decided once per job, when its Secret is first written, and never given to a job whose
// Secret an operator without TLS wrote (the operator cannot read the Secret to tell).
TEST(JobUsesTls, Table) {
  struct Case {
    const char* name;
    std::optional<bool> recorded;
    std::optional<bool> coordinator_serves_tls;  // nullopt: no coordinator pod
    bool children_ready_recorded;
    bool operator_tls;
    bool want;
  };
  const Case cases[] = {
      {"aNewJobFollowsTheOperator", {}, {}, false, true, true},
      {"aNewJobWithTlsOffIsCleartext", {}, {}, false, false, false},
      {"theRecordStandsWhateverTheOperatorSays", true, {}, true, false, true},
      {"aCleartextRecordStandsToo", false, {}, true, true, false},
      {"anUnrecordedJobWithACleartextCoordinatorStaysCleartext", {}, false, true, true, false},
      {"anUnrecordedJobWithATlsCoordinatorStaysTls", {}, true, true, false, true},
      {"anUnrecordedJobThatHadChildrenButNoCoordinatorNowIsCleartext", {}, {}, true, true, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TrainingJobStatus status;
    status.coordinator.tls = c.recorded;
    if (c.children_ready_recorded) {
      status.conditions.push_back({.type = kConditionChildrenReady, .status = "True"});
    }
    JobObservation world;
    if (c.coordinator_serves_tls.has_value()) {
      world.coordinator = PodView{};
      world.coordinator->serves_tls = *c.coordinator_serves_tls;
    }
    EXPECT_EQ(JobUsesTls(status, world, c.operator_tls), c.want);
  }
}

// The stage records the decision and every child follows it.
TEST(EnsureJobChildren, RecordsTheTlsDecisionAndTheCoordinatorFollowsIt) {
  for (const bool tls : {false, true}) {
    SCOPED_TRACE(tls);
    TestPass t(builders::TrainingJobBuilder("j").Tasks(2));
    t.world.has_secret = false;
    t.world.coordinator.reset();
    t.placement.tls = tls;
    JobTlsFiles files{"CA", {"CERT", "KEY"}};
    PlanInputs in = t.Inputs();
    in.tls_files = &files;
    JobPass pass = t.Before("children");
    EnsureJobChildren(in, pass);
    EXPECT_EQ(pass.out.status.coordinator.tls, tls);
    std::string secret, coordinator;
    for (const Json& o : pass.out.create) {
      if (kube::StringAt(o, "kind") == "Secret") secret = o.serialize();
      if (kube::MetaString(o, "name") == "j-coordinator" && kube::StringAt(o, "kind") == "Pod") {
        coordinator = o.serialize();
      }
    }
    EXPECT_EQ(secret.find("tls.key") != std::string::npos, tls);
    EXPECT_EQ(coordinator.find("--tls_cert_file") != std::string::npos, tls);
  }
}

}  // namespace
}  // namespace phalanx::op
