// `phalanx-agent preflight`: checks this node's GPUs before jobs land on it and prints a report.
// Without a GPU or driver it prints "preflight: skipped: no GPU (<why>)" and succeeds, so the
// same DaemonSet init step works on CPU nodes. With GPUs: the inventory and each GPU's health
// (exit 1 if any has failed). The NCCL all-reduce and bandwidth check are not in it yet: they
// need a GPU machine to be written against (see the issue-5 closing note).
#pragma once

#include <ostream>
#include <string>

namespace phalanx::agent {

// Returns the process exit code.
int RunPreflight(const std::string& nvml_path, std::ostream& out);

}  // namespace phalanx::agent
