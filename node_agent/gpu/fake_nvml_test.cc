#include "node_agent/gpu/fake_nvml.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::agent {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(FakeNvmlTest, ParseSpec_ValidSpecs_GiveCountAndModel) {
  struct Case {
    const char* spec;
    int count;
    const char* name;
  };
  const Case cases[] = {
      {"8", 8, "NVIDIA H100 80GB HBM3"},
      {"8:H100", 8, "NVIDIA H100 80GB HBM3"},
      {"4:A100", 4, "NVIDIA A100-SXM4-80GB"},
      {"2:L4", 2, "NVIDIA L4"},
      {"0", 0, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec);
    auto options = FakeNvml::ParseSpec(c.spec);
    ASSERT_THAT(options, IsOk());
    ASSERT_EQ(options->gpus.size(), static_cast<size_t>(c.count));
    if (c.count > 0) {
      EXPECT_EQ(options->gpus[0].name, c.name);
    }
  }
}

TEST(FakeNvmlTest, ParseSpec_MalformedSpecs_AreInvalidArgument) {
  for (const char* spec : {"", "x", "-1", "+8", " 8", "8:", "65", ":H100", "8x"}) {
    SCOPED_TRACE(spec);
    EXPECT_THAT(FakeNvml::ParseSpec(spec),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("COUNT[:MODEL]")));
  }
}

TEST(FakeNvmlTest, MakeGpus_GivesDistinctUuidsAndPciIds) {
  auto gpus = FakeNvml::MakeGpus(3);
  EXPECT_EQ(gpus[0].uuid, "GPU-00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(gpus[2].uuid, "GPU-00000000-0000-0000-0000-000000000002");
  EXPECT_EQ(gpus[1].pci_bus_id, "00000000:11:00.0");
}

TEST(FakeNvmlTest, InjectedXid_ReachesOnlySetsTheGpuIsRegisteredIn) {
  auto nvml = FakeNvml::FromSpec("2");
  ASSERT_THAT(nvml, IsOk());
  FakeNvml& fake = **nvml;
  auto set = fake.EventSetCreate();
  auto other = fake.EventSetCreate();
  ASSERT_THAT(fake.RegisterXidEvents(*set, *fake.DeviceByIndex(1)), IsOk());
  fake.InjectXid(1, 79);
  fake.InjectXid(0, 48);  // GPU 0 is registered nowhere: lost, as with NVML
  EXPECT_THAT(*fake.PollXidEvents(*set), ElementsAre(XidEvent{1, 79}));
  EXPECT_THAT(*fake.PollXidEvents(*set), IsEmpty());
  EXPECT_THAT(*fake.PollXidEvents(*other), IsEmpty());
  EXPECT_THAT(fake.EventSetFree(*set), IsOk());
  EXPECT_EQ(fake.live_event_sets(), 1);
}

TEST(FakeNvmlTest, FailCall_FailsThatCallUntilCleared) {
  FakeNvml fake({FakeNvml::MakeGpus(1)});
  fake.FailCall("DeviceCount", absl::InternalError("boom"));
  EXPECT_THAT(fake.DeviceCount(), StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(fake.DriverVersion(), IsOk());
  fake.FailCall("DeviceCount", absl::OkStatus());
  EXPECT_THAT(fake.DeviceCount(), IsOk());
}

TEST(FakeNvmlTest, LostGpu_ReadsFailWithDataLoss) {
  FakeNvml fake({FakeNvml::MakeGpus(1)});
  fake.SetLost(0, true);
  EXPECT_TRUE(IsGpuLost(fake.DeviceUuid(*fake.DeviceByIndex(0)).status()));
}

TEST(FakeNvmlTest, InitAndShutdown_AreCounted) {
  FakeNvml fake({});
  EXPECT_THAT(fake.Init(), IsOk());
  EXPECT_EQ(fake.init_count(), 1);
  EXPECT_THAT(fake.Shutdown(), IsOk());
  EXPECT_THAT(fake.Shutdown(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace phalanx::agent
