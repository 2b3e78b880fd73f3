// phalanx-sample-worker: a simulated training task for demos and tests. Reads PHALANX_* from
// the environment (as the operator injects it) and runs SampleTrainer.
// Exit codes: 0 done, 2 bad configuration, 3 this incarnation was superseded or declared
// failed (restart it with a new incarnation), 4 checkpointed at a preemption sync point and left
// because its node is being preempted (move it), 5 the node agent saw the GPU it uses fail
// (start it elsewhere), 143 / 130 stopped by SIGTERM / SIGINT (also as a container's PID 1),
// 1 any other failure.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/log.h"
#include "common/base/process_main.h"
#include "examples/sample_worker/sample_trainer.h"
#include "runtime/client/coordination_client_impl.h"
#include "runtime/client/spare_assignment.h"
#include "runtime/clique/agent_watch.h"
#include "runtime/clique/job_cliques.h"

ABSL_FLAG(int64_t, steps, 100, "steps to train");
ABSL_FLAG(absl::Duration, step_time, absl::Milliseconds(20), "simulated compute per step");
ABSL_FLAG(absl::Duration, load_time, absl::ZeroDuration(),
          "simulated start-up once connected, before the first step (loading a model)");
ABSL_FLAG(int64_t, checkpoint_every, 10, "checkpoint every this many steps");
ABSL_FLAG(std::string, checkpoint_dir, "/tmp/phalanx-checkpoints", "where checkpoints go");
ABSL_FLAG(absl::Duration, barrier_timeout, absl::Seconds(60), "per-step barrier timeout");
ABSL_FLAG(std::string, agent_devices, "",
          "the node's GPU indices this worker uses (\"0,1\"), reported to the node agent "
          "($PHALANX_CLIQUE_ADDRESS) so that a failing GPU ends it with exit 5; default "
          "$LOCAL_RANK where set; \"none\": no reports");

namespace {

// --agent_devices, or $LOCAL_RANK (one GPU per local rank); empty: nothing to report.
absl::StatusOr<std::vector<int>> AgentDevices() {
  std::string spec = absl::GetFlag(FLAGS_agent_devices);
  if (spec == "none") return std::vector<int>();
  if (spec.empty()) {
    const char* local_rank = std::getenv("LOCAL_RANK");
    spec = local_rank != nullptr ? local_rank : "";
  }
  std::vector<int> devices;
  for (absl::string_view d : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    int device = 0;
    if (!absl::SimpleAtoi(d, &device) || device < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--agent_devices: '", d, "' is not a GPU index (want \"0,1\" or none)"));
    }
    devices.push_back(device);
  }
  return devices;
}

}  // namespace

int main(int argc, char** argv) {
  const phalanx::base::ProcessMain process(
      argc, argv, {"worker", "phalanx-sample-worker", "A simulated Phalanx training task."});
  // As a container's PID 1 the worker would never see SIGTERM (the kernel drops a signal PID 1
  // has no handler for, so every pod deletion waited out its whole grace period); its state is
  // in its checkpoints, so it just ends as an unhandled signal would.
  process.ExitOnStopSignal();
  if (absl::GetFlag(FLAGS_steps) < 1 || absl::GetFlag(FLAGS_checkpoint_every) < 1) {
    return process.Fail("--steps and --checkpoint_every must be at least 1");
  }
  // A spare pod (spec.spares): wait, warm, until the coordinator hands this process a failed
  // task, then be that task (its environment, as a task pod's would be).
  if (std::getenv("PHALANX_SPARE") != nullptr && std::getenv("PHALANX_TASK_ID") == nullptr) {
    absl::StatusOr<phalanx::client::SpareConfig> spare = phalanx::client::SpareConfig::FromEnv();
    if (!spare.ok()) return process.Fail(std::string(spare.status().message()));
    absl::StatusOr<phalanx::client::SpareIdentity> task =
        phalanx::client::AwaitSpareAssignment(*spare, absl::Minutes(2));
    if (!task.ok()) return process.Fail(std::string(task.status().message()));
    // Nothing else runs yet: setenv is safe here.
    setenv("PHALANX_TASK_ID", absl::StrCat(task->task_id).c_str(), 1);
    setenv("PHALANX_INCARNATION", absl::StrCat(task->incarnation).c_str(), 1);
    setenv("PHALANX_TOKEN", task->credential.c_str(), 1);
    phalanx::examples::SampleTrainer::Event({task->task_id, task->incarnation}, "spare_took_over",
                                            "pod=" + spare->pod);
  }
  absl::StatusOr<phalanx::client::ClientConfig> config = phalanx::client::ClientConfig::FromEnv();
  if (!config.ok()) return process.Fail(std::string(config.status().message()));
  phalanx::examples::TrainerOptions options;
  options.steps = absl::GetFlag(FLAGS_steps);
  options.step_time = absl::GetFlag(FLAGS_step_time);
  options.load_time = absl::GetFlag(FLAGS_load_time);
  options.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.barrier_timeout = absl::GetFlag(FLAGS_barrier_timeout);

  phalanx::examples::SampleTrainer trainer(options, {config->task_id, config->incarnation});
  auto client = phalanx::client::CoordinationClientImpl::Create(*config, trainer.Callbacks());
  if (!client.ok()) return process.Fail(std::string(client.status().message()));
  absl::StatusOr<std::vector<int>> devices = AgentDevices();
  if (!devices.ok()) return process.Fail(std::string(devices.status().message()));
  // A failing GPU under this worker (the node agent's word): tell the peers now, then leave it.
  std::unique_ptr<phalanx::clique::AgentWatch> agent_watch;
  const phalanx::clique::JobCliques::Options agent = phalanx::clique::JobCliques::OptionsFromEnv();
  if (!agent.agent_socket.empty() && !devices->empty()) {
    const phalanx::client::TaskRef me = (*client)->task();
    phalanx::client::CoordinationClient& coordination = **client;
    agent_watch = std::make_unique<phalanx::clique::AgentWatch>(
        phalanx::clique::AgentWatch::Options{agent.agent_socket, agent.agent_key, config->job, me,
                                             "sample-trainer", *devices},
        phalanx::base::RealClock::Get(), [me, &coordination, &trainer](const std::string& reason) {
          phalanx::examples::SampleTrainer::Event(me, "device_failed", "reason=\"" + reason + "\"");
          trainer.LeaveWith(5);
          (void)coordination.ReportError("the node agent aborted this task: " + reason);
          std::fflush(nullptr);
          _exit(5);
        });
  }
  absl::Status status = trainer.Run(**client);
  if (!status.ok()) {
    phalanx::examples::SampleTrainer::Event((*client)->task(), "failed",
                                            "reason=\"" + std::string(status.message()) + "\"");
    return process.Fail(status.ToString(), absl::IsAborted(status) ? 3 : 1);
  }
  return trainer.LeftForPreemption() ? 4 : 0;
}
