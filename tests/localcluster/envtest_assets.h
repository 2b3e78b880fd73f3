// Where the local cluster finds a real control plane: an envtest-style assets directory
// (controller-runtime's layout: one directory holding `etcd`, `kube-apiserver` and, optionally,
// `kube-controller-manager`), named by KUBEBUILDER_ASSETS, else the build tree's unpacked copy
// of ../shared/envtest (the build runs its unpack.sh; see tests/localcluster/CMakeLists.txt).
// etcd may also come from PATH (Debian's etcd-server) when the directory has none. Pure reads
// of the environment and the file system; thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace phalanx::localcluster {

struct EnvtestAssets {
  std::string dir;
  std::string etcd;
  std::string kube_apiserver;
  std::string kube_controller_manager;  // empty: none (no garbage collection, namespace
                                        // deletion or ServiceAccount tokens)
  std::string source;                   // "KUBEBUILDER_ASSETS" or "build tree"
};

// NotFound with the reason (what was looked for, where, and how to provide it) when no usable
// assets exist; FailedPrecondition when KUBEBUILDER_ASSETS names a directory that lacks them
// (a user who set it wants it used, so this is not silently replaced by the built-in back end).
absl::StatusOr<EnvtestAssets> FindEnvtestAssets();

// The assets in `dir` (NotFound saying what is missing); `source` describes where dir came from.
absl::StatusOr<EnvtestAssets> ProbeEnvtestAssets(const std::string& dir, const std::string& source);

// The first executable `program` on PATH, or "".
std::string FindOnPath(const std::string& program);
// PATH, then the sbin folders a non-login root shell may lack (ip, iptables, runc); "" if none.
std::string FindTool(const std::string& program);

}  // namespace phalanx::localcluster
