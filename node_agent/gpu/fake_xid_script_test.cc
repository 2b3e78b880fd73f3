#include "node_agent/gpu/fake_xid_script.h"

#include <unistd.h>

#include <fstream>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::agent {
namespace {

using ::phalanx::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

class FakeXidScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "xids-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    unlink(path_.c_str());
    set_ = *nvml_.EventSetCreate();
    for (int gpu = 0; gpu < 2; ++gpu) {
      ASSERT_THAT(nvml_.RegisterXidEvents(set_, *nvml_.DeviceByIndex(gpu)), IsOk());
    }
  }
  void TearDown() override { unlink(path_.c_str()); }
  void Append(const std::string& text) { std::ofstream(path_, std::ios::app) << text; }
  std::vector<XidEvent> Events() { return *nvml_.PollXidEvents(set_); }

  FakeNvml nvml_{FakeNvml::Options{FakeNvml::MakeGpus(2)}};
  NvmlEventSet set_{};
  std::string path_;
};

TEST_F(FakeXidScriptTest, NoFileYet_InjectsNothing) {
  FakeXidScript script(path_, nvml_);
  EXPECT_EQ(script.Poll(), 0);
  EXPECT_THAT(Events(), IsEmpty());
}

TEST_F(FakeXidScriptTest, EachAppendedLine_IsInjectedOnce) {
  FakeXidScript script(path_, nvml_);
  Append("1 79\n");
  EXPECT_EQ(script.Poll(), 1);
  EXPECT_THAT(Events(), ElementsAre(XidEvent{1, 79}));
  EXPECT_EQ(script.Poll(), 0) << "a line already injected must not come again";
  Append("0 48\n1 94\n");
  EXPECT_EQ(script.Poll(), 2);
  EXPECT_THAT(Events(), ElementsAre(XidEvent{0, 48}, XidEvent{1, 94}));
}

TEST_F(FakeXidScriptTest, PartialLine_WaitsForItsNewline) {
  FakeXidScript script(path_, nvml_);
  Append("1 7");
  EXPECT_EQ(script.Poll(), 0);
  Append("9\n");
  EXPECT_EQ(script.Poll(), 1);
  EXPECT_THAT(Events(), ElementsAre(XidEvent{1, 79}));
}

TEST_F(FakeXidScriptTest, BadLinesAndMissingGpus_AreSkipped_NotFatal) {
  FakeXidScript script(path_, nvml_);
  Append("garbage\n7 79\n-1 79\n1\n1 79 extra\n0 13\n");
  EXPECT_EQ(script.Poll(), 1);
  EXPECT_THAT(Events(), ElementsAre(XidEvent{0, 13}));
}

}  // namespace
}  // namespace phalanx::agent
