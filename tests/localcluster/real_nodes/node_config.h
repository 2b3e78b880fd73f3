// What a real node of the local cluster is made of, as data and as the configuration files its
// daemons read: where node i lives (folders, sockets, its CNI bridge, pod subnet, address and
// cgroup root) and the text of containerd's config, the CNI network, the kubelet's config,
// kube-proxy's config, CoreDNS's Corefile and token kubeconfigs. Every fact these encode was
// verified on these machines (../shared/kubernetes-v1.28.7/README.md): e.g. containerd needs
// restrict_oom_score_adj (root lacks CAP_SYS_RESOURCE here), the kubelet needs oomScoreAdj 0 and
// a cgroup root of its own. Pure functions (no I/O); thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace phalanx::localcluster {

// Pod subnets: node i owns 10.244.i.0/24; its bridge's gateway 10.244.i.1 is also the node's
// InternalIP, the address its kubelet serves on, and where CoreDNS answers its pods.
constexpr char kClusterPodCidr[] = "10.244.0.0/16";
constexpr char kServiceCidr[] = "10.96.0.0/16";
constexpr char kKubernetesServiceIp[] = "10.96.0.1";
constexpr char kClusterDomain[] = "cluster.local";
// Names every host-level thing the back end creates, so a later start can find leftovers.
constexpr char kBridgePrefix[] = "phx-node";
constexpr char kCgroupPrefix[] = "phalanx-node-";
// Host folders DaemonSet pods and the kubelet share by path; each node gets private copies
// in its own mount namespace (two kubelets 1.28 on one machine delete each other's pod logs
// under /var/log/pods; the agents' socket folder would be one for all nodes).
const std::vector<std::string>& PerNodeHostPaths();

struct NodeLayout {
  int index = 0;
  std::string name;         // node-<index>
  std::string dir;          // WORK/nodes/<name>
  std::string bridge;       // phx-node<index>
  std::string pod_subnet;   // 10.244.<index>.0/24
  std::string address;      // 10.244.<index>.1
  std::string cgroup_root;  // phalanx-node-<index>
  int kubelet_port = 0;
  int kubelet_healthz_port = 0;

  std::string containerd_socket() const { return dir + "/containerd.sock"; }
  std::string containerd_config() const { return dir + "/containerd.toml"; }
  std::string cni_conf_dir() const { return dir + "/cni-conf"; }
  std::string kubelet_config() const { return dir + "/kubelet.yaml"; }
  std::string kubelet_root() const { return dir + "/kubelet"; }
  std::string kubeconfig() const { return dir + "/kubelet.kubeconfig"; }
  // Private copies of PerNodeHostPaths(): <dir>/host/<path>.
  std::string host_path(const std::string& path) const { return dir + "/host" + path; }
};

// Node `index` (0..254) under work_dir; ports are filled in by the caller.
NodeLayout LayOutNode(const std::string& work_dir, int index);

std::string ContainerdConfig(const NodeLayout& node, const std::string& sandbox_image);
std::string CniNetwork(const NodeLayout& node);
// node_lost_after > 0 shortens the node lease to it (renewed every quarter of it), so a
// controller grace period that short never sees a healthy node as lost.
std::string KubeletConfig(const NodeLayout& node, const std::string& client_ca_file,
                          absl::Duration node_lost_after = absl::ZeroDuration());
std::string KubeProxyConfig(const std::string& kubeconfig, int metrics_port, int healthz_port);
// CoreDNS on port 53 of every node's address, serving cluster.local from the API server.
std::string Corefile(const std::vector<NodeLayout>& nodes, const std::string& kubeconfig);
// A kubeconfig that authenticates with a bearer token.
std::string TokenKubeconfig(const std::string& server, const std::string& ca_file,
                            const std::string& token);

}  // namespace phalanx::localcluster
