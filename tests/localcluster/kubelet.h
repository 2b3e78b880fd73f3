// Kubelet: the local cluster's node side. One object plays every virtual node, acting through a
// ClusterAccess (cluster_access.h: the built-in back end's ObjectStore in process, or a real
// kube-apiserver as an API client): it registers the Node objects, runs the scheduler pass
// (scheduler.h), and makes the pods bound to its nodes happen:
//   - on a process node each pod's spec.containers[0] is a real child process (command + args,
//     env with fieldRefs, workingDir; the image is ignored), logging to
//     <log_dir>/<namespace>_<pod>.log, restarted per restartPolicy with back-off;
//   - on a simulated node (as KWOK does) a bound pod is reported Running with no process, so
//     thousands of pods cost a few bytes each.
// Deleting a pod is graceful: SIGTERM to its process group, SIGKILL once
// deletionGracePeriodSeconds pass on the injected clock, then the kubelet's Delete with grace
// 0 removes the object. Fault injection (KillPod, StopPod, FailPod, PreemptNode, SetNodeReady)
// is public for tests and the local cluster's admin endpoint.
//
// Per pod, the container's life (one state machine; deletion can cut in anywhere):
//
//   bound ──start──> Running ──exit──> restartPolicy restarts? ──no──> Terminated
//                       ^                        │ yes                 (phase Succeeded/Failed)
//                       └──── restart_at ─── BackOff (CrashLoopBackOff, 1s doubling to 10s)
//   deletionTimestamp: Running ──SIGTERM──> Terminating ──exit, or SIGKILL at grace──> removed
//                      anything without a process ─────────────────────────────────> removed
//
// Work is level-triggered and incremental: a pass reads the pod events since the last pass
// (ClusterAccess::PodEventsSince), the pods with time-driven work (processes to poll, back-off and
// kill deadlines, preemptions), and every pod on a full resync every few seconds; it writes a
// pod's status only when it changed and re-reads on a conflict. Time comes from the injected
// Clock, so tests can drive a pass with SyncOnce() after FakeClock::Advance; only Stop()
// waits on real time (real processes take real time to die).
//
// Companions: container_launch.h (pod spec -> process), kubelet_status.h (the status JSON).
//
// Thread-safety: all methods are thread-safe. mu_ guards the per-pod and per-node state and is
// never held across a store call; pass_mu_ only keeps passes (the loop's and SyncOnce's) from
// interleaving.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/process/subprocess.h"
#include "tests/localcluster/cluster_access.h"
#include "tests/localcluster/store_types.h"

namespace phalanx::localcluster {

struct NodeConfig {
  std::string name;
  int gpus = 0;                               // status.allocatable["nvidia.com/gpu"]
  std::map<std::string, std::string> labels;  // kubernetes.io/hostname is added
  std::vector<Json> taints;                   // spec.taints as Kubernetes writes them
  bool simulated = false;                     // pods get no process (KWOK-style)
  // Its InternalIP and its pods' status.hostIP: a loopback address of its own, so that a
  // per-node server (the node agent's clique channel on a hostPort) can listen on it beside
  // the other nodes' on the same port. Pods still get podIP 127.0.0.1.
  std::string ip = "127.0.0.1";
};

class Kubelet {
 public:
  struct Options {
    std::vector<NodeConfig> nodes;
    std::string log_dir;  // created if missing; required when a node is not simulated
    // The loop wakes on any store change, and at least this often to poll processes.
    absl::Duration sync_interval = absl::Milliseconds(100);
    // Passes are at least this far apart (real time), so a busy store batches into one pass.
    absl::Duration min_pass_interval = absl::Milliseconds(10);
    // Injected-clock period of the full pass over every pod and node (Lease renewals too).
    absl::Duration full_resync_interval = absl::Seconds(5);
    // How often an unchanged node status is written again (its Ready heartbeat), as a kubelet
    // with node leases does (nodeStatusReportFrequency, 5 min): liveness is the Lease. Every
    // 5 s made 80 simulated nodes 16 node updates a second for every node watcher.
    absl::Duration node_status_report_interval = absl::Minutes(5);
    absl::Duration restart_backoff_initial = absl::Seconds(1);
    absl::Duration restart_backoff_max = absl::Seconds(10);
    // A container that ran this long restarts after the initial back-off again.
    absl::Duration restart_backoff_reset_after = absl::Seconds(60);
    // Stop(): how long (real time) processes get between SIGTERM and SIGKILL.
    absl::Duration stop_grace = absl::Seconds(5);
    // Added to every process pod's environment, under the pod's own env (e.g. the API
    // server's KUBERNETES_SERVICE_HOST/PORT).
    std::map<std::string, std::string> extra_env;
    bool run_scheduler = true;  // false: something else binds pods
  };

  Kubelet(ClusterAccess& access, base::Clock& clock, Options options);
  // Stop()s.
  ~Kubelet();
  Kubelet(const Kubelet&) = delete;
  Kubelet& operator=(const Kubelet&) = delete;

  // Registers the nodes and starts the loop thread. InvalidArgument for a bad node list (empty
  // or duplicate names, a process node without log_dir); Internal when log_dir cannot be made;
  // the store's error when a Node cannot be written; FailedPrecondition if already started.
  absl::Status Start();
  // Start() without the thread, for tests that drive passes with SyncOnce(). Same errors.
  absl::Status RegisterNodes();
  // One pass: schedule, sync nodes when due, sync the pods that need it. No-op after Stop().
  void SyncOnce();
  // Ends the loop, then SIGTERMs every pod's process group, SIGKILLs what is left after
  // stop_grace and reaps them all. Pod objects are left as they are. Idempotent.
  void Stop();

