// Table tests of the "ttl" and "deadline" stages (lifecycle.h), and the two through the whole
// pipeline: a deadline's failure, then the TTL that deletes the failed job.
#include "operator/controller/lifecycle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/plan_testing.h"

namespace phalanx::op {
namespace {

using namespace builders;  // NOLINT
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ExpireFinishedJob, Table) {
  struct Case {
    std::string name;
    std::optional<absl::Duration> ttl;
    std::string phase;
    std::optional<absl::Duration> finished_ago;  // completionTime = now - this
    bool want_delete;
    absl::Duration want_requeue;  // zero: none asked
  };
  const Case cases[] = {
      {"noTtlKeepsTheJob", std::nullopt, kPhaseSucceeded, absl::Hours(100), false,
       absl::ZeroDuration()},
      {"aRunningJobIsNotExpired", absl::ZeroDuration(), kPhaseRunning, std::nullopt, false,
       absl::ZeroDuration()},
      {"beforeTheTtlLooksAgainWhenItEnds", absl::Seconds(60), kPhaseSucceeded, absl::Seconds(20),
       false, absl::Seconds(40)},
      {"atTheTtlASucceededJobIsDeleted", absl::Seconds(60), kPhaseSucceeded, absl::Seconds(60),
       true, absl::ZeroDuration()},
      {"aFailedJobTooAndZeroMeansAtOnce", absl::ZeroDuration(), kPhaseFailed, absl::ZeroDuration(),
       true, absl::ZeroDuration()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2));
    t.spec.ttl_after_finished = c.ttl;
    t.previous.phase = c.phase;
    if (c.finished_ago.has_value()) t.previous.completion_time = kNow - *c.finished_ago;
    JobPass pass = t.Before("ttl");
    EXPECT_EQ(ExpireFinishedJob(t.Inputs(), pass), Next::kContinue);
    EXPECT_EQ(pass.out.delete_job, c.want_delete);
    EXPECT_EQ(pass.out.requeue_after, c.want_requeue);
    if (c.want_delete) {
      ASSERT_THAT(Reasons(pass.out.events), ElementsAre("TTLExpired"));
      EXPECT_THAT(pass.out.events[0].message, HasSubstr("deleting it and its pods"));
    } else {
      EXPECT_THAT(pass.out.events, IsEmpty());
    }
  }
}

TEST(EnforceActiveDeadline, Table) {
  struct Case {
    std::string name;
    std::optional<absl::Duration> deadline;
    std::string suspended;            // the Suspended condition before the pass: "status/reason"
    absl::Duration since_transition;  // its lastTransitionTime = now - this
    Next want_next;
    std::string want_phase;
    absl::Duration want_requeue;
  };
  const Case cases[] = {
      {"noDeadlineNeverFails", std::nullopt, "False/NotSuspended", absl::Hours(1000),
       Next::kContinue, kPhaseRunning, absl::ZeroDuration()},
      {"beforeTheDeadlineLooksAgainThen", absl::Seconds(100), "False/NotSuspended",
       absl::Seconds(30), Next::kContinue, kPhaseRunning, absl::Seconds(70)},
      {"atTheDeadlineTheJobFails", absl::Seconds(100), "False/NotSuspended", absl::Seconds(100),
       Next::kDone, kPhaseFailed, absl::ZeroDuration()},
      // Active since the resume, not since creation: the suspended time does not count.
      {"aResumeStartsTheClockAgain", absl::Seconds(100), "False/Resumed", absl::Seconds(10),
       Next::kContinue, kPhaseRunning, absl::Seconds(90)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestPass t(TrainingJobBuilder("j").Tasks(2));
    t.spec.active_deadline = c.deadline;
    t.previous.phase = kPhaseRunning;
    t.previous.tasks.resize(2);
    const size_t slash = c.suspended.find('/');
    t.previous.conditions.push_back({"Suspended", c.suspended.substr(0, slash),
                                     c.suspended.substr(slash + 1), "", kNow - c.since_transition,
                                     1});
    JobPass pass = t.Before("deadline");
    EXPECT_EQ(EnforceActiveDeadline(t.Inputs(), pass), c.want_next);
    EXPECT_EQ(pass.out.status.phase, c.want_phase);
    EXPECT_EQ(pass.out.requeue_after, c.want_requeue);
    if (c.want_phase == kPhaseFailed) {
      EXPECT_EQ(ConditionOf(pass.out.status, "Failed"), "True/DeadlineExceeded");
      EXPECT_THAT(Reasons(pass.out.events), ElementsAre("DeadlineExceeded"));
      EXPECT_THAT(pass.out.events[0].message,
                  HasSubstr("active for 100 s, past spec.activeDeadlineSeconds (100 s)"));
      EXPECT_THAT(Names(pass.out.create), IsEmpty());
      EXPECT_FALSE(pass.out.delete_pods.empty()) << "its pods are deleted";
    }
  }
}

// A suspended job's clock is stopped: "suspend" settles the pass before "deadline" runs.
TEST(EnforceActiveDeadline, ASuspendedJobDoesNotFail) {
  TestPass t(TrainingJobBuilder("j").Tasks(2).Suspend());
  t.spec.active_deadline = absl::Seconds(1);
  t.previous.phase = kPhaseSuspended;
  t.previous.conditions.push_back(
      {"Suspended", "True", "Suspended", "", kNow - absl::Hours(10), 1});
  const ReconcilePlan plan = PlanReconcile(t.Inputs());
  EXPECT_EQ(plan.status.phase, kPhaseSuspended);
}

// The two through every stage: the deadline fails the job, and its TTL then deletes it.
TEST(Lifecycle, ADeadlinesFailureThenTheTtlDeletesTheJob) {
  TestPass t(TrainingJobBuilder("j").Tasks(2));
  t.spec.active_deadline = absl::Seconds(60);
  t.spec.ttl_after_finished = absl::Seconds(30);
  t.previous.phase = kPhaseRunning;
  t.previous.tasks.resize(2);
  t.previous.conditions.push_back(
      {"Suspended", "False", "NotSuspended", "", kNow - absl::Seconds(60), 1});
  const ReconcilePlan failed = PlanReconcile(t.Inputs());
  ASSERT_EQ(failed.status.phase, kPhaseFailed);
  EXPECT_FALSE(failed.delete_job);
  EXPECT_EQ(failed.requeue_after, absl::ZeroDuration()) << "nothing to wait for yet";

  t.previous = failed.status;
  t.now = kNow + absl::Seconds(10);
  const ReconcilePlan kept = PlanReconcile(t.Inputs());
  EXPECT_FALSE(kept.delete_job);
  EXPECT_EQ(kept.requeue_after, absl::Seconds(20));

  t.now = kNow + absl::Seconds(30);
  const ReconcilePlan expired = PlanReconcile(t.Inputs());
  EXPECT_TRUE(expired.delete_job);
  EXPECT_THAT(Reasons(expired.events), ElementsAre("TTLExpired"));
}

}  // namespace
}  // namespace phalanx::op
