// RealNodes: the local cluster's real-node back end (`--nodes-kind real`): N real kubelets
// v1.28.7, each with its own containerd (runc), CNI bridge and pod subnet, cgroup root and
// mount namespace (private /var/log/pods, /var/log/containers and /var/run/phalanx), placed by
// the real kube-scheduler, with kube-proxy (iptables) routing Services and CoreDNS answering
// cluster.local on every node's address. Pods run their images (imported into every node's
// containerd from the archives given, e.g. `make images`); fake GPUs are advertised as
// `nvidia.com/gpu` by a node-status patch (Kubernetes' documented way to advertise an extended
// resource; no device plugin yet). Every node has a cloud metadata server (GCE flavour) on its
// address (metadata_server.h). Faults act on the runtime: kill-pod signals the container's
// process (containerd task kill), stop-pod freezes it (cgroup freezer), node-not-ready stops the
// node's kubelet (SIGSTOP) so the node-lifecycle controller takes over, preempt-node does what a
// cloud does: the metadata server says preempted, the node is tainted, and its pods are evicted
// through the Eviction API after the grace period.
//
// Life cycle: Prepare() before the control plane (the API server binds node-0's address, so
// pods reach it through the kubernetes Service), Start() after it, Stop() undoes everything on
// the machine (host_changes.h), as the janitor does if this process is SIGKILLed.
// Thread-safe after Start.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/kube/json.h"
#include "common/kube/rest_client.h"
#include "common/process/subprocess.h"
#include "tests/localcluster/fault_injector.h"
#include "tests/localcluster/real_nodes/host_changes.h"
#include "tests/localcluster/real_nodes/metadata_server.h"
#include "tests/localcluster/real_nodes/node_assets.h"
#include "tests/localcluster/real_nodes/node_config.h"

namespace phalanx::localcluster {

struct RealNodesOptions {
  NodeAssets assets;
  std::string work_dir;  // absolute; the nodes live in work_dir/nodes
  int nodes = 2;
  int gpus_per_node = 0;
  std::map<std::string, std::string> node_labels;
  std::vector<kube::Json> node_taints;
  std::vector<std::string> image_archives;  // OCI/docker archives imported into every node
  std::string state_dir = kDefaultHostStateDir;
  // Runs `<janitor_program> janitor --state-dir DIR --owner PID` (empty: no janitor).
  std::string janitor_program;
  // How long a node whose kubelet stopped answering stays Ready, and then how long its pods
  // stay bound to it (the node-lifecycle controller's grace period and the default
  // not-ready/unreachable tolerations). Zero: Kubernetes' defaults (40 s, then 300 s).
  absl::Duration node_lost_after = absl::ZeroDuration();
  absl::Duration start_timeout = absl::Seconds(120);
};

class RealNodes final : public FaultTarget {
 public:
  // Takes the machine's lock, undoes what a dead predecessor left, records and makes what must
  // exist before the API server starts (each node's bridge with its address, cgroup roots,
  // mount points) and starts the janitor. FailedPrecondition when another real-node cluster
  // runs; InvalidArgument for a bad node count.
  static absl::StatusOr<std::unique_ptr<RealNodes>> Prepare(RealNodesOptions options);
  ~RealNodes() override;  // Stop()

  // The address the API server binds and advertises: node-0's (its bridge's gateway).
  const std::string& api_address() const { return nodes_.front().address; }
  // `token,user,uid,"groups"` lines the API server's token file must hold (kubelets as
  // system:node:<name>, kube-scheduler, kube-proxy, CoreDNS).
  std::vector<std::string> TokenLines() const;
  // Flags the control plane needs for options.node_lost_after (empty for the defaults).
  std::vector<std::string> ApiServerFlags() const;
  std::vector<std::string> ControllerManagerFlags() const;

  // Starts kube-scheduler, every node (containerd with the images, kubelet), kube-proxy and
  // CoreDNS; returns once every node is Ready and advertises its GPUs. Unavailable (with the
  // failing daemon's log tail) when a daemon exits or the deadline passes.
  absl::Status Start(const std::string& api_url, const std::string& ca_file,
                     const std::string& admin_token);
  // Undoes everything Prepare and Start did. Idempotent.
  void Stop();

  // "2 real kubelets v1.28.7, containerd 1.6.20"
  std::string Description() const;
  const std::vector<NodeLayout>& nodes() const { return nodes_; }

  // FaultTarget.
  absl::Status KillPod(const std::string& ns, const std::string& name, int signal) override;
  absl::Status StopPod(const std::string& ns, const std::string& name) override;
  absl::Status ContinuePod(const std::string& ns, const std::string& name) override;
  absl::Status FailPod(const std::string& ns, const std::string& name, int exit_code) override;
  absl::Status PreemptNode(const std::string& node, absl::Duration grace) override;
  absl::Status SetNodeReady(const std::string& node, bool ready) override;

 private:
  struct Daemon {
    std::string name;  // "kubelet node-0"
    std::string log;
    std::unique_ptr<process::Subprocess> process;
  };

  explicit RealNodes(RealNodesOptions options) : options_(std::move(options)) {}
  absl::Status PrepareHost();
  absl::Status StartJanitor();
  absl::Status StartDaemon(const std::string& name, const std::string& log,
                           std::vector<std::string> argv, Daemon** out = nullptr);
  absl::Status StartNode(NodeLayout& node, const std::string& api_url, const std::string& ca_file);
  absl::Status ImportImages(const NodeLayout& node);
  absl::Status WaitUntilReady(absl::Time deadline);
  absl::Status AdvertiseGpus();
  // A daemon that exited, as an error with its log's tail; OK while all run.
  absl::Status CheckDaemons() const;
  // `ctr --address <node's socket> -n k8s.io ARGS...`, its output in the node's ctr.log.
  absl::Status Ctr(const NodeLayout& node, std::vector<std::string> args,
                   absl::Duration timeout = absl::Seconds(30)) const;
  // The node and containerd task id of a pod's first container.
  absl::StatusOr<std::pair<const NodeLayout*, std::string>> ContainerOf(const std::string& ns,
                                                                        const std::string& name);
  const NodeLayout* FindNode(const std::string& name) const;
  Daemon* FindDaemon(const std::string& name);

  RealNodesOptions options_;
  std::unique_ptr<HostLock> lock_;
  HostRecord record_;
  std::vector<NodeLayout> nodes_;
  std::map<std::string, std::string> tokens_;  // user → token
  std::vector<Daemon> daemons_;
  std::unique_ptr<process::Subprocess> janitor_;
  std::unique_ptr<kube::RestClient> client_;  // admin, straight to kube-apiserver
  // One per node, by name; a node whose address:80 could not be bound has none (logged).
  std::map<std::string, std::unique_ptr<NodeMetadataServer>> metadata_;
  std::string kubelet_version_ = "unknown";
  std::string containerd_version_ = "unknown";
  absl::Notification stopping_;
  absl::Mutex mu_;
  std::vector<std::thread> preemptions_ ABSL_GUARDED_BY(mu_);
  bool stopped_ = false;
};

}  // namespace phalanx::localcluster