  // Fault injection. NotFound: no such pod on these nodes (or node, for the node calls).
  // Signals the pod's process group. FailedPrecondition: no running process (simulated,
  // finished or between restarts).
  absl::Status KillPod(const std::string& ns, const std::string& name, int signal = SIGKILL);
  absl::Status StopPod(const std::string& ns, const std::string& name);      // SIGSTOP
  absl::Status ContinuePod(const std::string& ns, const std::string& name);  // SIGCONT
  // A simulated pod's container exits with `exit_code` (the next pass reports it; restart
  // policy applies). FailedPrecondition: not a simulated pod, or its container is not running.
  absl::Status FailPod(const std::string& ns, const std::string& name, int exit_code);
  // Spot-VM preemption: taints the node (cloud.google.com/impending-node-termination=true:
  // NoSchedule), marks its pods DisruptionTarget=True, and once `grace` passes on the clock
  // deletes them gracefully (their own grace period applies). The taint is written before
  // this returns (or by a later pass if the write failed); the pods follow in passes. Removing
  // the taint by hand (kubectl taint nodes N cloud.google.com/impending-node-termination-) calls
  // the preemption off at the next pass: the node is not tainted again, its pods are no longer
  // DisruptionTarget and nothing bound to it later is evicted. (Before, the taint came back at
  // the next resync while every pod the scheduler placed on the untainted node in between was
  // evicted at once: with the operator moving each, a task moved six times in a second.)
  absl::Status PreemptNode(const std::string& node, absl::Duration grace);
  // The node's Ready condition; its pods report Ready=False while it is not. Processes keep
  // running.
  absl::Status SetNodeReady(const std::string& node, bool ready);

  // The pid of the pod's current process (tests use it to check the process is gone).
  std::optional<pid_t> PodPid(const std::string& ns, const std::string& name) const;

 private:
  using PodKey = std::tuple<std::string, std::string>;  // namespace, name
  struct PodRuntime;
  struct NodeState {
    bool ready = true;
    std::optional<absl::Time> evict_at;  // set by PreemptNode
    // The preemption taint was on the Node once: if it is gone now, someone removed it by hand,
    // and that calls the preemption off (SyncNode) instead of being put back.
    bool taint_seen = false;
    // The Node's resourceVersion this kubelet added the taint on top of: reads come from a
    // watched cache, and one that has not caught up with the taint still shows this version
    // without it, which is not a removal by hand.
    std::string untainted_version;
  };
  // What a pass does for one pod after deciding under mu_.
  struct Action {
    std::optional<Json> status;  // write this status
    bool evict = false;          // delete gracefully (preemption)
    bool remove = false;         // delete with grace 0: the containers are gone
  };

  void Loop();
  absl::Status ValidateOptions() const;
  // Creates the Node if missing; adds the preemption taint when due (or, when it was there and
  // is gone, calls the preemption off: no re-taint, no more evictions); writes status when the
  // Ready condition changed or the heartbeat is older than the resync interval; renews the
  // node's Lease.
  absl::Status SyncNode(const NodeConfig& config, absl::Time now);
  // The node's heartbeat Lease (kube-node-lease/<node>), created or renewed as a kubelet does;
  // the node-lifecycle controller of a real control plane reads it.
  absl::Status RenewNodeLease(const std::string& node, absl::Time now);
  // The pods a pass looks at: the latest object of each, or null for one that is gone.
  std::map<PodKey, Json> CollectWork(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pass_mu_);
  void SyncPod(const PodKey& key, const Json& pod, absl::Time now);
  // The state machine step for one pod; may start or signal processes.
  Action AdvanceLocked(PodRuntime& rt, const Json& pod, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartContainerLocked(PodRuntime& rt, const Json& pod, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The state.terminated of a process that exited (reaped here; `code` gets its exit code,
  // 128 + the signal that ended it), with FallbackToLogsOnError's message.
  Json ProcessExitStateLocked(PodRuntime& rt, const Json& pod, absl::Time now, int& code)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies restartPolicy to a run that ended as `terminated` (state.terminated).
  void ContainerExitedLocked(PodRuntime& rt, const Json& pod, int exit_code, Json terminated,
                             absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Json BuildStatusLocked(const PodRuntime& rt, const Json& pod, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SignalPod(const std::string& ns, const std::string& name, int signal);
  const NodeConfig* FindNode(const std::string& name) const;

  ClusterAccess& access_;
  base::Clock& clock_;
  const Options options_;
  const std::map<std::string, const NodeConfig*> node_index_;  // into options_.nodes
  std::string HostIp(const std::string& node) const;           // its NodeConfig::ip
  std::thread loop_;
  absl::Notification stop_;  // Stop() called: the loop ends

  absl::Mutex pass_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  uint64_t events_since_ ABSL_GUARDED_BY(pass_mu_) = 0;  // 0: no baseline yet, list
  std::optional<absl::Time> next_full_resync_ ABSL_GUARDED_BY(pass_mu_);

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, NodeState> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<PodKey, std::unique_ptr<PodRuntime>> pods_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::localcluster
