#include "node_agent/gpu/gpu_inventory.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node_agent/gpu/fake_nvml.h"

namespace phalanx::agent {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(GpuInventoryTest, ReadInventory_ListsDriverAndEveryGpu) {
  FakeNvml nvml({FakeNvml::MakeGpus(2, "H100"), "550.54.15", 12040});
  auto inventory = ReadInventory(nvml);
  ASSERT_THAT(inventory, IsOk());
  EXPECT_EQ(inventory->driver_version, "550.54.15");
  EXPECT_EQ(inventory->cuda_driver_version, 12040);
  EXPECT_EQ(inventory->cuda_version, "12.4");
  ASSERT_EQ(inventory->gpus.size(), 2u);
  const GpuInfo& gpu = inventory->gpus[1];
  EXPECT_EQ(gpu.index, 1);
  EXPECT_EQ(gpu.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpu.uuid, "GPU-00000000-0000-0000-0000-000000000001");
  EXPECT_EQ(gpu.pci_bus_id, "00000000:11:00.0");
  EXPECT_EQ(gpu.memory_total_bytes, uint64_t{81559} << 20);
  EXPECT_EQ(gpu.temperature_c, 40);
  EXPECT_EQ(gpu.ecc_corrected, 0u);
  EXPECT_EQ(gpu.health, GpuHealth::kHealthy);
  EXPECT_THAT(gpu.health_reasons, IsEmpty());
}

TEST(GpuInventoryTest, ReadInventory_WithNoGpus_IsEmptyNotAnError) {
  FakeNvml nvml({});
  auto inventory = ReadInventory(nvml);
  ASSERT_THAT(inventory, IsOk());
  EXPECT_THAT(inventory->gpus, IsEmpty());
}

TEST(GpuInventoryTest, ReadInventory_EccNotSupported_LeavesCountsEmpty) {
  FakeNvml::Options options{FakeNvml::MakeGpus(1)};
  options.gpus[0].ecc_corrected = std::nullopt;
  options.gpus[0].ecc_uncorrected = std::nullopt;
  options.gpus[0].temperature_c = std::nullopt;
  FakeNvml nvml(options);
  auto inventory = ReadInventory(nvml);
  ASSERT_THAT(inventory, IsOk());
  const GpuInfo& gpu = inventory->gpus[0];
  EXPECT_EQ(gpu.ecc_corrected, std::nullopt);
  EXPECT_EQ(FormatEccCount(gpu.ecc_uncorrected), "not supported");
  EXPECT_EQ(gpu.temperature_c, std::nullopt);
  EXPECT_EQ(gpu.health, GpuHealth::kHealthy);
}

TEST(GpuInventoryTest, ReadInventory_BadGpus_AreListedWithTheirHealth) {
  FakeNvml nvml({FakeNvml::MakeGpus(3)});
  nvml.SetLost(0, true);
  nvml.AddEccErrors(1, EccErrorType::kUncorrected, 1);
  nvml.SetTemperature(2, 90);
  auto inventory = ReadInventory(nvml);
  ASSERT_THAT(inventory, IsOk());
  ASSERT_EQ(inventory->gpus.size(), 3u);
  EXPECT_EQ(inventory->gpus[0].health, GpuHealth::kFailed);
  EXPECT_THAT(inventory->gpus[0].health_reasons, ElementsAre(HasSubstr("lost")));
  EXPECT_EQ(inventory->gpus[1].health, GpuHealth::kFailed);
  EXPECT_EQ(inventory->gpus[2].health, GpuHealth::kDegraded);
}

TEST(GpuInventoryTest, ReadInventory_SystemReadFails_ReturnsTheError) {
  for (const char* call : {"DriverVersion", "CudaDriverVersion", "DeviceCount"}) {
    SCOPED_TRACE(call);
    FakeNvml nvml({FakeNvml::MakeGpus(1)});
    nvml.FailCall(call, absl::FailedPreconditionError("driver not loaded"));
    EXPECT_THAT(ReadInventory(nvml), StatusIs(absl::StatusCode::kFailedPrecondition));
  }
}

TEST(GpuInventoryTest, ReadGpu_OneReadFails_KeepsTheRestAndTheFirstError) {
  FakeNvml nvml({FakeNvml::MakeGpus(1)});
  nvml.FailCall("DevicePciBusId", absl::InternalError("pci"));
  nvml.FailCall("DeviceMemoryTotalBytes", absl::InternalError("memory"));
  GpuReading reading = ReadGpu(nvml, 0);
  EXPECT_FALSE(reading.lost);
  EXPECT_THAT(reading.read_error, HasSubstr("pci"));
  EXPECT_EQ(reading.info.uuid, "GPU-00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(reading.info.pci_bus_id, "");
}

TEST(GpuInventoryTest, FormatCudaVersion_TurnsTheCodeIntoMajorMinor) {
  struct Case {
    int code;
    const char* text;
  };
  const Case cases[] = {{12040, "12.4"}, {11080, "11.8"}, {13000, "13.0"},
                        {12090, "12.9"}, {0, "unknown"},  {-1, "unknown"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.code);
    EXPECT_EQ(FormatCudaVersion(c.code), c.text);
  }
}

}  // namespace
}  // namespace phalanx::agent
