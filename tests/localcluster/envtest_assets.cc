#include "tests/localcluster/envtest_assets.h"

#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace phalanx::localcluster {
namespace {

#ifndef PHALANX_ENVTEST_DIR
#define PHALANX_ENVTEST_DIR ""
#endif

bool Executable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::string FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", program);
    if (Executable(candidate)) return candidate;
  }
  return "";
}

std::string FindTool(const std::string& program) {
  std::string found = FindOnPath(program);
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/"}) {
    if (found.empty() && Executable(dir + program)) found = dir + program;
  }
  return found;
}

absl::StatusOr<EnvtestAssets> ProbeEnvtestAssets(const std::string& dir,
                                                 const std::string& source) {
  EnvtestAssets assets;
  assets.dir = dir;
  assets.source = source;
  assets.kube_apiserver = dir + "/kube-apiserver";
  if (!Executable(assets.kube_apiserver)) {
    return absl::NotFoundError(absl::StrCat(dir, " has no executable kube-apiserver"));
  }
  assets.etcd = Executable(dir + "/etcd") ? dir + "/etcd" : FindOnPath("etcd");
  if (assets.etcd.empty()) {
    return absl::NotFoundError(
        absl::StrCat(dir, " has no etcd and none is on PATH (apt-get install etcd-server)"));
  }
  if (Executable(dir + "/kube-controller-manager")) {
    assets.kube_controller_manager = dir + "/kube-controller-manager";
  }
  return assets;
}

absl::StatusOr<EnvtestAssets> FindEnvtestAssets() {
  if (const char* env = std::getenv("KUBEBUILDER_ASSETS"); env != nullptr && *env != '\0') {
    absl::StatusOr<EnvtestAssets> assets = ProbeEnvtestAssets(env, "KUBEBUILDER_ASSETS");
    if (!assets.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("KUBEBUILDER_ASSETS=", env, ": ", assets.status().message()));
    }
    return assets;
  }
  const std::string built = PHALANX_ENVTEST_DIR;
  if (built.empty()) {
    return absl::NotFoundError(
        "no control-plane assets: KUBEBUILDER_ASSETS is unset and this build found no "
        "../shared/envtest to unpack");
  }
  absl::StatusOr<EnvtestAssets> assets = ProbeEnvtestAssets(built, "build tree");
  if (!assets.ok()) {
    return absl::NotFoundError(absl::StrCat(
        "no control-plane assets: KUBEBUILDER_ASSETS is unset and ", assets.status().message()));
  }
  return assets;
}

}  // namespace phalanx::localcluster
