// What the real-node back end changes on the machine outside its work folder, recorded before
// it changes it, and undone from that record: by the harness when it stops, by the next start
// when a harness died without stopping (SIGKILL), and by its janitor process, which outlives a
// SIGKILLed harness and undoes the record at once (RunJanitor).
//
// The record lives in a state folder (/run/phalanx-localcluster: tmpfs, so a reboot, which
// undoes everything anyway, also forgets it). One real-node cluster runs per machine at a time
// (pod subnets, bridge names and kube-proxy's iptables chains are per machine): HostLock holds
// an flock on the folder's lock file for the cluster's life, and the kernel drops it when the
// process dies however it dies.
//
// Undo, in order: SIGKILL every process whose command line names the work folder (kubelets,
// containerd and their shims, kube-proxy, CoreDNS) and every process in the nodes' cgroups
// (the containers), unmount everything under the work folder, remove the nodes' cgroups in
// every hierarchy, delete the nodes' bridges and their veths, delete the KUBE-* and CNI-*
// iptables chains and the rules that jump to them, restore the sysctls the kubelet and the
// CNI bridge plugin set, remove the host folders created as mount points, delete the record.
// Each step is best effort and reports what it could not undo.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace phalanx::localcluster {

constexpr char kDefaultHostStateDir[] = "/run/phalanx-localcluster";

struct HostRecord {
  pid_t owner = 0;       // the harness that made the changes
  std::string work_dir;  // absolute
  // /proc/sys paths relative to /proc/sys ("net/ipv4/ip_forward") → value before the start.
  std::map<std::string, std::string> sysctls;
  std::vector<std::string> created_dirs;  // host folders made as mount points, to remove
};

// The sysctls a real node changes (the kubelet: vm.overcommit_memory, kernel.panic,
// kernel.panic_on_oops; the CNI bridge plugin: net.ipv4.ip_forward).
const std::vector<std::string>& SysctlsNodesChange();

// "key value" lines; Parse is its inverse (InvalidArgument for anything else).
std::string FormatHostRecord(const HostRecord& record);
absl::StatusOr<HostRecord> ParseHostRecord(const std::string& text);

class HostLock {
 public:
  // Waits up to `wait` for the lock (a cluster that just stopped, or its janitor, may still hold
  // it for a moment). FailedPrecondition naming the holder's pid when another real-node cluster
  // still runs then; Internal when the state folder cannot be created.
  static absl::StatusOr<std::unique_ptr<HostLock>> Acquire(
      const std::string& state_dir, absl::Duration wait = absl::ZeroDuration());
  ~HostLock();
  HostLock(const HostLock&) = delete;
  HostLock& operator=(const HostLock&) = delete;

  const std::string& record_path() const { return record_path_; }
  // The record a previous holder left (it died without undoing), if any.
  absl::StatusOr<HostRecord> Leftover() const;
  // Written atomically; Internal on I/O errors.
  absl::Status Save(const HostRecord& record) const;
  void Forget() const;  // removes the record

 private:
  HostLock(int fd, std::string record_path) : fd_(fd), record_path_(std::move(record_path)) {}
  int fd_;
  std::string record_path_;
};

// Undoes everything `record` describes (above). Returns one line per thing it could not undo
// (empty: all clean).
std::vector<std::string> UndoHostChanges(const HostRecord& record);

// What is left on the machine of any real-node cluster (processes, mounts under work_dir,
// cgroups, bridges, iptables chains), one line each; empty when clean. Tests check it.
std::vector<std::string> FindHostLeftovers(const std::string& work_dir);

// Runs a system tool found by FindTool (ip, iptables) with stderr discarded; its stdout lines,
// or nullopt when it cannot run, fails or outlives `timeout`.
std::optional<std::vector<std::string>> RunSystemTool(const std::vector<std::string>& argv,
                                                      absl::Duration timeout = absl::Seconds(20));

// The cgroup hierarchies mounted under /sys/fs/cgroup (v1 controllers and the v2 "unified"; the
// root itself on a pure cgroup v2 machine).
std::vector<std::string> CgroupHierarchies();

// The janitor: waits (pidfd, no polling) for `owner` to exit; if it exited leaving its record
// in `state_dir`, takes the lock and undoes it. Returns the process exit code.
int RunJanitor(const std::string& state_dir, pid_t owner);

}  // namespace phalanx::localcluster
