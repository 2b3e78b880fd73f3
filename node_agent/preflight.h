// `phalanx-agent preflight`: checks this node's GPUs before jobs land on it and prints a report.
// Without a GPU or driver it prints "preflight: skipped: no GPU (<why>)" and succeeds, so the
// same DaemonSet init step works on CPU nodes. With GPUs: the inventory and each GPU's health
// (exit 1 if any has failed), then an NCCL all-reduce over every local GPU with its bus
// bandwidth (exit 1 if it fails or its result is wrong).
#pragma once

#include <ostream>
#include <string>

namespace phalanx::agent {

// Returns the process exit code.
int RunPreflight(const std::string& nvml_path, std::ostream& out);

}  // namespace phalanx::agent
