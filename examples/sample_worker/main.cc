// phalanx-sample-worker: a simulated training task for demos and tests. Reads PHALANX_* from
// the environment (as the operator injects it) and runs SampleTrainer.
// Exit codes: 0 done, 2 bad configuration, 3 this incarnation was superseded or declared
// failed (restart it with a new incarnation), 4 checkpointed at a preemption sync point and left
// because its node is being preempted (move it), 1 any other failure.
#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/base/log.h"
#include "common/base/process_init.h"
#include "examples/sample_worker/sample_trainer.h"
#include "runtime/client/grpc_client.h"

ABSL_FLAG(int64_t, steps, 100, "steps to train");
ABSL_FLAG(absl::Duration, step_time, absl::Milliseconds(20), "simulated compute per step");
ABSL_FLAG(int64_t, checkpoint_every, 10, "checkpoint every this many steps");
ABSL_FLAG(std::string, checkpoint_dir, "/tmp/phalanx-checkpoints", "where checkpoints go");
ABSL_FLAG(absl::Duration, barrier_timeout, absl::Seconds(60), "per-step barrier timeout");

int main(int argc, char** argv) {
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
  absl::Status status = trainer.Run(**client);
  if (!status.ok()) {
    phalanx::examples::SampleTrainer::Event((*client)->task(), "failed",
                                            "reason=\"" + std::string(status.message()) + "\"");
    std::cerr << "phalanx-sample-worker: " << status << "\n";
    return absl::IsAborted(status) ? 3 : 1;
  }
  return trainer.LeftForPreemption() ? 4 : 0;
}
