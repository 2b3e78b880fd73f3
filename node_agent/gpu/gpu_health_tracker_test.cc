#include "node_agent/gpu/gpu_health_tracker.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node_agent/gpu/fake_nvml.h"

namespace phalanx::agent {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

class GpuHealthTrackerTest : public ::testing::Test {
 protected:
  std::unique_ptr<GpuHealthTracker> MakeTracker(GpuHealthTracker::Options options = {}) {
    auto tracker = GpuHealthTracker::Create(nvml_, options);
    EXPECT_THAT(tracker, IsOk());
    return tracker.ok() ? *std::move(tracker) : nullptr;
  }
  GpuHealth HealthOf(const GpuHealthTracker& tracker, int index) {
    return tracker.inventory().gpus.at(index).health;
  }

  FakeNvml nvml_{FakeNvml::Options{FakeNvml::MakeGpus(4)}};
};

TEST_F(GpuHealthTrackerTest, QuietGpus_StayHealthy) {
  auto tracker = MakeTracker();
  EXPECT_THAT(tracker->Tick(kStart), IsEmpty());
  GpuHealthTracker::Counters counters = tracker->counters();
  EXPECT_TRUE(counters.xid_events_available);
  EXPECT_THAT(counters.gpus_by_health,
              ElementsAre(Pair(GpuHealth::kHealthy, 4), Pair(GpuHealth::kDegraded, 0),
                          Pair(GpuHealth::kFailed, 0)));
  EXPECT_THAT(counters.xids_by_code, IsEmpty());
}

TEST_F(GpuHealthTrackerTest, FatalXid_FailsTheGpu_AndReportsItOnce) {
  auto tracker = MakeTracker();
  nvml_.InjectXid(2, 79);
  auto failed = tracker->Tick(kStart);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].index, 2);
  EXPECT_EQ(failed[0].uuid, "GPU-00000000-0000-0000-0000-000000000002");
  EXPECT_THAT(failed[0].reasons, ElementsAre("fatal XID 79"));
  EXPECT_EQ(tracker->newly_failed().size(), 1u);
  EXPECT_EQ(HealthOf(*tracker, 2), GpuHealth::kFailed);

  // No new event: still Failed (sticky), but not reported again.
  EXPECT_THAT(tracker->Tick(kStart + absl::Seconds(10)), IsEmpty());
  EXPECT_THAT(tracker->newly_failed(), IsEmpty());
  EXPECT_EQ(HealthOf(*tracker, 2), GpuHealth::kFailed);
  nvml_.InjectXid(2, 48);
  EXPECT_THAT(tracker->Tick(kStart + absl::Seconds(20)), IsEmpty());

  GpuHealthTracker::Counters counters = tracker->counters();
  EXPECT_THAT(counters.xids_by_code, ElementsAre(Pair(48, 1), Pair(79, 1)));
  EXPECT_EQ(counters.gpus_by_health[GpuHealth::kFailed], 1);
  EXPECT_EQ(counters.gpus_by_health[GpuHealth::kHealthy], 3);
}

TEST_F(GpuHealthTrackerTest, NonFatalXid_IsCountedButLeavesTheGpuHealthy) {
  auto tracker = MakeTracker();
  nvml_.InjectXid(0, 13);
  nvml_.InjectXid(0, 13);
  EXPECT_THAT(tracker->Tick(kStart), IsEmpty());
  EXPECT_EQ(HealthOf(*tracker, 0), GpuHealth::kHealthy);
  EXPECT_THAT(tracker->counters().xids_by_code, ElementsAre(Pair(13, 2)));
}

TEST_F(GpuHealthTrackerTest, UncorrectedEcc_FailsTheGpu) {
  auto tracker = MakeTracker();
  tracker->Tick(kStart);
  nvml_.AddEccErrors(1, EccErrorType::kUncorrected, 1);
  auto failed = tracker->Tick(kStart + absl::Seconds(10));
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].index, 1);
  EXPECT_THAT(failed[0].reasons, ElementsAre("1 uncorrected ECC errors"));
}

TEST_F(GpuHealthTrackerTest, CorrectedEccGrowth_DegradesUntilTheHoldPasses) {
  GpuHealthTracker::Options options;
  options.corrected_ecc_hold = absl::Minutes(10);
  auto tracker = MakeTracker(options);
  nvml_.AddEccErrors(3, EccErrorType::kCorrected, 5);  // before the first tick: the baseline
  tracker->Tick(kStart);
  EXPECT_EQ(HealthOf(*tracker, 3), GpuHealth::kHealthy);

  nvml_.AddEccErrors(3, EccErrorType::kCorrected, 2);
  tracker->Tick(kStart + absl::Minutes(1));
  EXPECT_EQ(HealthOf(*tracker, 3), GpuHealth::kDegraded);
  EXPECT_THAT(tracker->inventory().gpus[3].health_reasons,
              ElementsAre("corrected ECC errors grew by 2"));

  tracker->Tick(kStart + absl::Minutes(10));
  EXPECT_EQ(HealthOf(*tracker, 3), GpuHealth::kDegraded);
  tracker->Tick(kStart + absl::Minutes(11));
  EXPECT_EQ(HealthOf(*tracker, 3), GpuHealth::kHealthy);
}

