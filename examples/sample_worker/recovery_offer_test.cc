#include "examples/sample_worker/recovery_offer.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
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

TEST(AgreeResumeStep, EmptyIsTheInitialState) { EXPECT_EQ(AgreeResumeStep({}), 0); }

// The cases in testdata/recovery_offers.txt, which the Python example must agree on too.
TEST(AgreeResumeStep, SharedCases_ResumeWhereTheFileSays) {
  std::ifstream in(PHALANX_SOURCE_DIR "/examples/sample_worker/testdata/recovery_offers.txt");
  ASSERT_TRUE(in) << "examples/sample_worker/testdata/recovery_offers.txt not found";
  int cases = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    SCOPED_TRACE(line);
    const std::vector<std::string> sides = absl::StrSplit(line, " => ");
    ASSERT_EQ(sides.size(), 2u);
    std::vector<RecoveryOffer> offers;
    for (absl::string_view text : absl::StrSplit(sides[0], " | ")) {
      absl::StatusOr<RecoveryOffer> offer = ParseOffer(text);
      ASSERT_THAT(offer, IsOk());
      offers.push_back(*offer);
    }
    EXPECT_EQ(AgreeResumeStep(offers), std::stoll(sides[1]));
    ++cases;
  }
  EXPECT_GE(cases, 9);
}

}  // namespace
}  // namespace phalanx::examples
