#include "common/kube/leader_election.h"

#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/kube/forwarding_client_test_util.h"
#include "common/kube/object_meta.h"
#include "common/kube/testing/fake_client.h"
#include "common/kube/testing/object_store.h"
#include "common/testing/eventually.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::kube {
namespace {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

LeaderElector::Options OptionsFor(const std::string& identity) {
  return {.lease_name = "phalanx-operator",
          .lease_namespace = "phalanx-system",
          .identity = identity,
          .lease_duration = absl::Seconds(15),
          .renew_deadline = absl::Seconds(10),
          .retry_period = absl::Seconds(2)};
}

class LeaderElectionTest : public ::testing::Test {
 protected:
  std::unique_ptr<LeaderElector> Elector(const std::string& identity, Client* client = nullptr) {
    auto elector = LeaderElector::Create(client ? *client : client_, clock_, OptionsFor(identity));
    EXPECT_THAT(elector, IsOk());
    return std::move(*elector);
  }
  LeaderElectionRecord Lease() {
    auto lease = client_.Get(kLeaseResource, "phalanx-system", "phalanx-operator");
    EXPECT_THAT(lease, IsOk());
    return LeaderElectionRecord::FromLease(*lease);
  }

  testing::FakeClock clock_;
  kube::fake::ObjectStore store_{clock_};
  kube::fake::FakeClient client_{store_};
};

TEST_F(LeaderElectionTest, Validate_RejectsInconsistentDurations) {
  struct Case {
    const char* name;
    void (*mutate)(LeaderElector::Options&);
    const char* message;
  };
  const Case cases[] = {
      {"no identity", [](LeaderElector::Options& o) { o.identity = ""; }, "identity"},
      {"no lease name", [](LeaderElector::Options& o) { o.lease_name = ""; }, "lease name"},
      {"renew >= lease", [](LeaderElector::Options& o) { o.renew_deadline = o.lease_duration; },
       "greater than renew_deadline"},
      {"retry too long", [](LeaderElector::Options& o) { o.retry_period = absl::Seconds(9); },
       "1.2 × retry_period"},
  };
  EXPECT_THAT(LeaderElector::Validate(OptionsFor("a")), IsOk());
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    LeaderElector::Options o = OptionsFor("a");
    c.mutate(o);
    EXPECT_THAT(LeaderElector::Validate(o),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
}

TEST_F(LeaderElectionTest, FirstCandidate_CreatesTheLeaseAndLeads) {
  auto a = Elector("a");
  ASSERT_THAT(a->TryAcquireOrRenew(), IsOk());
  EXPECT_TRUE(a->IsLeader());
  const LeaderElectionRecord lease = Lease();
  EXPECT_EQ(lease.holder_identity, "a");
  EXPECT_EQ(lease.lease_duration_seconds, 15);
  EXPECT_EQ(lease.lease_transitions, 0);
  EXPECT_EQ(lease.renew_time, clock_.Now());
  auto raw = client_.Get(kLeaseResource, "phalanx-system", "phalanx-operator");
  ASSERT_THAT(raw, IsOk());
  EXPECT_EQ(StringAt(*raw, "spec.renewTime"), "2023-11-14T22:13:20.000000Z") << "MicroTime";
}

TEST_F(LeaderElectionTest, TheLeaseItCreates_CarriesTheOwnerReferences) {
  LeaderElector::Options options = OptionsFor("a");
  options.owner_references.push_back(
      {.api_version = "v1", .kind = "ServiceAccount", .name = "phalanx-operator", .uid = "u-1"});
  auto a = LeaderElector::Create(client_, clock_, options);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT((*a)->TryAcquireOrRenew(), IsOk());
  auto raw = client_.Get(kLeaseResource, "phalanx-system", "phalanx-operator");
  ASSERT_THAT(raw, IsOk());
  const std::vector<OwnerReference> owners = OwnerReferencesOf(*raw);
  ASSERT_EQ(owners.size(), 1u);
  EXPECT_EQ(owners[0].kind, "ServiceAccount");
  EXPECT_EQ(owners[0].uid, "u-1");
}

TEST_F(LeaderElectionTest, SecondCandidate_WaitsForExpiry_ThenTakesOver) {
  auto a = Elector("a");
  auto b = Elector("b");
  ASSERT_THAT(a->TryAcquireOrRenew(), IsOk());
  ASSERT_TRUE(*a->TryAcquireOrRenew());

  auto b_try = b->TryAcquireOrRenew();
  ASSERT_THAT(b_try, IsOk());
  EXPECT_FALSE(*b_try) << "the lease is fresh";
  EXPECT_FALSE(b->IsLeader());
  EXPECT_EQ(b->ObservedHolder(), "a");

  // a renews: b's expiry clock restarts from when it saw the change.
  clock_.Advance(absl::Seconds(10));
  ASSERT_TRUE(*a->TryAcquireOrRenew());
  EXPECT_FALSE(*b->TryAcquireOrRenew());
  clock_.Advance(absl::Seconds(10));
  EXPECT_FALSE(*b->TryAcquireOrRenew()) << "10 s since b saw a's renewal, lease is 15 s";

  // a stops renewing; 15 s after b last saw a change, b takes over.
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(*b->TryAcquireOrRenew());
  EXPECT_TRUE(b->IsLeader());
  const LeaderElectionRecord lease = Lease();
  EXPECT_EQ(lease.holder_identity, "b");
  EXPECT_EQ(lease.lease_transitions, 1);
  EXPECT_EQ(lease.acquire_time, clock_.Now());

  // a comes back: it sees b's fresh lease and does not lead.
  EXPECT_FALSE(*a->TryAcquireOrRenew());
  EXPECT_FALSE(a->IsLeader());
}

TEST_F(LeaderElectionTest, Renewal_KeepsAcquireTimeAndTransitions) {
  auto a = Elector("a");
  ASSERT_TRUE(*a->TryAcquireOrRenew());
  const absl::Time acquired = clock_.Now();
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(*a->TryAcquireOrRenew());
  const LeaderElectionRecord lease = Lease();
  EXPECT_EQ(lease.acquire_time, acquired);
  EXPECT_EQ(lease.renew_time, clock_.Now());
  EXPECT_EQ(lease.lease_transitions, 0);
}

TEST_F(LeaderElectionTest, Release_LetsASuccessorTakeOverAtOnce) {
  auto a = Elector("a");
  auto b = Elector("b");
  ASSERT_TRUE(*a->TryAcquireOrRenew());
  EXPECT_FALSE(*b->TryAcquireOrRenew());
  ASSERT_THAT(a->Release(), IsOk());
  EXPECT_FALSE(a->IsLeader());
  EXPECT_EQ(Lease().holder_identity, "");
  EXPECT_EQ(Lease().lease_transitions, 0) << "release keeps the transitions count";

  ASSERT_TRUE(*b->TryAcquireOrRenew()) << "no waiting for expiry";
  EXPECT_EQ(Lease().holder_identity, "b");
  EXPECT_EQ(Lease().lease_transitions, 1);
  EXPECT_THAT(a->Release(), IsOk()) << "not holding: nothing to do";
  EXPECT_EQ(Lease().holder_identity, "b");
}

TEST_F(LeaderElectionTest, Conflict_MeansAnotherCandidateWon) {
  ForwardingClient racy(client_);
  auto a = Elector("a");
  auto b = Elector("b", &racy);
  ASSERT_THAT(a->Release(), IsOk());
  ASSERT_TRUE(*b->TryAcquireOrRenew());
  ASSERT_THAT(b->Release(), IsOk());
  // The lease is free; b reads it, but a writes first: b's write is a 409.
  racy.BeforeNextUpdate([&] { ASSERT_TRUE(*a->TryAcquireOrRenew()); });
  auto b_try = b->TryAcquireOrRenew();
  ASSERT_THAT(b_try, IsOk());
  EXPECT_FALSE(*b_try);
  EXPECT_FALSE(b->IsLeader());
  EXPECT_TRUE(a->IsLeader());
  EXPECT_EQ(Lease().holder_identity, "a");
}

TEST_F(LeaderElectionTest, ApiErrors_AreReturned_AndDoNotMakeALeader) {
  auto a = Elector("a");
  client_.FailNext(1, absl::UnavailableError("injected 500"));
  EXPECT_THAT(a->TryAcquireOrRenew(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(a->IsLeader());
  EXPECT_TRUE(*a->TryAcquireOrRenew());
}

TEST_F(LeaderElectionTest, IsLeader_LapsesAfterRenewDeadlineWithoutRenewal) {
  auto a = Elector("a");
  ASSERT_TRUE(*a->TryAcquireOrRenew());
  clock_.Advance(absl::Seconds(10));
  EXPECT_FALSE(a->IsLeader()) << "a successor may be about to take over";
}

// Two electors running their loops over one API server: one leads; when it stops, the other
// takes over (through the release, well before the lease would expire).
TEST(LeaderElectionRunTest, TwoElectors_HandOverOnStop) {
  kube::fake::ObjectStore store(base::RealClock::Get());
  kube::fake::FakeClient client(store);
  auto options = [](const std::string& identity) {
    LeaderElector::Options o = OptionsFor(identity);
    o.lease_duration = absl::Seconds(20);
    o.renew_deadline = absl::Seconds(15);
    o.retry_period = absl::Milliseconds(50);
    return o;
  };
  std::atomic<int> a_started{0}, a_stopped{0}, b_started{0}, b_stopped{0};
  auto a = LeaderElector::Create(client, base::RealClock::Get(), options("a"));
  auto b = LeaderElector::Create(client, base::RealClock::Get(), options("b"));
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  (*a)->Run([&] { a_started++; }, [&] { a_stopped++; });
  ASSERT_TRUE(Eventually([&] { return (*a)->IsLeader(); }, absl::Seconds(30)));
  (*b)->Run([&] { b_started++; }, [&] { b_stopped++; });
  // b has finished a candidate round: it read the lease, saw a holding it unexpired, and
  // decided (under the lock that records what it saw) not to take it.
  ASSERT_TRUE(Eventually([&] { return (*b)->ObservedHolder() == "a"; }, absl::Seconds(30)));
  EXPECT_FALSE((*b)->IsLeader());
  EXPECT_EQ(b_started.load(), 0);

  (*a)->Stop();
  EXPECT_EQ(a_started.load(), 1);
  EXPECT_EQ(a_stopped.load(), 1);
  EXPECT_FALSE((*a)->IsLeader());
  // The lease is 20 s; b leads well before that only because a released it.
  ASSERT_TRUE(Eventually([&] { return (*b)->IsLeader(); }, absl::Seconds(10)));
  EXPECT_EQ(b_started.load(), 1);
  (*b)->Stop();
  EXPECT_EQ(b_stopped.load(), 1);
  auto lease = client.Get(kLeaseResource, "phalanx-system", "phalanx-operator");
  ASSERT_THAT(lease, IsOk());
  EXPECT_EQ(LeaderElectionRecord::FromLease(*lease).lease_transitions, 1)
      << "one hand-over, a → b; releases do not count";
}

// A leader that cannot renew (API down) past renew_deadline steps down.
TEST(LeaderElectionRunTest, Leader_StepsDownWhenRenewalsFailPastTheDeadline) {
  kube::fake::ObjectStore store(base::RealClock::Get());
  kube::fake::FakeClient client(store);
  LeaderElector::Options o = OptionsFor("a");
  o.lease_duration = absl::Seconds(2);
  o.renew_deadline = absl::Milliseconds(500);
  o.retry_period = absl::Milliseconds(50);
  auto a = LeaderElector::Create(client, base::RealClock::Get(), o);
  ASSERT_THAT(a, IsOk());
  std::atomic<int> started{0}, stopped{0};
  (*a)->Run([&] { started++; }, [&] { stopped++; });
  ASSERT_TRUE(Eventually([&] { return started.load() == 1; }, absl::Seconds(30)));
  client.FailNext(1'000'000, absl::UnavailableError("injected 500"));
  ASSERT_TRUE(Eventually([&] { return stopped.load() == 1; }, absl::Seconds(30)));
  EXPECT_FALSE((*a)->IsLeader());
  client.FailNext(0, absl::OkStatus());
  // The API is back and the lease still names a: it leads again.
  EXPECT_TRUE(Eventually([&] { return started.load() == 2; }, absl::Seconds(30)));
  (*a)->Stop();
  EXPECT_EQ(stopped.load(), 2);
}

}  // namespace
}  // namespace phalanx::kube
