#include "examples/sample_worker/checkpoint_store.h"

#include <filesystem>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::examples {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::string TempDir() {
  std::string dir = std::filesystem::temp_directory_path() /
                    ("ckpt-test-" + std::to_string(::getpid()) + "-" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CheckpointStore, SavesLoadsAndKeepsTheNewest) {
  const std::string dir = TempDir();
  CheckpointStore store(dir, 2, /*keep=*/2);
  EXPECT_THAT(store.Kept(), IsEmpty());
  ASSERT_THAT(store.Save(10, 111), IsOk());
  ASSERT_THAT(store.Save(20, 222), IsOk());
  ASSERT_THAT(store.Save(30, 333), IsOk());
  EXPECT_THAT(store.Kept(), ElementsAre(20, 30));
  EXPECT_EQ(*store.Load(20), 222u);
  EXPECT_THAT(store.Load(10), StatusIs(absl::StatusCode::kNotFound));
  std::filesystem::remove_all(dir);
}

TEST(CheckpointStore, StateIsDeterministic) {
  uint64_t a = 0, b = 0;
  for (int step = 0; step < 50; ++step) {
    a = AdvanceState(a, step);
    b = AdvanceState(b, step);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(AdvanceState(0, 1), AdvanceState(0, 2));
}

}  // namespace
}  // namespace phalanx::examples
