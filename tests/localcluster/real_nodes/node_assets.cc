#include "tests/localcluster/real_nodes/node_assets.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace phalanx::localcluster {
namespace {

#ifndef PHALANX_NODE_ASSETS_DIR
#define PHALANX_NODE_ASSETS_DIR ""
#endif
#ifndef PHALANX_PAUSE_BINARY
#define PHALANX_PAUSE_BINARY ""
#endif
#ifndef PHALANX_TESTBOX_BINARY
#define PHALANX_TESTBOX_BINARY ""
#endif

bool Executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

}  // namespace

absl::StatusOr<NodeAssets> FindNodeAssets() {
  std::string dir = PHALANX_NODE_ASSETS_DIR;
  std::string source = "build tree (../shared/kubernetes-v1.28.7)";
  if (const char* env = std::getenv("PHALANX_NODE_ASSETS"); env != nullptr && *env != '\0') {
    dir = env;
    source = "PHALANX_NODE_ASSETS";
  }
  if (dir.empty()) {
    return absl::FailedPreconditionError(
        "no node assets: this build found no ../shared/kubernetes-v1.28.7 to unpack and "
        "PHALANX_NODE_ASSETS is unset");
  }
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "real nodes need root (mounts, cgroups, bridges, iptables)");
  }
  absl::StatusOr<EnvtestAssets> plane = ProbeEnvtestAssets(dir, source);
  if (!plane.ok()) return absl::FailedPreconditionError(plane.status().message());
  NodeAssets a;
  a.control_plane = *plane;
  if (a.control_plane.kube_controller_manager.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " has no kube-controller-manager"));
  }
  for (auto [field, name] : std::initializer_list<std::pair<std::string*, const char*>>{
           {&a.kube_scheduler, "kube-scheduler"},
           {&a.kubelet, "kubelet"},
           {&a.kube_proxy, "kube-proxy"},
           {&a.coredns, "coredns"},
           {&a.kubectl, "kubectl"}}) {
    *field = absl::StrCat(dir, "/", name);
    if (!Executable(*field)) {
      return absl::FailedPreconditionError(absl::StrCat(dir, " (", source, ") has no ", name));
    }
  }
  for (auto [field, name, package] :
       std::initializer_list<std::tuple<std::string*, const char*, const char*>>{
           {&a.containerd, "containerd", "containerd"},
           {&a.ctr, "ctr", "containerd"},
           {nullptr, "runc", "runc"},
           {nullptr, "iptables", "iptables"},
           {nullptr, "ip", "iproute2"},
           {&a.unshare, "unshare", "util-linux"},
           {&a.nsenter, "nsenter", "util-linux"}}) {
    const std::string path = FindTool(name);
    if (path.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("real nodes need ", name, " (apt-get install ", package, ")"));
    }
    if (field != nullptr) *field = path;
  }
  for (const char* plugin : {"bridge", "host-local", "portmap", "loopback"}) {
    if (!Executable(absl::StrCat("/usr/lib/cni/", plugin))) {
      return absl::FailedPreconditionError(
          absl::StrCat("real nodes need the CNI plugin /usr/lib/cni/", plugin,
                       " (apt-get install containernetworking-plugins)"));
    }
  }
  a.pause = PHALANX_PAUSE_BINARY;
  if (a.pause.empty() || !Executable(a.pause)) {
    return absl::FailedPreconditionError(
        "no phalanx-pause binary in this build (a static link "
        "failed? install libc6-dev)");
  }
  a.testbox = PHALANX_TESTBOX_BINARY;
  if (a.testbox.empty() || !Executable(a.testbox)) {
    return absl::FailedPreconditionError("no phalanx-testbox binary in this build");
  }
  return a;
}

}  // namespace phalanx::localcluster
