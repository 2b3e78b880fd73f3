// phalanx-coord-demo: the coordination service in action, as real processes on this machine.
// Starts a coordinator and 4 sample workers, kills one mid-run, restarts it with a new
// incarnation (what the operator will do), sends a preemption notice, and prints a timeline:
// when the kill happened, when each survivor was told, when the new incarnation registered,
// steps lost, the agreed checkpoint step, and that the job finished.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/process_main.h"
#include "examples/local_job/local_job.h"

ABSL_FLAG(std::string, bin_dir, "build", "the build directory holding the binaries");
ABSL_FLAG(int, tasks, 4, "number of tasks");
ABSL_FLAG(int, steps, 150, "training steps");
ABSL_FLAG(int, kill_task, 2, "the task to kill");
ABSL_FLAG(bool, verbose, false, "also print every worker event as it happens");

namespace {

using phalanx::harness::LocalJob;
using phalanx::harness::LocalJobOptions;
using phalanx::harness::WorkerEvent;

constexpr absl::Duration kTimeout = absl::Seconds(60);

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

struct Line {
  int64_t t_ms;
  std::string text;
};

}  // namespace

int main(int argc, char** argv) {
  const phalanx::base::ProcessMain process(
      argc, argv,
      {"demo", "phalanx-coord-demo", "Kill-and-recover demo of the Phalanx coordination service."});
  process.ExitOnStopSignal();  // Ctrl-C ends it (its children die with it)
  // The demo failed: exit 1.
  auto Fail = [&process](const std::string& why) { return process.Fail(why, 1); };
  const int tasks = absl::GetFlag(FLAGS_tasks);
  const int victim = absl::GetFlag(FLAGS_kill_task);
  const int steps = absl::GetFlag(FLAGS_steps);
  if (tasks < 2 || victim < 0 || victim >= tasks)
    return Fail("need --tasks >= 2 and a valid --kill_task");

  LocalJobOptions options;
  options.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  options.work_dir =
      std::filesystem::temp_directory_path() / absl::StrCat("phalanx-demo-", getpid());
  options.job = "demo";
  options.num_tasks = tasks;
  options.worker_args = {absl::StrCat("--steps=", steps), "--step_time=25ms",
                         "--checkpoint_every=10"};
  options.echo = absl::GetFlag(FLAGS_verbose);
  std::filesystem::remove_all(options.work_dir);

  std::printf("Phalanx coordination demo: %d tasks x %d steps (25 ms each), checkpoint every 10\n",
              tasks, steps);
  std::printf("  work dir: %s\n", options.work_dir.c_str());
  auto started = LocalJob::Start(options);
  if (!started.ok()) return Fail(std::string(started.status().message()));
  LocalJob& job = **started;
  std::printf("  coordinator ready on %s; %d workers started\n", job.address().c_str(), tasks);
  std::fflush(stdout);

  // Let training get going: every task past step 30.
  for (int t = 0; t < tasks; ++t) {
    if (!job.WaitForEvent(t, "checkpoint", kTimeout,
                          [](const WorkerEvent& e) { return e.Int("step") >= 30; })) {
      return Fail(absl::StrCat("task ", t, " made no progress"));
    }
  }
  // Kill between checkpoints (~6 steps after step 30), so the recovery has steps to redo.
  absl::SleepFor(absl::Milliseconds(160));
  std::printf("  all tasks past step 30: killing task %d (SIGKILL)\n", victim);
  std::fflush(stdout);
  const int64_t t_kill = NowMs();
  job.worker(victim).Signal(SIGKILL);

  std::vector<Line> timeline = {{t_kill, absl::StrCat("task ", victim, " killed (SIGKILL)")}};
  std::vector<int64_t> detect_ms;
  for (int t = 0; t < tasks; ++t) {
    if (t == victim) continue;
    auto told = job.WaitForEvent(t, "peer_failed", kTimeout, [&](const WorkerEvent& e) {
      return e.Int("peer") == victim && e.t_ms >= t_kill - 5;
    });
    if (!told) return Fail(absl::StrCat("task ", t, " was never told"));
    detect_ms.push_back(told->t_ms - t_kill);
    timeline.push_back({told->t_ms, absl::StrCat("task ", t, " told: task ", victim, " failed (",
                                                 told->fields["reason"], ")")});
  }

  // What the operator does: recreate the task with incarnation + 1 (pod start ~ 200 ms here).
  job.worker(victim).Wait(absl::Seconds(5));
  const int64_t t_restart = NowMs();
  if (absl::Status s = job.StartWorker(victim); !s.ok()) return Fail(std::string(s.message()));
  timeline.push_back({t_restart, absl::StrCat("task ", victim, " restarted with incarnation ",
                                              job.incarnation(victim),
                                              " (by the demo, standing in for the operator)")});
  auto registered = job.WaitForEvent(victim, "connected", kTimeout,
                                     [](const WorkerEvent& e) { return e.incarnation == 1; });
  if (!registered) return Fail("the restarted task never registered");
  timeline.push_back(
      {registered->t_ms,
       absl::StrCat("task ", victim, " incarnation 1 registered with the coordinator")});
  auto resumed = job.WaitForEvent(victim, "start", kTimeout,
                                  [](const WorkerEvent& e) { return e.incarnation == 1; });
  if (!resumed) return Fail("the restarted task never resumed");
  int64_t lost_max = 0;
  for (int t = 0; t < tasks; ++t) {
    if (t == victim) continue;
    auto recovered = job.WaitForEvent(t, "recovered", kTimeout);
    if (!recovered) return Fail(absl::StrCat("task ", t, " never recovered"));
    lost_max = std::max(lost_max, recovered->Int("lost"));
    timeline.push_back(
        {recovered->t_ms,
         absl::StrCat("task ", t, " agreed to resume at step ", recovered->Int("resume_step"),
                      " (was at step ", recovered->Int("from_step"), ")")});
  }
  timeline.push_back(
      {resumed->t_ms, absl::StrCat("task ", victim, " resumed from its checkpoint at step ",
                                   resumed->Int("resume_step"))});

  // A preemption notice (as the node agent would send): every task checkpoints at one step.
  auto admin = job.AdminClient();
  const int64_t t_notice = NowMs();
  auto round = admin->NotifyPreemption(
      {"demo: node n1 spot instance-action", absl::Now() + absl::Seconds(30), {tasks - 1}});
  if (!round.ok()) return Fail(std::string(round.status().message()));
  timeline.push_back(
      {t_notice, "preemption notice for the node of task " + std::to_string(tasks - 1)});
  std::set<int64_t> sync_steps;
  int64_t t_synced = 0;
  for (int t = 0; t < tasks; ++t) {
    auto synced = job.WaitForEvent(t, "sync_checkpoint", kTimeout);
    if (!synced) return Fail(absl::StrCat("task ", t, " never checkpointed for the preemption"));
    sync_steps.insert(synced->Int("step"));
    t_synced = std::max(t_synced, synced->t_ms);
  }
  timeline.push_back(
      {t_synced, absl::StrCat("every task checkpointed at the agreed step ", *sync_steps.begin())});

  if (!job.WaitAllExited(absl::Seconds(120))) return Fail("not every task finished cleanly");
  std::set<std::string> states;
  int64_t t_done = 0;
  for (int t = 0; t < tasks; ++t) {
    auto done = job.WaitForEvent(t, "done", absl::Seconds(1));
    if (!done) return Fail(absl::StrCat("task ", t, " did not finish"));
    states.insert(done->fields["state"]);
    t_done = std::max(t_done, done->t_ms);
  }
  timeline.push_back(
      {t_done, absl::StrCat("job finished: all ", tasks, " tasks completed ", steps, " steps")});

  std::stable_sort(timeline.begin(), timeline.end(),
                   [](const Line& a, const Line& b) { return a.t_ms < b.t_ms; });
  std::printf("\nTimeline (ms after the kill)\n");
  for (const Line& line : timeline) {
    std::printf("  %+7lld ms  %s\n", static_cast<long long>(line.t_ms - t_kill), line.text.c_str());
  }
  std::sort(detect_ms.begin(), detect_ms.end());
  std::printf("\nSummary\n");
  std::printf("  failure detection: every survivor told within %lld ms (median %lld ms)\n",
              static_cast<long long>(detect_ms.back()),
              static_cast<long long>(detect_ms[detect_ms.size() / 2]));
  std::printf("  recovery: new incarnation registered %lld ms after the kill\n",
              static_cast<long long>(registered->t_ms - t_kill));
  std::printf("  steps lost: %lld (rolled back to the newest checkpoint every task had)\n",
              static_cast<long long>(lost_max));
  std::printf("  preemption: %zu agreed checkpoint step%s (%s)\n", sync_steps.size(),
              sync_steps.size() == 1 ? "" : "s",
              sync_steps.size() == 1 ? "consistent" : "INCONSISTENT");
  std::printf("  final model state identical on every task: %s\n",
              states.size() == 1 ? "yes" : "NO");
  std::printf("  logs: %s\n", options.work_dir.c_str());
  return states.size() == 1 && sync_steps.size() == 1 ? 0 : 1;
}
