#include "node_agent/gpu/gpu_health.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

TEST(GpuHealthTest, ClassifyGpuHealth_FollowsTheRules) {
  struct Case {
    const char* name;
    GpuHealthSignals signals;
    GpuHealth health;
    std::vector<std::string> reasons;
  };
  GpuHealthSignals cool;
  cool.temperature_c = 40;
  cool.ecc_uncorrected = 0;
  auto with = [&](auto change) {
    GpuHealthSignals s = cool;
    change(s);
    return s;
  };
  const Case cases[] = {
      {"quiet GPU", cool, GpuHealth::kHealthy, {}},
      {"nothing reported", GpuHealthSignals{}, GpuHealth::kHealthy, {}},
      {"at the temperature limit",
       with([](auto& s) { s.temperature_c = 85; }),
       GpuHealth::kHealthy,
       {}},
      {"too hot",
       with([](auto& s) { s.temperature_c = 86; }),
       GpuHealth::kDegraded,
       {"temperature 86C above 85C"}},
      {"corrected ECC growing",
       with([](auto& s) { s.ecc_corrected_growth = 3; }),
       GpuHealth::kDegraded,
       {"corrected ECC errors grew by 3"}},
      {"unreadable",
       with([](auto& s) { s.read_error = "INTERNAL: x"; }),
       GpuHealth::kDegraded,
       {"unreadable: INTERNAL: x"}},
      {"non-fatal XID",
       with([](auto& s) {
         s.xids = {13, 43};
       }),
       GpuHealth::kHealthy,
       {}},
      {"fatal XID",
       with([](auto& s) {
         s.xids = {13, 79};
       }),
       GpuHealth::kFailed,
       {"fatal XID 79"}},
      {"uncorrected ECC",
       with([](auto& s) { s.ecc_uncorrected = 2; }),
       GpuHealth::kFailed,
       {"2 uncorrected ECC errors"}},
      {"ECC not supported",
       with([](auto& s) { s.ecc_uncorrected = std::nullopt; }),
       GpuHealth::kHealthy,
       {}},
      {"lost",
       with([](auto& s) { s.lost = true; }),
       GpuHealth::kFailed,
       {"GPU is lost (fell off the bus or stopped responding)"}},
      {"failed and hot: failure first",
       with([](auto& s) {
         s.temperature_c = 95;
         s.xids = {48};
       }),
       GpuHealth::kFailed,
       {"fatal XID 48", "temperature 95C above 85C"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    GpuHealthVerdict verdict = ClassifyGpuHealth(c.signals, GpuHealthThresholds{});
    EXPECT_EQ(verdict.health, c.health);
    EXPECT_THAT(verdict.reasons, ElementsAreArray(c.reasons));
  }
}

TEST(GpuHealthTest, ClassifyGpuHealth_UsesTheGivenThresholds) {
  GpuHealthThresholds strict{.max_temperature_c = 70, .corrected_ecc_growth = 10};
  GpuHealthSignals signals;
  signals.temperature_c = 75;
  signals.ecc_corrected_growth = 9;
  GpuHealthVerdict verdict = ClassifyGpuHealth(signals, strict);
  EXPECT_EQ(verdict.health, GpuHealth::kDegraded);
  EXPECT_THAT(verdict.reasons, ElementsAre(HasSubstr("above 70C")));
}

TEST(GpuHealthTest, IsFatalXid_MatchesTheDocumentedList) {
  for (uint64_t xid : {48, 63, 64, 74, 79, 92, 94, 95, 119, 120}) {
    SCOPED_TRACE(xid);
    EXPECT_TRUE(IsFatalXid(xid));
  }
  for (uint64_t xid : {0, 13, 31, 43, 45, 61, 62, 121}) {
    SCOPED_TRACE(xid);
    EXPECT_FALSE(IsFatalXid(xid));
  }
}

TEST(GpuHealthTest, GpuHealthName_IsTheMetricLabel) {
  EXPECT_EQ(GpuHealthName(GpuHealth::kHealthy), "healthy");
  EXPECT_EQ(GpuHealthName(GpuHealth::kDegraded), "degraded");
  EXPECT_EQ(GpuHealthName(GpuHealth::kFailed), "failed");
}

}  // namespace
}  // namespace phalanx::agent
