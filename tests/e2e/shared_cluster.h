// The local cluster tests/e2e/shared_cluster.sh starts for a whole ctest run (CTest fixture
// e2e_shared_cluster), as a case finds it: through the folder in $PHALANX_E2E_SHARED_CLUSTER.
// Used by the operator end-to-end fixture and the kubectl cases.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace phalanx::testing {

// The value of `key=` in phalanx-localcluster's ready line
// ("ready <url> backend=real nodes=process (5.1s)" → "real" for "backend"); "" if absent.
inline std::string ReadyLineField(const std::string& ready_line, const std::string& key) {
  const std::string marker = " " + key + "=";
  const size_t at = ready_line.find(marker);
  if (at == std::string::npos) return "";
  const size_t from = at + marker.size();
  return ready_line.substr(from, ready_line.find(' ', from) - from);
}

struct SharedCluster {
  std::string kubeconfig;
  std::filesystem::path logs_dir;  // the pods' logs
  std::string ready_line;          // "ready <url> backend=real|builtin nodes=... (Ns)"
  std::string backend;             // "real" or "builtin"
};

// nullopt when $PHALANX_E2E_SHARED_CLUSTER is unset or empty (a binary run by hand starts its
// own cluster); FailedPrecondition when it names a folder whose cluster never became ready.
inline absl::StatusOr<std::optional<SharedCluster>> SharedClusterFromEnv() {
  const char* dir = std::getenv("PHALANX_E2E_SHARED_CLUSTER");
  if (dir == nullptr || *dir == '\0') return std::nullopt;
  const std::filesystem::path shared(dir);
  SharedCluster cluster;
  std::ifstream ready_file(shared / "ready");
  if (!std::getline(ready_file, cluster.ready_line)) {
    return absl::FailedPreconditionError(
        absl::StrCat("PHALANX_E2E_SHARED_CLUSTER=", shared.string(),
                     " has no ready line: its set-up test (E2eSharedCluster.Start) did not "
                     "finish"));
  }
  cluster.kubeconfig = (shared / "kubeconfig").string();
  cluster.logs_dir = shared / "cluster" / "logs";
  cluster.backend = ReadyLineField(cluster.ready_line, "backend");
  return cluster;
}

}  // namespace phalanx::testing