TEST_F(GpuHealthTrackerTest, HighTemperature_DegradesThenRecovers) {
  GpuHealthTracker::Options options;
  options.thresholds.max_temperature_c = 80;
  auto tracker = MakeTracker(options);
  nvml_.SetTemperature(0, 81);
  EXPECT_THAT(tracker->Tick(kStart), IsEmpty());
  EXPECT_EQ(HealthOf(*tracker, 0), GpuHealth::kDegraded);
  EXPECT_EQ(tracker->counters().gpus_by_health[GpuHealth::kDegraded], 1);
  nvml_.SetTemperature(0, 60);
  tracker->Tick(kStart + absl::Seconds(10));
  EXPECT_EQ(HealthOf(*tracker, 0), GpuHealth::kHealthy);
}

TEST_F(GpuHealthTrackerTest, LostGpu_FailsAndKeepsItsIdentity) {
  auto tracker = MakeTracker();
  tracker->Tick(kStart);
  nvml_.SetLost(1, true);
  auto failed = tracker->Tick(kStart + absl::Seconds(10));
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].uuid, "GPU-00000000-0000-0000-0000-000000000001");
  EXPECT_EQ(tracker->inventory().gpus[1].name, "NVIDIA H100 80GB HBM3");
  // Readable again (e.g. a flaky bus): still Failed until a reset restarts the agent.
  nvml_.SetLost(1, false);
  EXPECT_THAT(tracker->Tick(kStart + absl::Seconds(20)), IsEmpty());
  EXPECT_EQ(HealthOf(*tracker, 1), GpuHealth::kFailed);
  EXPECT_THAT(tracker->inventory().gpus[1].health_reasons, ElementsAre(HasSubstr("lost")));
}

TEST_F(GpuHealthTrackerTest, XidPollFails_IsCountedAndTheTickGoesOn) {
  auto tracker = MakeTracker();
  nvml_.FailCall("PollXidEvents", absl::InternalError("poll"));
  nvml_.SetTemperature(0, 99);
  EXPECT_THAT(tracker->Tick(kStart), IsEmpty());
  EXPECT_EQ(tracker->counters().xid_poll_errors, 1u);
  EXPECT_EQ(HealthOf(*tracker, 0), GpuHealth::kDegraded);
}

TEST_F(GpuHealthTrackerTest, NoXidEvents_StillTracksEcc) {
  nvml_.FailCall("EventSetCreate", absl::UnimplementedError("no events"));
  auto tracker = MakeTracker();
  EXPECT_FALSE(tracker->counters().xid_events_available);
  nvml_.AddEccErrors(0, EccErrorType::kUncorrected, 3);
  EXPECT_THAT(tracker->Tick(kStart), ElementsAre(Field(&GpuHealthTracker::FailedGpu::index, 0)));
}

TEST_F(GpuHealthTrackerTest, AlreadyFailedAtCreate_IsReportedOnTheFirstTick) {
  nvml_.AddEccErrors(2, EccErrorType::kUncorrected, 1);
  auto tracker = MakeTracker();
  EXPECT_EQ(HealthOf(*tracker, 2), GpuHealth::kFailed);
  EXPECT_THAT(tracker->Tick(kStart), ElementsAre(Field(&GpuHealthTracker::FailedGpu::index, 2)));
}

TEST_F(GpuHealthTrackerTest, Destruction_FreesTheEventSet) {
  auto tracker = MakeTracker();
  EXPECT_EQ(nvml_.live_event_sets(), 1);
  tracker.reset();
  EXPECT_EQ(nvml_.live_event_sets(), 0);
}

TEST(GpuHealthTrackerNoGpuTest, ZeroGpus_TracksNothingAndNeedsNoEventSet) {
  FakeNvml nvml({});
  auto tracker = GpuHealthTracker::Create(nvml);
  ASSERT_THAT(tracker, IsOk());
  EXPECT_THAT((*tracker)->Tick(kStart), IsEmpty());
  EXPECT_EQ(nvml.live_event_sets(), 0);
  EXPECT_FALSE((*tracker)->counters().xid_events_available);
}

TEST(GpuHealthTrackerNoGpuTest, Create_WhenNvmlFails_ReturnsTheError) {
  FakeNvml nvml({FakeNvml::MakeGpus(1)});
  nvml.FailCall("DeviceCount", absl::FailedPreconditionError("uninitialised"));
  EXPECT_THAT(GpuHealthTracker::Create(nvml), StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace phalanx::agent
