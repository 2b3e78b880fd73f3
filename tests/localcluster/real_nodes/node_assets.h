// What the local cluster's real nodes need, found or explained: the Kubernetes 1.28 binaries
// (../shared/kubernetes-v1.28.7 unpacked into the build tree, or PHALANX_NODE_ASSETS), which
// also run the control plane (a kubelet must not be newer than its API server), and the
// machine's side: root, containerd + ctr + runc, the CNI plugins, iptables, unshare/nsenter.
// Pure reads of the environment and the file system; thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "tests/localcluster/envtest_assets.h"

namespace phalanx::localcluster {

struct NodeAssets {
  EnvtestAssets control_plane;  // etcd, kube-apiserver, kube-controller-manager (same dir)
  std::string kube_scheduler;
  std::string kubelet;
  std::string kube_proxy;
  std::string coredns;
  std::string kubectl;
  std::string containerd;
  std::string ctr;
  std::string unshare;
  std::string nsenter;
  std::string pause;    // the static pod-sandbox binary built beside phalanx-localcluster
  std::string testbox;  // the static misbehaving program of the node tests (testbox.c)
};

// FailedPrecondition naming what is missing and how to get it (so `--nodes-kind auto` can say
// why it chose process nodes).
absl::StatusOr<NodeAssets> FindNodeAssets();

}  // namespace phalanx::localcluster
