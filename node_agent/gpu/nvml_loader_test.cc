#include "node_agent/gpu/nvml_loader.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node_agent/gpu/gpu_inventory.h"
#include "node_agent/gpu/node_checks.h"

namespace phalanx::agent {
namespace {

using ::phalanx::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(NvmlLoaderTest, Load_WhenTheLibraryIsMissing_SaysThereIsNoDriver) {
  auto nvml = NvmlLoader::Load("/nonexistent/libnvidia-ml.so.1");
  EXPECT_THAT(nvml, StatusIs(absl::StatusCode::kNotFound,
                             AllOf(StartsWith("no NVIDIA driver: cannot load NVML"),
                                   HasSubstr("/nonexistent/libnvidia-ml.so.1"))));
  // What the agent does with it: a failed driver check and zero GPUs, no crash.
  CheckResult check = CheckNvidiaDriver(nvml.status(), GpuInventory{});
  EXPECT_FALSE(check.ok);
  EXPECT_THAT(check.message, StartsWith("no NVIDIA driver: cannot load NVML"));
}

TEST(NvmlLoaderTest, Load_WhenTheLibraryIsNotNvml_NamesTheMissingSymbols) {
  EXPECT_THAT(NvmlLoader::Load("libm.so.6"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("libm.so.6 lacks nvmlInit_v2"), HasSubstr("not NVML"))));
}

}  // namespace
}  // namespace phalanx::agent
