#include "runtime/coordination/participants.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::coord {
namespace {

using ::testing::ElementsAre;

std::vector<int> Ids(const Participants& p) {
  std::vector<int> ids;
  p.ForEach([&](int id) { ids.push_back(id); });
  return ids;
}

TEST(ParticipantsTest, AllIsEveryTaskOfTheJobWithoutAList) {
  const Participants all = Participants::All(4);
  EXPECT_TRUE(all.all());
  EXPECT_EQ(all.size(), 4u);
  EXPECT_TRUE(all.listed().empty());  // the point: no list of 16,384 ids per arrival
  EXPECT_TRUE(all.Contains(0));
  EXPECT_TRUE(all.Contains(3));
  EXPECT_FALSE(all.Contains(4));
  EXPECT_FALSE(all.Contains(-1));
  EXPECT_THAT(Ids(all), ElementsAre(0, 1, 2, 3));
}

TEST(ParticipantsTest, ListedHoldsItsIds) {
  const Participants some = Participants::Listed({1, 3});
  EXPECT_FALSE(some.all());
  EXPECT_EQ(some.size(), 2u);
  EXPECT_TRUE(some.Contains(3));
  EXPECT_FALSE(some.Contains(2));
  EXPECT_THAT(Ids(some), ElementsAre(1, 3));
}

// A pending barrier compares the arriving task's participants with its own. (A list of every
// id never reaches it: TaskTable::ResolveSubset turns it into All, so such a list and an empty
// one still meet at one barrier.)
TEST(ParticipantsTest, EqualityTellsAllFromAList) {
  EXPECT_EQ(Participants::All(3), Participants::All(3));
  EXPECT_NE(Participants::All(3), Participants::All(4));
  EXPECT_NE(Participants::All(3), Participants::Listed({0, 1, 2}));
  EXPECT_EQ(Participants::Listed({0, 2}), Participants::Listed({0, 2}));
  EXPECT_NE(Participants::Listed({0, 2}), Participants::Listed({0, 1}));
}

}  // namespace
}  // namespace phalanx::coord
