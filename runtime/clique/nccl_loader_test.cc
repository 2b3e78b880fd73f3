#include "runtime/clique/nccl_loader.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::clique {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(NcclLoaderTest, Create_WhenTheLibraryIsMissing_SaysWhatItTried) {
  NcclLoader::Options options;
  options.nccl_paths = {"/nonexistent/libnccl.so.2"};
  auto loader = NcclLoader::Create(options);
  if (!NcclLoader::BuiltWithNcclHeader()) {
    EXPECT_THAT(loader, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("nccl.h")));
    return;
  }
  EXPECT_THAT(loader,
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("cannot load NCCL"), HasSubstr("/nonexistent/libnccl.so.2"),
                             HasSubstr("LD_LIBRARY_PATH"))));
}

TEST(NcclLoaderTest, Create_WhenTheLibraryIsNotNccl_NamesTheMissingSymbols) {
  if (!NcclLoader::BuiltWithNcclHeader()) GTEST_SKIP() << "built without nccl.h";
  NcclLoader::Options options;
  options.nccl_paths = {"libm.so.6"};
  EXPECT_THAT(NcclLoader::Create(options),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("libm.so.6 lacks ncclGetVersion"), HasSubstr("2.14"))));
}

// Loading NCCL and asking its version needs no GPU.
TEST(NcclLoaderTest, Create_WithTheInstalledLibrary_ReportsVersionAndOptionalCalls) {
  auto loader = NcclLoader::Create();
  if (!loader.ok()) GTEST_SKIP() << "NCCL not installed here: " << loader.status();
  auto version = (*loader)->GetVersion();
  ASSERT_THAT(version, IsOk());
  EXPECT_GE(*version, 21400);
  EXPECT_EQ((*loader)->SupportsShrink(), *version >= 22700);
  EXPECT_EQ((*loader)->SupportsRevoke(), *version >= 22800);
}

}  // namespace
}  // namespace phalanx::clique
