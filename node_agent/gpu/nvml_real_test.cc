// Needs an NVIDIA driver (CTest label `gpu`); skips with the reason where there is none.
#include <memory>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node_agent/gpu/gpu_inventory.h"
#include "node_agent/gpu/nvml_loader.h"

namespace phalanx::agent {
namespace {

using ::phalanx::testing::IsOk;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

std::unique_ptr<NvmlApi> LoadOrNull(std::string* why) {
  auto nvml = NvmlLoader::Load();
  if (!nvml.ok()) {
    *why = std::string(nvml.status().message());
    return nullptr;
  }
  return *std::move(nvml);
}

TEST(NvmlRealTest, Inventory_ListsTheDriverAndEveryGpu) {
  std::string why;
  std::unique_ptr<NvmlApi> nvml = LoadOrNull(&why);
  if (nvml == nullptr) GTEST_SKIP() << why;
  auto inventory = ReadInventory(*nvml);
  ASSERT_THAT(inventory, IsOk());
  EXPECT_THAT(inventory->driver_version, Not(IsEmpty()));
  EXPECT_GE(inventory->cuda_driver_version, 11000);
  auto count = nvml->DeviceCount();
  ASSERT_THAT(count, IsOk());
  ASSERT_EQ(inventory->gpus.size(), static_cast<size_t>(*count));
  for (const GpuInfo& gpu : inventory->gpus) {
    SCOPED_TRACE(gpu.index);
    EXPECT_THAT(gpu.name, StartsWith("NVIDIA"));
    EXPECT_THAT(gpu.uuid, StartsWith("GPU-"));
    EXPECT_THAT(gpu.pci_bus_id, Not(IsEmpty()));
    EXPECT_GT(gpu.memory_total_bytes, uint64_t{1} << 30);
    EXPECT_NE(gpu.health, GpuHealth::kFailed) << ::testing::PrintToString(gpu.health_reasons);
  }
}

TEST(NvmlRealTest, XidEventSet_RegistersEveryGpuAndPollsWithoutBlocking) {
  std::string why;
  std::unique_ptr<NvmlApi> nvml = LoadOrNull(&why);
  if (nvml == nullptr) GTEST_SKIP() << why;
  auto count = nvml->DeviceCount();
  ASSERT_THAT(count, IsOk());
  if (*count == 0) GTEST_SKIP() << "the driver sees no GPU";
  auto set = nvml->EventSetCreate();
  ASSERT_THAT(set, IsOk());
  for (int i = 0; i < *count; ++i) {
    auto device = nvml->DeviceByIndex(i);
    ASSERT_THAT(device, IsOk());
    absl::Status registered = nvml->RegisterXidEvents(*set, *device);
    if (registered.code() != absl::StatusCode::kUnimplemented) {
      EXPECT_THAT(registered, IsOk());
    }
  }
  EXPECT_THAT(nvml->PollXidEvents(*set), IsOk());
  EXPECT_THAT(nvml->EventSetFree(*set), IsOk());
}

}  // namespace
}  // namespace phalanx::agent
