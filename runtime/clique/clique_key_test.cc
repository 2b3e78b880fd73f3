#include "runtime/clique/clique_key.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::clique {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;
using ::testing::Pair;
using ::testing::StartsWith;

TEST(CliqueKeyTest, Create_SortsMembersAndDevices_AndRanksFollowThatOrder) {
  auto key = CliqueKey::Create("job", {{2, 1, {1, 0}}, {0, 3, {0}}});
  ASSERT_THAT(key, IsOk());
  EXPECT_EQ(key->num_ranks(), 3);
  EXPECT_EQ(key->ToString(), "job[t0#3:0 t2#1:0,1]");
  EXPECT_THAT(key->RankOf(2, 1), Optional(2));
  EXPECT_EQ(key->RankOf(1, 0), std::nullopt);
  EXPECT_THAT(key->RanksOf(2), ElementsAre(1, 2));
  EXPECT_THAT(key->RankOwner(1), Optional(Pair(2, 0)));
  EXPECT_EQ(key->RankOwner(3), std::nullopt);
  ASSERT_NE(key->FindMember(2), nullptr);
  EXPECT_EQ(key->FindMember(2)->incarnation, 1u);
  EXPECT_EQ(key->FindMember(1), nullptr);
}

TEST(CliqueKeyTest, Equality_SameMembersInAnyOrder_ButNotAnotherIncarnation) {
  auto a = CliqueKey::Create("job", {{0, 0, {0}}, {1, 0, {0}}});
  auto b = CliqueKey::Create("job", {{1, 0, {0}}, {0, 0, {0}}});
  auto c = CliqueKey::Create("job", {{0, 0, {0}}, {1, 1, {0}}});
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  EXPECT_EQ(a->KvPrefix(), b->KvPrefix());
  EXPECT_NE(a->KvPrefix(), c->KvPrefix());
}

TEST(CliqueKeyTest, KvPrefix_StaysShortForAThousandMembers) {
  std::vector<CliqueMember> members;
  for (int t = 0; t < 1000; ++t) members.push_back({t, 7, {0, 1, 2, 3, 4, 5, 6, 7}});
  auto key = CliqueKey::Create("big-job", members);
  ASSERT_THAT(key, IsOk());
  EXPECT_THAT(key->KvPrefix(), StartsWith("nccl/big-job/8000r-"));
  EXPECT_EQ(key->KvPrefix().size(), std::string("nccl/big-job/8000r-").size() + 16);
}

TEST(CliqueKeyTest, Create_RejectsBadKeys) {
  struct Case {
    const char* name;
    std::string job;
    std::vector<CliqueMember> members;
    const char* error;
  };
  const Case cases[] = {
      {"empty job", "", {{0, 0, {0}}}, "empty job"},
      {"slash in job", "a/b", {{0, 0, {0}}}, "without spaces or '/'"},
      {"no members", "job", {}, "no members"},
      {"repeated task", "job", {{1, 0, {0}}, {1, 1, {1}}}, "task 1 repeated"},
      {"no devices", "job", {{1, 0, {}}}, "has no devices"},
      {"repeated device", "job", {{1, 0, {2, 2}}}, "lists a device twice"},
      {"negative task", "job", {{-1, 0, {0}}}, "negative task id"},
      {"negative device", "job", {{0, 0, {-1}}}, "negative device id"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_THAT(CliqueKey::Create(c.job, c.members),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.error)));
  }
}

}  // namespace
}  // namespace phalanx::clique
