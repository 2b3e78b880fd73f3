// Table tests of the Blocked stage (blocked.h): what a refused child or an invalid spec does to a
// job's status and Events, and when the planner keeps a job Blocked.
#include "operator/controller/blocked.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/api/codec.h"

namespace phalanx::op {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kBlockedAt = absl::FromUnixSeconds(1'800'000'000);

// The message kube-apiserver v1.26 sends when PodSecurity "restricted" refuses a pod (403).
const absl::Status kForbidden = absl::PermissionDeniedError(
    "pods \"j-task-0-0\" is forbidden: violates PodSecurity \"restricted:latest\": "
    "seccompProfile");
const absl::Status kInvalid = absl::InvalidArgumentError(
    "Pod \"j-task-0-0\" is invalid: spec.containers[0].image: Required value");
const absl::Status kDown = absl::UnavailableError("POST /api/v1/namespaces/ns/pods: 503");

TrainingJobStatus Status(const std::string& phase) {
  TrainingJobStatus s;
  s.phase = phase;
  s.observed_generation = 2;
  return s;
}

std::string ReadyOf(const TrainingJobStatus& s) {
  std::optional<Condition> c = FindCondition(s.conditions, kConditionChildrenReady);
  return c.has_value() ? c->status + "/" + c->reason : "none";
}

TEST(IsPermanentFailure, InvalidAndForbiddenArePermanentServerTroubleIsNot) {
  EXPECT_TRUE(IsPermanentFailure(kForbidden));
  EXPECT_TRUE(IsPermanentFailure(kInvalid));
  EXPECT_TRUE(IsPermanentFailure(absl::UnauthenticatedError("401")));
  EXPECT_FALSE(IsPermanentFailure(kDown));
  EXPECT_FALSE(IsPermanentFailure(absl::ResourceExhaustedError("429")));
  EXPECT_FALSE(IsPermanentFailure(absl::AbortedError("409")));
  EXPECT_FALSE(IsPermanentFailure(absl::DeadlineExceededError("timeout")));
}

TEST(RecordChildOutcome, Table) {
  struct Case {
    std::string name;
    TrainingJobStatus written;
    std::vector<ChildFailure> failures;
    bool acted;
    std::string want_phase;
    std::string want_ready;
    std::vector<std::string> want_events;  // "reason: message"
  };
  TrainingJobStatus was_refused = Status(kPhaseBlocked);
  SetCondition(was_refused.conditions,
               {kConditionChildrenReady, "False", kReasonFailedCreate, "x", kBlockedAt, 2},
               kBlockedAt);
  const std::vector<Case> cases = {
      {"nothingToDo", Status(kPhaseRunning), {}, false, kPhaseRunning, "none", {}},
      {"created", Status(kPhasePending), {}, true, kPhasePending, "True/ChildrenCreated", {}},
      {"createdAfterARefusal", was_refused, {}, true, kPhaseBlocked, "True/ChildrenCreated", {}},
      {"forbiddenPodBlocks",
       Status(kPhasePending),
       {{false, "Pod", "j-task-0-0", kForbidden}},
       true,
       kPhaseBlocked,
       "False/FailedCreate",
       {"FailedCreate: creating Pod j-task-0-0: pods \"j-task-0-0\" is forbidden: violates "
        "PodSecurity \"restricted:latest\": seccompProfile"}},
      {"severalCountedInOneEvent",
       Status(kPhaseRestarting),
       {{false, "Pod", "j-task-0-0", kInvalid}, {false, "Pod", "j-task-1-0", kInvalid}},
       true,
       kPhaseBlocked,
       "False/FailedCreate",
       {"FailedCreate: creating Pod j-task-0-0: Pod \"j-task-0-0\" is invalid: "
        "spec.containers[0].image: Required value (and 1 more)"}},
      {"aSquatterIsAConflictThatKeepsThePhase",
       Status(kPhaseStarting),
       {{false, "Pod", "j-task-1-0",
         absl::AlreadyExistsError("j-task-1-0 already exists and this TrainingJob does not "
                                  "control it (it has no controller); it is not adopted")}},
       true,
       kPhaseStarting,
       "False/ChildConflict",
       {"ChildConflict: creating Pod j-task-1-0: j-task-1-0 already exists and this TrainingJob "
        "does not control it (it has no controller); it is not adopted"}},
      {"aSquattedTokenSecretBlocksTheJob",
       Status(kPhaseRunning),
       {{false, "Secret", "j-token",
         absl::AlreadyExistsError("its coordinator refused the token")}},
       true,
       kPhaseBlocked,
       "False/ChildConflict",
       {"ChildConflict: creating Secret j-token: its coordinator refused the token"}},
      {"transientKeepsThePhase",
       Status(kPhaseStarting),
       {{false, "Service", "j-tasks", kDown}},
       true,
       kPhaseStarting,
       "False/FailedCreate",
       {"FailedCreate: creating Service j-tasks: POST /api/v1/namespaces/ns/pods: 503"}},
      {"failedDelete",
       Status(kPhaseRunning),
       {{true, "Pod", "j-task-0-0", kForbidden}},
       true,
       kPhaseBlocked,
       "False/FailedDelete",
       {"FailedDelete: deleting Pod j-task-0-0: pods \"j-task-0-0\" is forbidden: violates "
        "PodSecurity \"restricted:latest\": seccompProfile"}},
      {"endedJobStaysEnded",
       Status(kPhaseSucceeded),
       {{true, "Pod", "j-task-0-0", kForbidden}},
       true,
       kPhaseSucceeded,
       "False/FailedDelete",
       {"FailedDelete: deleting Pod j-task-0-0: pods \"j-task-0-0\" is forbidden: violates "
        "PodSecurity \"restricted:latest\": seccompProfile"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    StageResult r = RecordChildOutcome(c.written, c.failures, c.acted, kBlockedAt);
    EXPECT_EQ(r.status.phase, c.want_phase);
    EXPECT_EQ(ReadyOf(r.status), c.want_ready);
    std::vector<std::string> events;
    for (const EventNote& e : r.events) {
      EXPECT_TRUE(e.warning);
      events.push_back(e.reason + ": " + e.message);
    }
    EXPECT_EQ(events, c.want_events);
    if (!c.failures.empty()) {
      // The condition carries the API server's own words.
      EXPECT_THAT(FindCondition(r.status.conditions, kConditionChildrenReady)->message,
                  ::testing::HasSubstr(std::string(c.failures.front().status.message())));
    }
  }
}

TEST(RecordChildOutcome, TheSameRefusalAgainChangesNothing) {
  const std::vector<ChildFailure> refused = {{false, "Pod", "j-task-0-0", kForbidden}};
  StageResult first = RecordChildOutcome(Status(kPhasePending), refused, true, kBlockedAt);
  StageResult again =
      RecordChildOutcome(first.status, refused, true, kBlockedAt + absl::Seconds(30));
  EXPECT_EQ(again.status, first.status);  // no status write, so no watch event, no hot loop
}

TEST(InvalidSpecStatus, BlocksWithTheProblemsAndOneEvent) {
  StageResult r =
      InvalidSpecStatus(Status(kPhasePending), 5,
                        {"spec.template.spec.containers[0].image: required", "b"}, kBlockedAt);
  EXPECT_EQ(r.status.phase, kPhaseBlocked);
  EXPECT_EQ(r.status.observed_generation, 5);
  std::optional<Condition> c = FindCondition(r.status.conditions, kConditionInvalidSpec);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->status, "True");
  EXPECT_EQ(c->message, "spec.template.spec.containers[0].image: required; b");
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].reason, "InvalidSpec");
  // Unchanged on the next pass: no second Event.
  EXPECT_THAT(
      InvalidSpecStatus(r.status, 5, {"spec.template.spec.containers[0].image: required", "b"},
                        kBlockedAt + absl::Seconds(10))
          .events,
      IsEmpty());
  // A job that already ended keeps its phase.
  EXPECT_EQ(InvalidSpecStatus(Status(kPhaseFailed), 5, {"x"}, kBlockedAt).status.phase,
            kPhaseFailed);
}

TEST(StaysBlocked, OnlyWhileTheRefusedChildIsStillToCreate) {
  TrainingJobStatus blocked = Status(kPhaseBlocked);
  SetCondition(blocked.conditions,
               {kConditionChildrenReady, "False", kReasonFailedCreate, "x", kBlockedAt, 2},
               kBlockedAt);
  EXPECT_TRUE(StaysBlocked(blocked, true));
  EXPECT_FALSE(StaysBlocked(blocked, false));
  TrainingJobStatus invalid_spec_fixed = Status(kPhaseBlocked);  // no ChildrenReady=False
  EXPECT_FALSE(StaysBlocked(invalid_spec_fixed, true));
  TrainingJobStatus transient = blocked;
  transient.phase = kPhasePending;
  EXPECT_FALSE(StaysBlocked(transient, true));
}

}  // namespace
}  // namespace phalanx::op
