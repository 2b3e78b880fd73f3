#include "tests/localcluster/real_nodes/node_config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace phalanx::localcluster {

const std::vector<std::string>& PerNodeHostPaths() {
  // /var/lib/kubelet/device-plugins: kubelet 1.28 binds its device-plugin registration socket
  // there whatever its --root-dir; two kubelets starting at once on a loaded machine raced for
  // it ("bind: address already in use") and one exited.
  static const std::vector<std::string> kPaths = {"/var/log/pods", "/var/log/containers",
                                                  "/var/run/phalanx",
                                                  "/var/lib/kubelet/device-plugins"};
  return kPaths;
}

NodeLayout LayOutNode(const std::string& work_dir, int index) {
  NodeLayout node;
  node.index = index;
  node.name = absl::StrCat("node-", index);
  node.dir = absl::StrCat(work_dir, "/nodes/", node.name);
  node.bridge = absl::StrCat(kBridgePrefix, index);
  node.pod_subnet = absl::StrCat("10.244.", index, ".0/24");
  node.address = absl::StrCat("10.244.", index, ".1");
  node.cgroup_root = absl::StrCat(kCgroupPrefix, index);
  return node;
}

std::string ContainerdConfig(const NodeLayout& node, const std::string& sandbox_image) {
  const std::string& d = node.dir;
  return absl::StrCat(R"(version = 2
root = ")",
                      d, R"(/containerd-root"
state = ")",
                      d, R"(/containerd-state"
[grpc]
  address = ")",
                      node.containerd_socket(), R"("
[ttrpc]
  address = ")",
                      d, R"(/containerd-ttrpc.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = ")",
                      d, R"(/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = ")",
                      sandbox_image, R"("
  # Root here lacks CAP_SYS_RESOURCE: without this every sandbox fails to set its oom_score_adj.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = ")",
                      d, R"(/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = ")",
                      node.cni_conf_dir(), R"("
)");
}

std::string CniNetwork(const NodeLayout& node) {
  return absl::StrCat(R"({"cniVersion": "0.4.0", "name": "phalanx-)", node.name, R"(", "plugins": [
  {"type": "bridge", "bridge": ")",
                      node.bridge,
                      R"(", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": ")",
                      node.pod_subnet, R"("}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": ")",
                      node.dir, R"(/cni-data"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
)");
}

std::string KubeletConfig(const NodeLayout& node, const std::string& client_ca_file,
                          absl::Duration node_lost_after) {
  const std::string lease =
      node_lost_after > absl::ZeroDuration()
          ? absl::StrCat("nodeLeaseDurationSeconds: ",
                         std::max<int64_t>(4, absl::ToInt64Seconds(node_lost_after)), "\n")
          : "";
  return absl::StrCat(R"(apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /)",
                      node.cgroup_root, R"(
failSwapOn: false
# The default -999 cannot be applied here (no CAP_SYS_RESOURCE).
oomScoreAdj: 0
address: )",
                      node.address, R"(
port: )",
                      node.kubelet_port, R"(
healthzBindAddress: 127.0.0.1
healthzPort: )",
                      node.kubelet_healthz_port, R"(
readOnlyPort: 0
clusterDomain: )",
                      kClusterDomain, R"(
clusterDNS: [)",
                      node.address, R"(]
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: )",
                      client_ca_file, R"(}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://)",
                      node.containerd_socket(), R"(
imageServiceEndpoint: unix://)",
                      node.containerd_socket(), R"(
podCIDR: )",
                      node.pod_subnet, R"(
# Nodes share the machine's disk and memory: evict only when they are truly gone, and never
# garbage-collect the images the harness imported (there is no registry to pull them again).
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Fast feedback: status changes reach the API server within a second or two.
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
)",
                      lease);
}

std::string KubeProxyConfig(const std::string& kubeconfig, int metrics_port, int healthz_port) {
  return absl::StrCat(R"(apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: )",
                      kClusterPodCidr, R"(
oomScoreAdj: 0
metricsBindAddress: 127.0.0.1:)",
                      metrics_port, R"(
healthzBindAddress: 127.0.0.1:)",
                      healthz_port, R"(
clientConnection: {kubeconfig: )",
                      kubeconfig, R"(}
# Leave the machine's conntrack sysctls alone.
conntrack: {maxPerCore: 0}
)");
}

std::string Corefile(const std::vector<NodeLayout>& nodes, const std::string& kubeconfig) {
  std::vector<std::string> addresses;
  for (const NodeLayout& n : nodes) addresses.push_back(n.address);
  return absl::StrCat(".:53 {\n    bind ", absl::StrJoin(addresses, " "),
                      "\n    errors\n    kubernetes ", kClusterDomain,
                      " in-addr.arpa ip6.arpa {\n        kubeconfig ", kubeconfig,
                      "\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n"
                      "    }\n}\n");
}

std::string TokenKubeconfig(const std::string& server, const std::string& ca_file,
                            const std::string& token) {
  return absl::StrCat(
      "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n"
      "    server: ",
      server, "\n    certificate-authority: ", ca_file,
      "\nusers:\n- name: user\n  user:\n    token: ", token,
      "\ncontexts:\n- name: local\n  context:\n    cluster: local\n"
      "    user: user\ncurrent-context: local\n");
}

}  // namespace phalanx::localcluster
