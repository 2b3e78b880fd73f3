// Incarnations cross from the protocol's uint64 into the operator's Incarnation without ever
// narrowing (coordinator_link.cc once cast them to int: 2^31 and above wrapped).
#include "common/base/incarnation.h"

#include <gtest/gtest.h>

#include <limits>

namespace phalanx::base {
namespace {

TEST(IncarnationTest, FromWireKeepsEveryValueThatFitsAndRefusesTheRest) {
  constexpr uint64_t kMax = std::numeric_limits<Incarnation>::max();
  EXPECT_EQ(IncarnationFromWire(0), 0);
  EXPECT_EQ(IncarnationFromWire(uint64_t{1} << 31), Incarnation{1} << 31);  // past int
  EXPECT_EQ(IncarnationFromWire(uint64_t{1} << 32), Incarnation{1} << 32);  // past uint32
  EXPECT_EQ(IncarnationFromWire(kMax), std::numeric_limits<Incarnation>::max());
  EXPECT_EQ(IncarnationFromWire(kMax + 1), kNoIncarnation);
  EXPECT_EQ(IncarnationFromWire(std::numeric_limits<uint64_t>::max()), kNoIncarnation);
}

TEST(IncarnationTest, ToWireIsTheIdentityOnEveryIncarnationAndNoneIsZero) {
  for (Incarnation inc : {Incarnation{0}, Incarnation{1} << 31, Incarnation{1} << 32,
                          std::numeric_limits<Incarnation>::max()}) {
    EXPECT_EQ(IncarnationFromWire(IncarnationToWire(inc)), inc);
  }
  EXPECT_EQ(IncarnationToWire(kNoIncarnation), 0u);
}

TEST(IncarnationTest, ParseTakesDecimalTextInRangeOnly) {
  EXPECT_EQ(ParseIncarnation("0"), Incarnation{0});
  EXPECT_EQ(ParseIncarnation("2147483648"), Incarnation{1} << 31);
  EXPECT_EQ(ParseIncarnation("9223372036854775807"), std::numeric_limits<Incarnation>::max());
  EXPECT_EQ(ParseIncarnation("9223372036854775808"), std::nullopt);  // 2^63: does not fit
  EXPECT_EQ(ParseIncarnation("-1"), std::nullopt);
  EXPECT_EQ(ParseIncarnation(""), std::nullopt);
  EXPECT_EQ(ParseIncarnation("3x"), std::nullopt);
}

}  // namespace
}  // namespace phalanx::base
