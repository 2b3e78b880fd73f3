// ProcessMain with real signals: a stop signal sent to the process is taken by the waiter (it
// was blocked, so it neither killed the process nor got lost), and ExitOnStopSignal ends the
// process as an unhandled signal would.
#include "common/base/process_main.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

namespace phalanx::base {
namespace {

std::vector<char*> Argv(std::vector<std::string>& words) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return argv;
}

TEST(ProcessMainTest, ParsesPositionalArgumentsAndFailsWithTheProgramsPrefix) {
  std::vector<std::string> words = {"phalanx-test", "preflight", "extra"};
  std::vector<char*> argv = Argv(words);
  ProcessMain process(static_cast<int>(argv.size()), argv.data(),
                      {"test", "phalanx-test", "phalanx-test [flags]"});
  EXPECT_THAT(process.args(), testing::ElementsAre("preflight", "extra"));
  testing::internal::CaptureStderr();
  EXPECT_EQ(process.Fail("unexpected argument extra"), 2);
  EXPECT_EQ(process.Fail("worse", 3), 3);
  EXPECT_THAT(testing::internal::GetCapturedStderr(),
              testing::HasSubstr("phalanx-test: unexpected argument extra\n"));
}

TEST(ProcessMainTest, AStopSignalIsHeldForTheWaiterAndNothingElse) {
  std::vector<std::string> words = {"phalanx-test"};
  std::vector<char*> argv = Argv(words);
  ProcessMain process(1, argv.data(), {"test", "phalanx-test", ""});
  EXPECT_EQ(process.WaitForStopSignal(absl::Milliseconds(10)), 0) << "none sent yet";
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);  // blocked: pending, not fatal
  EXPECT_EQ(process.WaitForStopSignal(absl::Seconds(10)), SIGTERM);
  ASSERT_EQ(kill(getpid(), SIGINT), 0);
  EXPECT_EQ(process.WaitForStopSignal(absl::Seconds(10)), SIGINT);
}

TEST(ProcessMainDeathTest, ExitOnStopSignalExitsAsTheSignalWould) {
  EXPECT_EXIT(
      {
        std::vector<std::string> words = {"phalanx-test"};
        std::vector<char*> argv = Argv(words);
        ProcessMain process(1, argv.data(), {"test", "phalanx-test", ""});
        process.ExitOnStopSignal();
        kill(getpid(), SIGTERM);
        sleep(30);  // the exit comes first
      },
      testing::ExitedWithCode(128 + SIGTERM), "phalanx-test: signal 15: stopping");
}

}  // namespace
}  // namespace phalanx::base
