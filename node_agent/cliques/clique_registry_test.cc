// CliqueRegistry with a FakeClock: reports expire after the TTL unless refreshed, and a
// (job, task) belongs to the key that reported it until that claim expires, its holder forgets
// it, or the holder's process has exited.
#include "node_agent/cliques/clique_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "node_agent/cliques/clique_socket.h"

namespace phalanx::agent {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::StartsWith;

LocalClique Clique(const std::string& job, int task, absl::Time now, base::Incarnation inc = 0) {
  return LocalClique{job, task, inc, "c", "READY", {task}, now};
}

class CliqueRegistryTest : public ::testing::Test {
 protected:
  CliqueRegistry MakeRegistry() {
    CliqueRegistryOptions options;
    options.ttl = absl::Seconds(30);
    options.process_alive = [this](int pid) { return alive_.count(pid) > 0; };
    return CliqueRegistry(options);
  }

  testing::FakeClock clock_;
  std::set<int> alive_;
};

TEST_F(CliqueRegistryTest, AReportNotRefreshedWithinTheTtlIsDropped) {
  CliqueRegistry registry = MakeRegistry();
  const absl::Time start = clock_.Now();
  ASSERT_THAT(registry.Report(Clique("j", 0, start), {"k"}), IsOk());
  ASSERT_THAT(registry.Report(Clique("j", 1, start), {"k"}), IsOk());
  clock_.Advance(absl::Seconds(20));
  ASSERT_THAT(registry.Report(Clique("j", 1, clock_.Now()), {"k"}), IsOk());  // task 1 refreshes
  clock_.Advance(absl::Seconds(11));  // task 0's report is 31 s old, task 1's 11 s
  EXPECT_EQ(registry.Expire(clock_.Now()), 1);
  ASSERT_THAT(registry.List(), SizeIs(1));
  EXPECT_EQ(registry.List()[0].task, 1);
  EXPECT_EQ(registry.CountByState(), (std::map<std::string, int>{{"READY", 1}}));
  clock_.Advance(absl::Seconds(20));
  EXPECT_EQ(registry.Expire(clock_.Now()), 1);
  EXPECT_THAT(registry.List(), IsEmpty());
}

TEST_F(CliqueRegistryTest, AnExpiredReportDisappearsFromTheSocketsList) {
  CliqueRegistry registry = MakeRegistry();
  ASSERT_EQ(
      HandleCliqueRequest(
          registry, "REPORT job=j task=0 inc=0 clique=c state=READY devices=0 key=k", clock_.Now()),
      "OK");
  EXPECT_THAT(HandleCliqueRequest(registry, "LIST key=k", clock_.Now()), HasSubstr("job=j"));
  clock_.Advance(absl::Seconds(30));
  registry.Expire(clock_.Now());
  EXPECT_EQ(HandleCliqueRequest(registry, "LIST key=k", clock_.Now()), "END");
}

TEST_F(CliqueRegistryTest, AnotherKeyCanNeitherReadNorOverwriteNorForgetATasksEntries) {
  CliqueRegistry registry = MakeRegistry();
  alive_.insert(100);
  ASSERT_THAT(registry.Report(Clique("j", 0, clock_.Now()), {"owner", 100}), IsOk());
  EXPECT_THAT(registry.Report(Clique("j", 0, clock_.Now(), 7), {"intruder", 200}),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("job j task 0")));
  EXPECT_THAT(registry.Forget("j", 0, {"intruder", 200}, clock_.Now()),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(registry.ListFor("intruder"), IsEmpty());
  EXPECT_THAT(registry.ListFor(""), IsEmpty());
  ASSERT_THAT(registry.ListFor("owner"), SizeIs(1));
  EXPECT_EQ(registry.ListFor("owner")[0].incarnation, 0u);  // not overwritten
  // Its own key still works, and a key sees only its own tasks.
  ASSERT_THAT(registry.Report(Clique("other-job", 0, clock_.Now()), {"intruder", 200}), IsOk());
  EXPECT_THAT(registry.ListFor("owner"), SizeIs(1));
  EXPECT_THAT(registry.ListFor("intruder"), SizeIs(1));
  EXPECT_THAT(registry.Forget("j", 0, {"owner", 100}, clock_.Now()), IsOk());
  EXPECT_THAT(registry.ListFor("owner"), IsEmpty());
}

TEST_F(CliqueRegistryTest, AClaimIsReleasedWhenItsHolderExitsOrItExpires) {
  CliqueRegistry registry = MakeRegistry();
  alive_.insert(100);
  ASSERT_THAT(registry.Report(Clique("j", 0, clock_.Now()), {"inc0", 100}), IsOk());
  // The task restarts with a new credential: refused while the old process lives...
  EXPECT_THAT(registry.Report(Clique("j", 0, clock_.Now(), 1), {"inc1", 101}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // ...taken over at once when it has exited; the old holder's entries go with its claim.
  alive_.erase(100);
  ASSERT_THAT(registry.Report(Clique("j", 0, clock_.Now(), 1), {"inc1", 101}), IsOk());
  EXPECT_THAT(registry.ListFor("inc0"), IsEmpty());
  ASSERT_THAT(registry.ListFor("inc1"), SizeIs(1));
  // A holder whose pid the agent cannot see (0) keeps its claim until the TTL.
  ASSERT_THAT(registry.Report(Clique("j", 1, clock_.Now()), {"hidden", 0}), IsOk());
  clock_.Advance(absl::Seconds(29));
  EXPECT_THAT(registry.Report(Clique("j", 1, clock_.Now()), {"next", 0}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(registry.Report(Clique("j", 1, clock_.Now()), {"next", 0}), IsOk());
}

TEST_F(CliqueRegistryTest, APendingAbortGoesWithAnExpiredClaim) {
  CliqueRegistry registry = MakeRegistry();
  ASSERT_THAT(registry.Report(Clique("j", 0, clock_.Now()), {"k"}), IsOk());
  EXPECT_EQ(registry.RequestAbortForDevice(0, "xid 79"), 1);
  clock_.Advance(absl::Seconds(31));
  registry.Expire(clock_.Now());
  EXPECT_EQ(registry.TakeAbortRequest("j", 0), "");
}

}  // namespace
}  // namespace phalanx::agent
