// The membership diff as a table: each change to a clique's members, alone and together.
#include "runtime/clique/membership_diff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace phalanx::clique {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Tasks 0 (ranks 0, 1), 1 (rank 2) and 2 (rank 3), all incarnation 0; this task is 0.
CliqueKey Key() { return *CliqueKey::Create("job", {{0, 0, {0, 1}}, {1, 0, {0}}, {2, 0, {0}}}); }

std::map<int, MemberStatus> AllAlive() {
  return {{0, {0, 0, true}}, {1, {1, 0, true}}, {2, {2, 0, true}}};
}

TEST(MembershipDiffTest, NothingChanged) {
  const MembershipDiff d = DiffMembership(Key(), 0, AllAlive());
  EXPECT_TRUE(d.unchanged());
  EXPECT_EQ(d.survivors, Key().members());
  EXPECT_FALSE(d.down || d.restarted || d.self_changed);
}

TEST(MembershipDiffTest, EachChangeAloneAndTogether) {
  std::map<int, MemberStatus> m = AllAlive();
  m.erase(2);           // task 2 left: its rank 3 is excluded
  m[1] = {1, 4, true};  // task 1 restarted as incarnation 4
  const MembershipDiff d = DiffMembership(Key(), 0, m);
  EXPECT_THAT(d.changes, ElementsAre("task 1 restarted (incarnation 0 -> 4)", "task 2 left"));
  EXPECT_THAT(d.excluded_ranks, ElementsAre(3));
  EXPECT_TRUE(d.restarted);
  EXPECT_FALSE(d.down || d.self_changed);
  ASSERT_EQ(d.survivors.size(), 2u);
  EXPECT_EQ(d.survivors[1].incarnation, 4u) << "survivors carry the new incarnation";

  m = AllAlive();
  m[2].alive = false;
  const MembershipDiff down = DiffMembership(Key(), 0, m);
  EXPECT_TRUE(down.down);
  EXPECT_THAT(down.changes, ElementsAre("task 2 is down"));
  EXPECT_THAT(down.excluded_ranks, IsEmpty()) << "down is not gone: it keeps its ranks";
  EXPECT_EQ(down.survivors.size(), 3u);
}

TEST(MembershipDiffTest, ThisTaskChanging) {
  std::map<int, MemberStatus> m = AllAlive();
  m[0] = {0, 1, true};
  EXPECT_TRUE(DiffMembership(Key(), 0, m).self_changed);
  EXPECT_FALSE(DiffMembership(Key(), 1, m).self_changed);
  m.erase(0);
  const MembershipDiff gone = DiffMembership(Key(), 0, m);
  EXPECT_TRUE(gone.self_changed);
  EXPECT_THAT(gone.excluded_ranks, ElementsAre(0, 1));
}

}  // namespace
}  // namespace phalanx::clique
