#include "common/auth/credentials.h"

#include <gtest/gtest.h>

#include <limits>

#include "common/testing/status_matchers.h"

namespace phalanx::auth {
namespace {

using ::phalanx::testing::StatusIs;

TEST(Credentials, HmacSha256_MatchesRfc4231Case2) {
  EXPECT_EQ(HmacSha256Hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Credentials, JobToken_DependsOnEveryPartOfTheJobsIdentity) {
  const std::string t = JobToken("key", "ns", "job", "uid-1");
  EXPECT_EQ(t, JobToken("key", "ns", "job", "uid-1"));
  EXPECT_NE(t, JobToken("key2", "ns", "job", "uid-1"));
  EXPECT_NE(t, JobToken("key", "ns2", "job", "uid-1"));
  EXPECT_NE(t, JobToken("key", "ns", "job2", "uid-1"));
  EXPECT_NE(t, JobToken("key", "ns", "job", "uid-2"));  // a re-created job gets a new token
}

TEST(Credentials, Authenticate_JobTokenIsAdminAndTaskCredentialIsItsTask) {
  const std::string job = JobToken("key", "ns", "job", "uid");
  absl::StatusOr<Principal> admin = Authenticate(job, job);
  ASSERT_TRUE(admin.ok());
  EXPECT_TRUE(admin->admin());
  absl::StatusOr<Principal> task3 = Authenticate(job, TaskCredential(job, 3));
  ASSERT_TRUE(task3.ok());
  EXPECT_EQ(task3->task_id, 3);
}

TEST(Credentials, Authenticate_RefusesForgedAndForeignCredentials) {
  const std::string job = JobToken("key", "ns", "job", "uid");
  const std::string other_job = JobToken("key", "ns", "job", "uid-other");
  std::string cred = TaskCredential(job, 3);
  const std::string relabelled = "task.4" + cred.substr(6);  // task 3's MAC claiming task 4
  for (const std::string& bad :
       {std::string(), std::string("task."), std::string("task.3."), relabelled,
        TaskCredential(other_job, 3), std::string("task.-1.00"), other_job, job + "x"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(Authenticate(job, bad).status(), StatusIs(absl::StatusCode::kUnauthenticated));
  }
}

TEST(Credentials, ABoundTaskCredential_NamesItsIncarnations_AndCannotBeStretched) {
  const std::string job = JobToken("key", "ns", "job", "uid");
  absl::StatusOr<Principal> bound = Authenticate(job, TaskCredential(job, 3, 7, 7));
  ASSERT_TRUE(bound.ok());
  EXPECT_EQ(bound->task_id, 3);
  EXPECT_EQ(bound->min_incarnation, 7);
  EXPECT_EQ(bound->max_incarnation, 7);
  absl::StatusOr<Principal> range = Authenticate(job, TaskCredential(job, 3, 7000, 7999));
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->min_incarnation, 7000);
  EXPECT_EQ(range->max_incarnation, 7999);
  // The unbound (v1) credential of operators before ADR 0006 still covers every incarnation.
  absl::StatusOr<Principal> unbound = Authenticate(job, TaskCredential(job, 3));
  ASSERT_TRUE(unbound.ok());
  EXPECT_EQ(unbound->min_incarnation, 0);
  EXPECT_EQ(unbound->max_incarnation, std::numeric_limits<int64_t>::max());
  // Incarnation 7's MAC relabelled to claim 7-9 or 8-8, or task 4, is refused; so are
  // malformed ranges.
  const std::string mac = TaskCredential(job, 3, 7, 7).substr(std::string("task.3.7-7.").size());
  for (const std::string& bad :
       {"task.3.7-9." + mac, "task.3.8-8." + mac, "task.4.7-7." + mac, "task.3.-7-7." + mac,
        "task.3.9-7." + TaskCredential(job, 3, 9, 7).substr(11), std::string("task.3.7-7."),
        "task.3.7-." + mac, TaskCredential(JobToken("key", "ns", "job", "uid2"), 3, 7, 7)}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(Authenticate(job, bad).status(), StatusIs(absl::StatusCode::kUnauthenticated));
  }
}

TEST(Credentials, Authenticate_SpareCredentialIsNoTaskAndCannotPassAsOne) {
  const std::string job = JobToken("key", "ns", "job", "uid");
  absl::StatusOr<Principal> spare = Authenticate(job, SpareCredential(job, 1));
  ASSERT_TRUE(spare.ok());
  EXPECT_TRUE(spare->is_spare());
  EXPECT_EQ(spare->spare, 1);
  EXPECT_FALSE(spare->admin());
  EXPECT_EQ(spare->task_id, Principal::kNoTask);
  // A spare's MAC is not a task's: "task.1.<spare MAC>" and the other way round are refused.
  const std::string spare_mac = SpareCredential(job, 1).substr(std::string("spare.1.").size());
  const std::string task_mac = TaskCredential(job, 1).substr(std::string("task.1.").size());
  const std::string other_job = JobToken("key", "ns", "job", "uid-other");
  for (const std::string& bad : {"task.1." + spare_mac, "spare.1." + task_mac,
                                 "spare.2." + spare_mac, SpareCredential(other_job, 1)}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(Authenticate(job, bad).status(), StatusIs(absl::StatusCode::kUnauthenticated));
  }
}

}  // namespace
}  // namespace phalanx::auth
