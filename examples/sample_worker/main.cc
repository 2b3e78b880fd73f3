// phalanx-sample-worker: a simulated training task for demos and tests. Reads PHALANX_* from
// the environment (as the operator injects it) and runs SampleTrainer.
// Exit codes: 0 done, 2 bad configuration, 3 this incarnation was superseded or declared
// failed (restart it with a new incarnation), 4 checkpointed at a preemption sync point and left
// because its node is being preempted (move it), 5 the node agent saw the GPU it uses fail
// (start it elsewhere), 143 / 130 stopped by SIGTERM / SIGINT (also as a container's PID 1),
// 1 any other failure.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/base/log.h"
#include "common/base/process_init.h"
#include "examples/sample_worker/sample_trainer.h"
#include "runtime/client/grpc_client.h"
#include "runtime/clique/agent_watch.h"
#include "runtime/clique/job_cliques.h"

ABSL_FLAG(int64_t, steps, 100, "steps to train");
ABSL_FLAG(absl::Duration, step_time, absl::Milliseconds(20), "simulated compute per step");
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

// As a container's PID 1 the worker would never see SIGTERM: the kernel drops a signal that PID 1
// has no handler for, so every pod deletion waited out its whole grace period. Ends the process as
// an unhandled SIGTERM or SIGINT would (exit 128 + the signal), saying so. Call before any thread
// starts, so that every thread inherits the blocked mask and only the waiting thread takes them.
void ExitOnStopSignals() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::thread([stop] {
    int sig = 0;
    if (sigwait(&stop, &sig) != 0) return;
    std::fprintf(stderr, "phalanx-sample-worker: signal %d: stopping\n", sig);
    std::fflush(nullptr);
    _exit(128 + sig);
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  ExitOnStopSignals();
  phalanx::base::InitProcess("worker", "phalanx-sample-worker");  // before --version is parsed
  absl::SetProgramUsageMessage("A simulated Phalanx training task.");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_steps) < 1 || absl::GetFlag(FLAGS_checkpoint_every) < 1) {
    std::cerr << "phalanx-sample-worker: --steps and --checkpoint_every must be at least 1\n";
    return 2;
  }
  absl::StatusOr<phalanx::client::ClientConfig> config = phalanx::client::ClientConfig::FromEnv();
  if (!config.ok()) {
    std::cerr << "phalanx-sample-worker: " << config.status().message() << "\n";
    return 2;
  }
  phalanx::examples::TrainerOptions options;
  options.steps = absl::GetFlag(FLAGS_steps);
  options.step_time = absl::GetFlag(FLAGS_step_time);
  options.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.barrier_timeout = absl::GetFlag(FLAGS_barrier_timeout);

  phalanx::examples::SampleTrainer trainer(options, {config->task_id, config->incarnation});
  auto client = phalanx::client::GrpcCoordinationClient::Create(*config, trainer.Callbacks());
  if (!client.ok()) {
    std::cerr << "phalanx-sample-worker: " << client.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::vector<int>> devices = AgentDevices();
  if (!devices.ok()) {
    std::cerr << "phalanx-sample-worker: " << devices.status().message() << "\n";
    return 2;
  }
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
    std::cerr << "phalanx-sample-worker: " << status << "\n";
    return absl::IsAborted(status) ? 3 : 1;
  }
  return trainer.LeftForPreemption() ? 4 : 0;
}
