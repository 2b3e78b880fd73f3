// The reconciler's ledgers. Notices: each open one goes to each coordinator pod until it
// acknowledges it, and again to a new one; a notice for a pod of several ranks names every
// rank. Ports: jobs whose hashes collide still get distinct coordinator ports.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/controller/coordinator_ports.h"
#include "operator/controller/notice_ledger.h"

namespace phalanx::op {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

TEST(NoticeLedgerTest, DueUntilAcknowledgedThenAgainForANewCoordinator) {
  NoticeLedger ledger;
  const std::vector<PreemptionNotice> notices = {{1, kT0, kT0 + absl::Seconds(30)},
                                                 {0, kT0, kT0 + absl::Seconds(20)}};
  NoticeLedger::Due due = ledger.DueFor("ns/j", "coord-a", 2, notices);
  EXPECT_THAT(due.tasks, ElementsAre(2, 3, 0, 1));  // every rank of pods 1 and 0
  EXPECT_EQ(due.deadline, kT0 + absl::Seconds(20));
  EXPECT_EQ(ledger.DueFor("ns/j", "coord-a", 2, notices).tasks.size(), 4u) << "not acked yet";

  ledger.Acknowledge("ns/j", "coord-a", notices);
  EXPECT_THAT(ledger.DueFor("ns/j", "coord-a", 2, notices).tasks, IsEmpty());
  // A restarted coordinator lost its rounds: all of them again.
  EXPECT_EQ(ledger.DueFor("ns/j", "coord-b", 2, notices).tasks.size(), 4u);
  // An acknowledgement from a coordinator that is no longer the job's counts for nothing.
  ledger.Acknowledge("ns/j", "coord-a", notices);
  EXPECT_EQ(ledger.DueFor("ns/j", "coord-b", 2, notices).tasks.size(), 4u);
}

TEST(NoticeLedgerTest, ANoticeThatClosedAndReopensIsNew) {
  NoticeLedger ledger;
  const std::vector<PreemptionNotice> first = {{0, kT0, kT0 + absl::Seconds(30)}};
  ledger.DueFor("ns/j", "c", 1, first);
  ledger.Acknowledge("ns/j", "c", first);
  ledger.DueFor("ns/j", "c", 1, {});  // the preemption ended: forgotten
  EXPECT_THAT(ledger.DueFor("ns/j", "c", 1, first).tasks, ElementsAre(0));
  ledger.Forget("ns/j");
  EXPECT_THAT(ledger.DueFor("ns/j", "c", 1, first).tasks, ElementsAre(0));
}

TEST(CoordinatorPortLedgerTest, DistinctPortsForJobsWhoseHashesCollide) {
  CoordinatorPortLedger ports(30000, 4);  // two slots: 30000 and 30002
  const int a = ports.Assign("ns/a", "uid-a", {});
  const int b = ports.Assign("ns/b", "uid-a", {});  // the same hash slot
  EXPECT_NE(a, b);
  EXPECT_EQ(ports.Assign("ns/a", "uid-a", {}), a) << "a job keeps what it was handed";
  ports.Release("ns/a");
  EXPECT_EQ(ports.Assign("ns/c", "uid-a", {b}), a) << "released, and b's pod holds the other";
  CoordinatorPortLedger kept(30000, 4);
  kept.Keep("ns/d", 30000);  // d's running coordinator pod listens there
  EXPECT_EQ(kept.Assign("ns/e", "uid-e", {}), 30002);
  EXPECT_EQ(kept.Assign("ns/f", "uid-f", {}), kept.Assign("ns/f", "uid-f", {}));
}

}  // namespace
}  // namespace phalanx::op
