#include "examples/sample_worker/recovery_offer.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::examples {
namespace {

using ::phalanx::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

RecoveryOffer Offer(std::set<int64_t> held, std::optional<int64_t> pending = std::nullopt) {
  held.insert(0);
  return RecoveryOffer{std::move(held), pending};
}

TEST(RecoveryOffer, FormatsAndParsesBack) {
  const RecoveryOffer offer = Offer({10, 19}, 20);
  EXPECT_EQ(FormatOffer(offer), "held=0,10,19 pending=20");
  absl::StatusOr<RecoveryOffer> parsed = ParseOffer(FormatOffer(offer));
  ASSERT_THAT(parsed, IsOk());
  EXPECT_THAT(parsed->held, ElementsAre(0, 10, 19));
  EXPECT_EQ(parsed->pending, 20);
  EXPECT_EQ(FormatOffer(Offer({})), "held=0");
}

TEST(RecoveryOffer, ABareStepIsAnOfferOfThatStep) {
  absl::StatusOr<RecoveryOffer> parsed = ParseOffer("30");
  ASSERT_THAT(parsed, IsOk());
  EXPECT_THAT(parsed->held, ElementsAre(0, 30));
  EXPECT_FALSE(parsed->pending.has_value());
}

TEST(RecoveryOffer, GarbageIsAClearError) {
  for (const char* bad :
       {"", "-3", "held=1,x", "held=1 pending=-2", "held=1 later=3", "pending=3"}) {
    absl::StatusOr<RecoveryOffer> parsed = ParseOffer(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("recovery offer")) << bad;
  }
}

TEST(AgreeResumeStep, TheNewestStepEveryTaskHolds) {
  // The simple rule's case: newest checkpoints 20 and 10, both kept by the first task.
  EXPECT_EQ(AgreeResumeStep({Offer({10, 20}), Offer({10})}), 10);
  // Both hold the step they are at in memory: nothing is rolled back.
  EXPECT_EQ(AgreeResumeStep({Offer({10, 15}), Offer({10, 15})}), 15);
  // Nothing in common but the initial state.
  EXPECT_EQ(AgreeResumeStep({Offer({20, 30}), Offer({10})}), 0);
  EXPECT_EQ(AgreeResumeStep({}), 0);
}

TEST(AgreeResumeStep, APendingStepCountsOnceSomeTaskReachedIt) {
  // The coordinator went with the release of the step-19 barrier: one task got it, checkpointed
  // at the sync step 20 and left (its replacement offers 20); the other holds 19 and, pending, 20.
  EXPECT_EQ(AgreeResumeStep({Offer({10, 20}), Offer({10, 19}, 20)}), 20);
  // Nobody reached 16: the barrier may not have been released, so its pending step is no proof.
  EXPECT_EQ(AgreeResumeStep({Offer({10, 15}, 16), Offer({10, 15}, 16)}), 15);
  // A pending step proves nothing for another task's pending step.
  EXPECT_EQ(AgreeResumeStep({Offer({10, 19}, 20), Offer({10, 19}, 20), Offer({10, 18}, 19)}), 19);
  // Proven, but a third task holds neither 20 nor a pending 20: the newest common step.
  EXPECT_EQ(AgreeResumeStep({Offer({10, 20}), Offer({10, 19}, 20), Offer({10, 12})}), 10);
}

}  // namespace
}  // namespace phalanx::examples
