#include "common/process/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace phalanx::process {
namespace {

// A child started with die_with_parent does not outlive the process that started it (a harness
// that is SIGKILLed takes its etcd and kube-apiserver with it). The starting process here is a
// forked copy of the test that starts `sleep 60`, reports its pid and dies.
TEST(SubprocessTest, DieWithParent_ChildIsKilledWhenItsParentDies) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t harness = fork();
  ASSERT_GE(harness, 0);
  if (harness == 0) {
    SubprocessOptions options;
    options.argv = {"/bin/sleep", "60"};
    options.stdout_path = "/dev/null";  // no reader thread in this forked copy
    options.die_with_parent = true;
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(options);
    const pid_t pid = p.ok() ? (*p)->pid() : -1;
    (void)!write(fds[1], &pid, sizeof(pid));
    _exit(0);  // no destructors: the child must go by PR_SET_PDEATHSIG alone
  }
  close(fds[1]);
  pid_t child = -1;
  ASSERT_EQ(read(fds[0], &child, sizeof(child)), static_cast<ssize_t>(sizeof(child)));
  close(fds[0]);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(harness, &status, 0), harness);
  bool gone = false;
  for (int i = 0; i < 300 && !gone; ++i) {
    gone = kill(child, 0) != 0 && errno == ESRCH;
    if (!gone) usleep(100'000);
  }
  if (!gone) kill(child, SIGKILL);
  EXPECT_TRUE(gone) << "sleep (pid " << child << ") outlived the process that started it";
}

TEST(SubprocessTest, WithoutDieWithParent_ChildOutlivesItsStartingThread) {
  std::unique_ptr<Subprocess> child;
  std::thread starter([&] {
    SubprocessOptions options;
    options.argv = {"/bin/sleep", "60"};
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(options);
    ASSERT_TRUE(p.ok()) << p.status();
    child = *std::move(p);
  });
  starter.join();
  ASSERT_NE(child, nullptr);
  EXPECT_FALSE(child->Wait(absl::Milliseconds(300)).has_value());
  child->Signal(SIGKILL);
  EXPECT_TRUE(child->Wait(absl::Seconds(10)).has_value());
}

// What a child printed is all in Lines() once Wait returns, its last unterminated line too
// (`kubectl -o jsonpath=...` prints no newline). Wait used to return as soon as the child was
// reaped, before the reader thread had read the pipe's end: a kubectl test then saw "" now and
// then. Many short children, so that the race would show.
TEST(SubprocessTest, Wait_ReturnsOnlyOnceAllOfStdoutIsInLines) {
  for (int i = 0; i < 200; ++i) {
    SubprocessOptions options;
    options.argv = {"/usr/bin/printf", "first\\nnode-%d", std::to_string(i)};
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(options);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE((*p)->Wait(absl::Seconds(30)).has_value());
    EXPECT_EQ((*p)->Lines(), (std::vector<std::string>{"first", "node-" + std::to_string(i)}))
        << "run " << i;
  }
}

// A grandchild that keeps the pipe open does not hide the child's exit: Wait gives the status
// once its deadline has passed, with what was read by then.
TEST(SubprocessTest, Wait_GivesTheStatusWhenAGrandchildKeepsStdoutOpen) {
  SubprocessOptions options;
  options.argv = {"/bin/sh", "-c", "sleep 30 & echo started; exit 3"};
  absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(options);
  ASSERT_TRUE(p.ok()) << p.status();
  std::optional<int> status = (*p)->Wait(absl::Seconds(1));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ((*p)->ExitCode(), 3);
  EXPECT_EQ((*p)->Lines(), std::vector<std::string>{"started"});
  kill(-(*p)->pid(), SIGKILL);  // the sleep, still in the child's process group
}

}  // namespace
}  // namespace phalanx::process
