// Small process-environment helpers shared by config loaders (coordinator flags, the
// client's PHALANX_* config, kubeconfig / in-cluster config).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace phalanx::base {

// Looks up an environment variable; injectable so config loaders can be tested.
using GetenvFn = std::function<std::optional<std::string>(const std::string&)>;

// The process environment (std::getenv).
std::optional<std::string> ProcessGetenv(const std::string& name);

// The whole file; NotFound "cannot read PATH: reason" when it cannot be opened or read.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace phalanx::base
