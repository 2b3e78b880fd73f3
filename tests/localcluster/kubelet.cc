#include "tests/localcluster/kubelet.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/log.h"
#include "common/kube/leader_election.h"
#include "common/kube/object_meta.h"
#include "tests/localcluster/container_launch.h"
#include "tests/localcluster/kubelet_status.h"
#include "tests/localcluster/scheduler.h"

namespace phalanx::localcluster {
namespace {

using kube::MetaString;
using kube::StringAt;

using kube::FieldOrNull;

// state.terminated for a container that ran from `started` and exited.
Json ExitState(int exit_code, std::optional<int> signal, absl::Time started, absl::Time now) {
  return TerminatedState(exit_code, signal, exit_code == 0 ? "Completed" : "Error", "", started,
                         now);
}

// What a real kubelet writes as a failed container's termination message under
// terminationMessagePolicy FallbackToLogsOnError (there is no termination-log file here): the
// log's last 80 lines, at most 2048 bytes, of this run only (`run_start`: the log's size when the
// run started; the log file is shared by every run and every pod of that name, as `kubectl logs`
// here shows them all). "" for any other policy, or an exit code of 0.
std::string FallbackTerminationMessage(const Json& pod, int exit_code, const std::string& log_path,
                                       std::streamoff run_start) {
  const Json& containers = FieldOrNull(FieldOrNull(pod, "spec"), "containers");
  if (exit_code == 0 || !containers.is_array() || containers.size() == 0 ||
      StringAt(containers.at(0), "terminationMessagePolicy") != "FallbackToLogsOnError") {
    return "";
  }
  constexpr std::streamoff kMaxBytes = 2048;
  constexpr int kMaxLines = 80;
  std::ifstream in(log_path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  in.seekg(std::max<std::streamoff>({0, run_start, size - kMaxBytes}));
  std::string tail((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> lines = absl::StrSplit(tail, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.size() > kMaxLines) lines.erase(lines.begin(), lines.end() - kMaxLines);
  return absl::StrJoin(lines, "\n");
}

int64_t MetaInt(const Json& object, const char* field) {
  const Json& value = FieldOrNull(FieldOrNull(object, "metadata"), field);
  return value.is_number() ? value.as_number().to_int64() : 0;
}

}  // namespace

// One pod's container as this kubelet runs it. Guarded by Kubelet::mu_.
struct Kubelet::PodRuntime {
  std::string uid;
  std::string node;
  bool simulated = false;
  Json pod;  // the latest object seen (event, list or our own write)
  ContainerPhase state = ContainerPhase::kCreating;
  absl::Time start_time;         // status.startTime
  absl::Time started_at;         // the current (or last) run's start
  std::streamoff log_start = 0;  // the log file's size when the current (or last) run started
  int restart_count = 0;
  std::unique_ptr<process::Subprocess> process;
  std::optional<int> injected_exit;  // FailPod, applied by the next pass
  Json terminated;                   // how the last run ended, once no restart follows
  Json last_terminated;              // lastState.terminated
  std::string waiting_message;       // CrashLoopBackOff's, or why kCreating waits
  std::string waiting_reason;        // with kCreating: "" (ContainerCreating) or why it waits
  absl::Time restart_at;
  absl::Duration backoff;
  std::string final_phase;     // Succeeded or Failed once decided
  bool adopted_final = false;  // found finished in the store: its status is not ours to write
  bool terminating = false;    // SIGTERM sent for deletion
  absl::Time kill_at;
  bool killed = false;
  bool evicted = false;
  bool dirty = false;    // look at it in the next pass even without an event
  bool refresh = false;  // our copy is stale (a conflict): re-read before the next pass
};

Kubelet::Kubelet(ClusterAccess& access, base::Clock& clock, Options options)
    : access_(access), clock_(clock), options_(std::move(options)), node_index_([this] {
        std::map<std::string, const NodeConfig*> index;
        for (const NodeConfig& node : options_.nodes) index.emplace(node.name, &node);
        return index;
      }()) {
  absl::MutexLock lock(&mu_);
  for (const NodeConfig& node : options_.nodes) nodes_[node.name] = NodeState{};
}

Kubelet::~Kubelet() { Stop(); }

std::string Kubelet::HostIp(const std::string& node) const {
  auto config = node_index_.find(node);
  return config != node_index_.end() ? config->second->ip : "127.0.0.1";
}

const NodeConfig* Kubelet::FindNode(const std::string& name) const {
  auto it = node_index_.find(name);
  return it == node_index_.end() ? nullptr : it->second;
}

absl::Status Kubelet::ValidateOptions() const {
  if (options_.nodes.empty()) return absl::InvalidArgumentError("kubelet: no nodes configured");
  if (node_index_.size() != options_.nodes.size() || node_index_.contains("")) {
    return absl::InvalidArgumentError("kubelet: node names must be non-empty and unique");
  }
  const bool any_process = std::any_of(options_.nodes.begin(), options_.nodes.end(),
                                       [](const NodeConfig& n) { return !n.simulated; });
  if (!any_process) return absl::OkStatus();
  if (options_.log_dir.empty()) {
    return absl::InvalidArgumentError("kubelet: log_dir is required for process nodes");
  }
  std::error_code ec;
  std::filesystem::create_directories(options_.log_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("kubelet: log_dir: ", ec.message()));
  return absl::OkStatus();
}

absl::Status Kubelet::RegisterNodes() {
  if (absl::Status s = ValidateOptions(); !s.ok()) return s;
  const absl::Time now = clock_.Now();
  for (const NodeConfig& node : options_.nodes) {
    // On a real control plane the node-lifecycle controller taints a new Node at once, so the
    // first status write may meet a conflict: re-read (the watched cache catches up) and retry.
    absl::Status s;
    for (int attempt = 0; attempt < 50; ++attempt) {
      const uint64_t seen = access_.Version();
      s = SyncNode(node, now);
      if (!absl::IsAborted(s)) break;
      access_.WaitForChange(seen, absl::Milliseconds(200));
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Kubelet::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (started_ || stopped_) return absl::FailedPreconditionError("kubelet: already started");
    started_ = true;
  }
  if (absl::Status s = RegisterNodes(); !s.ok()) return s;
  loop_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Kubelet::Loop() {
  while (!stop_.HasBeenNotified()) {
    const uint64_t seen = access_.Version();
    SyncOnce();
    if (stop_.WaitForNotificationWithTimeout(options_.min_pass_interval)) return;
    // Any store change wakes the next pass; processes and the clock are polled this often.
    access_.WaitForChange(seen, options_.sync_interval);
  }
}

void Kubelet::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stop_.Notify();
  if (loop_.joinable()) loop_.join();
  std::vector<std::unique_ptr<process::Subprocess>> processes;
  {
    // After any SyncOnce in flight, which may have just started one.
    absl::MutexLock pass(&pass_mu_);
    absl::MutexLock lock(&mu_);
    for (auto& [key, rt] : pods_) {
      if (rt->process != nullptr) processes.push_back(std::move(rt->process));
    }
  }
  for (auto& p : processes) p->SignalGroup(SIGTERM);
  const absl::Time deadline = absl::Now() + options_.stop_grace;
  for (auto& p : processes) p->Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()));
  for (auto& p : processes) {
    if (!p->ExitCode().has_value()) {
      p->SignalGroup(SIGKILL);
      p->Wait(absl::Seconds(5));
    }
  }
  processes.clear();  // reaps (and SIGKILLs the group of anything still there)
}

void Kubelet::SyncOnce() {
  absl::MutexLock pass(&pass_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
  }
  const absl::Time now = clock_.Now();
  if (options_.run_scheduler) SchedulePending(access_, clock_);
  const bool resync = !next_full_resync_.has_value() || now >= *next_full_resync_;
  for (const NodeConfig& node : options_.nodes) {
    bool preempting = false;
    {
      absl::MutexLock lock(&mu_);
      preempting = nodes_[node.name].evict_at.has_value();
    }
    // A node being preempted is looked at every pass, not only on a resync: its taint removed
    // by hand must call the preemption off before this pass evicts anything more there.
    if (!resync && !preempting) continue;
    if (absl::Status s = SyncNode(node, now); !s.ok() && !absl::IsAborted(s)) {
      PHX_LOG(WARNING) << "kubelet: node " << node.name << ": " << s;
    }
  }
  for (const auto& [key, pod] : CollectWork(now)) SyncPod(key, pod, now);
}

std::map<Kubelet::PodKey, Json> Kubelet::CollectWork(absl::Time now) {
  std::map<PodKey, Json> work;
  bool full = events_since_ == 0 || !next_full_resync_.has_value() || now >= *next_full_resync_;
  if (!full) {
    absl::StatusOr<std::vector<WatchEvent>> events = access_.PodEventsSince(events_since_);
    full = !events.ok();  // history moved past us: relist
    if (events.ok()) {
      for (WatchEvent& e : *events) {
        events_since_ = e.resource_version;
        PodKey key{e.ns, MetaString(e.object, "name")};
        if (e.type == "DELETED") {
          work[key] = Json::null();
        } else if (FindNode(StringAt(e.object, "spec.nodeName")) != nullptr) {
          work[key] = std::move(e.object);
        }
      }
    }
  }
  if (full) {
    absl::StatusOr<ListResult> list = access_.List("pods", kube::ObjectFilter{});
    if (list.ok()) {
      events_since_ = list->resource_version;
      next_full_resync_ = now + options_.full_resync_interval;
      for (Json& pod : list->items) {
        if (FindNode(StringAt(pod, "spec.nodeName")) == nullptr) continue;
        work[PodKey{MetaString(pod, "namespace"), MetaString(pod, "name")}] = std::move(pod);
      }
    }
  }
  std::vector<PodKey> stale;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, rt] : pods_) {
      if (work.contains(key)) continue;
      const std::optional<absl::Time>& evict_at = nodes_[rt->node].evict_at;
      if (full) {
        work[key] = Json::null();  // not listed: deleted while we were not looking
      } else if (rt->refresh) {
        stale.push_back(key);
      } else if (rt->process != nullptr || rt->dirty || rt->injected_exit.has_value() ||
                 rt->state == ContainerPhase::kBackOff ||
                 // waiting for a Secret: tried again each sync, as a kubelet retries a mount
                 (rt->state == ContainerPhase::kCreating && !rt->waiting_reason.empty()) ||
                 (evict_at.has_value() && !rt->evicted)) {
        work[key] = rt->pod;  // time-driven work: exits to notice, deadlines to meet
      }
    }
  }
  for (const PodKey& key : stale) {
    absl::StatusOr<Json> pod = access_.Get("pods", std::get<0>(key), std::get<1>(key));
    if (pod.ok()) {
      work[key] = *std::move(pod);
    } else if (absl::IsNotFound(pod.status())) {
      work[key] = Json::null();
    }
  }
  return work;
}

void Kubelet::SyncPod(const PodKey& key, const Json& pod, absl::Time now) {
  const auto& [ns, name] = key;
  std::unique_ptr<process::Subprocess> doomed;  // a deleted pod's process, killed unlocked
  Action action;
  std::string uid;
  {
    absl::MutexLock lock(&mu_);
    auto it = pods_.find(key);
    uid = MetaString(pod, "uid");
    if (it != pods_.end() && (pod.is_null() || it->second->uid != uid)) {
      // Deleted (or deleted and created again) behind our back: its container goes at once.
      doomed = std::move(it->second->process);
      pods_.erase(it);
      it = pods_.end();
    }
    if (pod.is_null()) {
      // nothing left to sync
    } else {
      if (it == pods_.end()) {
        auto rt = std::make_unique<PodRuntime>();
        rt->uid = uid;
        rt->node = StringAt(pod, "spec.nodeName");
        rt->simulated = FindNode(rt->node)->simulated;
        rt->backoff = options_.restart_backoff_initial;
        // A pod this kubelet ran before it was restarted keeps its start time and count.
        rt->start_time = kube::ParseKubeTime(StringAt(pod, "status.startTime")).value_or(now);
        const Json& statuses = FieldOrNull(FieldOrNull(pod, "status"), "containerStatuses");
        if (statuses.is_array() && statuses.size() > 0) {
          const Json& count = FieldOrNull(statuses.at(0), "restartCount");
          if (count.is_number()) rt->restart_count = count.as_number().to_int32();
        }
        const std::string phase = StringAt(pod, "status.phase");
        if (phase == "Succeeded" || phase == "Failed") {
          rt->adopted_final = true;
          rt->final_phase = phase;
          rt->state = ContainerPhase::kTerminated;
        }
        it = pods_.emplace(key, std::move(rt)).first;
      }
      PodRuntime& rt = *it->second;
      rt.pod = pod;
      rt.dirty = false;
      rt.refresh = false;
      action = AdvanceLocked(rt, pod, now);
    }
  }
  if (doomed != nullptr) {
    doomed->SignalGroup(SIGKILL);
    doomed.reset();  // reaps
  }
  if (action.status.has_value()) {
    Json updated = pod;
    updated["status"] = *std::move(action.status);
    absl::StatusOr<Json> written = access_.Update("pods", ns, updated, /*status=*/true);
    absl::MutexLock lock(&mu_);
    auto it = pods_.find(key);
    if (it != pods_.end() && it->second->uid == uid) {
      if (written.ok()) {
        it->second->pod = *written;
      } else if (!absl::IsNotFound(written.status())) {
        it->second->refresh = true;  // a conflict: re-read and redo next pass
      }
    }
  }
  if (action.evict || action.remove) {
    const std::optional<int64_t> grace = action.remove ? std::optional<int64_t>(0) : std::nullopt;
    const absl::Status s = access_.DeletePod(ns, name, uid, grace);
    const bool settled = s.ok() || absl::IsNotFound(s) || absl::IsFailedPrecondition(s);
    absl::MutexLock lock(&mu_);
    auto it = pods_.find(key);
    if (it == pods_.end() || it->second->uid != uid) return;
    if (!settled) {
      it->second->dirty = true;  // retry next pass
    } else if (action.remove) {
      pods_.erase(it);
    } else {
      it->second->evicted = true;
    }
  }
}

Kubelet::Action Kubelet::AdvanceLocked(PodRuntime& rt, const Json& pod, absl::Time now) {
  Action action;
  if (kube::IsBeingDeleted(pod)) {
    if (rt.process != nullptr) {
      const absl::Time deadline =
          now + absl::Seconds(std::max<int64_t>(0, MetaInt(pod, "deletionGracePeriodSeconds")));
      if (!rt.terminating) {
        rt.terminating = true;
        rt.kill_at = deadline;
        rt.process->SignalGroup(SIGTERM);
      }
      rt.kill_at = std::min(rt.kill_at, deadline);  // a second delete may shorten the grace
      if (!rt.killed && now >= rt.kill_at) {
        rt.killed = true;
        rt.process->SignalGroup(SIGKILL);
      }
      if (!rt.process->ExitCode().has_value()) return action;
      // As a real kubelet (1.27+) does: how the container ended and the pod's terminal phase
      // are written before the pod goes, so a watcher sees whether SIGTERM or SIGKILL ended it.
      int code = 0;
      rt.terminated = ProcessExitStateLocked(rt, pod, now, code);
      rt.state = ContainerPhase::kTerminated;
      rt.final_phase = code == 0 ? "Succeeded" : "Failed";
      Json status = BuildStatusLocked(rt, pod, now);
      if (!(status == FieldOrNull(pod, "status"))) action.status = std::move(status);
    }
    action.remove = true;
    return action;
  }
  if (rt.adopted_final) return action;
  const std::optional<absl::Time>& evict_at = nodes_[rt.node].evict_at;
  // Finished pods too: when the grace ends the node goes away, and every pod on it with it (a
  // task that checkpointed and exited during the grace must not outlive its node).
  action.evict = evict_at.has_value() && now >= *evict_at && !rt.evicted;

  switch (rt.state) {
    case ContainerPhase::kCreating:
      StartContainerLocked(rt, pod, now);
      break;
    case ContainerPhase::kRunning:
      if (rt.simulated && rt.injected_exit.has_value()) {
        const int code = *std::exchange(rt.injected_exit, std::nullopt);
        ContainerExitedLocked(rt, pod, code, ExitState(code, std::nullopt, rt.started_at, now),
                              now);
      } else if (rt.process != nullptr && rt.process->ExitCode().has_value()) {
        int code = 0;
        Json state = ProcessExitStateLocked(rt, pod, now, code);
        ContainerExitedLocked(rt, pod, code, std::move(state), now);
      }
      break;
    case ContainerPhase::kBackOff:
      if (now >= rt.restart_at) {
        ++rt.restart_count;
        StartContainerLocked(rt, pod, now);
      }
      break;
    case ContainerPhase::kTerminated:
      break;
  }
  Json status = BuildStatusLocked(rt, pod, now);
  if (!(status == FieldOrNull(pod, "status"))) action.status = std::move(status);
  return action;
}

Json Kubelet::ProcessExitStateLocked(PodRuntime& rt, const Json& pod, absl::Time now, int& code) {
  const int wait_status = rt.process->Wait(absl::ZeroDuration()).value_or(0);
  rt.process.reset();
  const std::optional<int> signal =
      WIFSIGNALED(wait_status) ? std::optional<int>(WTERMSIG(wait_status)) : std::nullopt;
  code = signal.has_value() ? 128 + *signal : WEXITSTATUS(wait_status);
  Json state = ExitState(code, signal, rt.started_at, now);
  const std::string message =
      FallbackTerminationMessage(pod, code,
                                 absl::StrCat(options_.log_dir, "/", MetaString(pod, "namespace"),
                                              "_", MetaString(pod, "name"), ".log"),
                                 rt.log_start);
  if (!message.empty()) state["message"] = Json::string(message);
  return state;
}

void Kubelet::StartContainerLocked(PodRuntime& rt, const Json& pod, absl::Time now) {
  rt.started_at = now;
  if (rt.simulated) {
    rt.state = ContainerPhase::kRunning;
    return;
  }
  const std::string ns = MetaString(pod, "namespace");
  const std::string name = MetaString(pod, "name");
  auto secret_value = [this, &ns](const std::string& secret,
                                  const std::string& key) -> std::optional<std::string> {
    absl::StatusOr<Json> object = access_.Get("secrets", ns, secret);
    if (!object.ok()) return std::nullopt;
    const Json& encoded = kube::FieldOrNull(kube::FieldOrNull(*object, "data"), key);
    std::string decoded;
    if (!encoded.is_string() || !absl::Base64Unescape(encoded.as_string(), &decoded)) {
      return std::nullopt;
    }
    return decoded;
  };
  const Json& containers = kube::FieldOrNull(kube::FieldOrNull(pod, "spec"), "containers");
  if (containers.is_array() && containers.size() > 0) {
    if (absl::Status image = CheckImageReference(StringAt(containers.at(0), "image"));
        !image.ok()) {
      // As a kubelet does: the container waits (InvalidImageName) and the pod stays Pending;
      // only a new pod can fix it. Checked again each sync, like a pull that failed.
      if (rt.waiting_reason != "InvalidImageName") {
        PHX_LOG(WARNING) << "kubelet: " << ns << "/" << name << " waits: " << image;
      }
      rt.waiting_reason = "InvalidImageName";
      rt.waiting_message = std::string(image.message());
      return;
    }
  }
  const std::string log_path = absl::StrCat(options_.log_dir, "/", ns, "_", name, ".log");
  std::error_code size_error;
  const std::uintmax_t log_size = std::filesystem::file_size(log_path, size_error);
  rt.log_start = size_error ? 0 : static_cast<std::streamoff>(log_size);
  absl::StatusOr<process::SubprocessOptions> launch = ContainerLaunchOptions(
      pod, log_path, options_.extra_env, secret_value,
      absl::StrCat(options_.log_dir, "/", ns, "_", name, ".volumes"), HostIp(rt.node));
  if (absl::IsFailedPrecondition(launch.status())) {
    // A Secret or key the pod needs is missing: a real kubelet keeps the pod Pending and retries
    // (FailedMount for a volume, CreateContainerConfigError for env); it never fails the pod.
    // The container stays in kCreating and the next sync tries again.
    if (rt.waiting_message != launch.status().message()) {
      PHX_LOG(WARNING) << "kubelet: " << ns << "/" << name << " waits: " << launch.status();
    }
    rt.waiting_reason = absl::StrContains(launch.status().message(), "volume ")
                            ? "ContainerCreating"
                            : "CreateContainerConfigError";
    rt.waiting_message = std::string(launch.status().message());
    return;
  }
  rt.waiting_reason.clear();
  absl::StatusOr<std::unique_ptr<process::Subprocess>> child =
      launch.ok() ? process::Subprocess::Start(*std::move(launch)) : launch.status();
  if (!child.ok()) {
    PHX_LOG(WARNING) << "kubelet: " << ns << "/" << name << " cannot run: " << child.status();
    // As a runtime reports a container it could not start: exit code 128.
    ContainerExitedLocked(rt, pod, 128,
                          TerminatedState(128, std::nullopt, "ContainerCannotRun",
                                          std::string(child.status().message()), now, now),
                          now);
    return;
  }
  rt.process = *std::move(child);
  rt.state = ContainerPhase::kRunning;
  PHX_LOG(INFO) << "kubelet: started " << ns << "/" << name << " on " << rt.node << " (pid "
                << rt.process->pid() << ", restart " << rt.restart_count << ")";
}

void Kubelet::ContainerExitedLocked(PodRuntime& rt, const Json& pod, int exit_code, Json terminated,
                                    absl::Time now) {
  std::string policy = StringAt(pod, "spec.restartPolicy");
  if (policy.empty()) policy = "Always";  // the API server's default
  if (!rt.simulated) {
    PHX_LOG(INFO) << "kubelet: " << MetaString(pod, "namespace") << "/" << MetaString(pod, "name")
                  << " exited with " << exit_code;
  }
  if (policy == "Always" || (policy == "OnFailure" && exit_code != 0)) {
    if (now - rt.started_at >= options_.restart_backoff_reset_after) {
      rt.backoff = options_.restart_backoff_initial;
    }
    rt.last_terminated = std::move(terminated);
    rt.state = ContainerPhase::kBackOff;
    rt.restart_at = now + rt.backoff;
    const Json& containers = FieldOrNull(FieldOrNull(pod, "spec"), "containers");
    rt.waiting_message = absl::StrCat(
        "back-off ", absl::FormatDuration(rt.backoff), " restarting failed container=",
        containers.is_array() && containers.size() > 0 ? StringAt(containers.at(0), "name") : "",
        " pod=", MetaString(pod, "name"), "_", MetaString(pod, "namespace"), "(", rt.uid, ")");
    rt.backoff = std::min(rt.backoff * 2, options_.restart_backoff_max);
    return;
  }
  rt.terminated = std::move(terminated);
  rt.state = ContainerPhase::kTerminated;
  rt.final_phase = exit_code == 0 ? "Succeeded" : "Failed";
}

Json Kubelet::BuildStatusLocked(const PodRuntime& rt, const Json& pod, absl::Time now) const {
  PodReport report;
  report.phase = !rt.final_phase.empty()                 ? rt.final_phase
                 : rt.state == ContainerPhase::kCreating ? "Pending"
                                                         : "Running";
  report.start_time = rt.start_time;
  report.all_containers = rt.simulated;  // a process node runs containers[0] only
  const auto node = nodes_.find(rt.node);
  report.node_ready = node != nodes_.end() && node->second.ready;
  report.host_ip = HostIp(rt.node);
  report.disruption_target = node != nodes_.end() && node->second.evict_at.has_value();
  report.container = rt.state;
  report.restart_count = rt.restart_count;
  report.started_at = rt.started_at;
  report.container_id =
      absl::StrCat(rt.simulated ? "simulated://" : "process://", rt.uid, "-", rt.restart_count);
  report.terminated = rt.terminated;
  report.last_terminated = rt.last_terminated;
  report.waiting_message = rt.waiting_message;
  report.waiting_reason = rt.waiting_reason;
  return PodStatus(pod, report, now);
}

absl::Status Kubelet::SyncNode(const NodeConfig& config, absl::Time now) {
  absl::StatusOr<Json> node = access_.Get("nodes", "", config.name);
  if (absl::IsNotFound(node.status())) {
    node = access_.Create("nodes", "", NewNodeObject(config.name, config.labels, config.taints));
    // Created already, and our watched cache has not seen it yet: a conflict to re-read.
    if (absl::IsAlreadyExists(node.status())) return absl::AbortedError(node.status().message());
  }
  if (!node.ok()) return node.status();
  NodeReport report{config.name, config.gpus, config.simulated, true, config.ip};
  bool preempting = false;
  bool taint_seen = false;
  std::string untainted_version;
  {
    absl::MutexLock lock(&mu_);
    report.ready = nodes_[config.name].ready;
    preempting = nodes_[config.name].evict_at.has_value();
    taint_seen = nodes_[config.name].taint_seen;
    untainted_version = nodes_[config.name].untainted_version;
  }
  Json tainted = *node;
  const bool has_taint = !AddPreemptionTaint(tainted, now);
  const std::string version = MetaString(*node, "resourceVersion");
  if (preempting && !has_taint && taint_seen && version == untainted_version) {
    // The cache has not caught up with our own taint yet (a loaded machine): wait for it.
    return RenewNodeLease(config.name, now);
  }
  if (preempting && !has_taint && taint_seen) {
    PHX_LOG(INFO) << "kubelet: node " << config.name
                  << ": preemption taint removed by hand; the preemption is called off";
    absl::MutexLock lock(&mu_);
    NodeState& state = nodes_[config.name];
    state.evict_at.reset();
    state.taint_seen = false;
    state.untainted_version.clear();
    for (auto& [key, rt] : pods_) {
      if (rt->node == config.name) rt->dirty = true;  // DisruptionTarget goes
    }
  } else if (preempting && !has_taint) {
    node = access_.Update("nodes", "", tainted, /*status=*/false);
    if (!node.ok()) return node.status();
    absl::MutexLock lock(&mu_);
    nodes_[config.name].taint_seen = true;
    nodes_[config.name].untainted_version = version;
  } else if (preempting) {
    absl::MutexLock lock(&mu_);
    nodes_[config.name].taint_seen = true;
  }
  const Json& old_status = FieldOrNull(*node, "status");
  Json status = NodeStatus(old_status, report, now, options_.node_status_report_interval);
  if (status != old_status) {
    Json updated = *node;
    updated["status"] = std::move(status);
    if (absl::Status s = access_.Update("nodes", "", updated, /*status=*/true).status(); !s.ok()) {
      return s;
    }
  }
  return RenewNodeLease(config.name, now);
}

absl::Status Kubelet::RenewNodeLease(const std::string& node, absl::Time now) {
  constexpr char kLeaseNamespace[] = "kube-node-lease";
  absl::StatusOr<Json> lease = access_.Get("leases", kLeaseNamespace, node);
  if (absl::IsNotFound(lease.status())) {
    Json fresh = Json::object();
    fresh["apiVersion"] = Json::string("coordination.k8s.io/v1");
    fresh["kind"] = Json::string("Lease");
    fresh["metadata"]["name"] = Json::string(node);
    fresh["metadata"]["namespace"] = Json::string(kLeaseNamespace);
    fresh["spec"]["holderIdentity"] = Json::string(node);
    fresh["spec"]["leaseDurationSeconds"] = Json::number(40);
    fresh["spec"]["renewTime"] = Json::string(kube::FormatMicroTime(now));
    return access_.Create("leases", kLeaseNamespace, fresh).status();
  }
  if (!lease.ok()) return lease.status();
  Json renewed = *lease;
  renewed["spec"]["renewTime"] = Json::string(kube::FormatMicroTime(now));
  return access_.Update("leases", kLeaseNamespace, renewed, /*status=*/false).status();
}

absl::Status Kubelet::SignalPod(const std::string& ns, const std::string& name, int signal) {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(PodKey{ns, name});
  if (it == pods_.end()) {
    return absl::NotFoundError(absl::StrCat("pod ", ns, "/", name, " is not on this kubelet"));
  }
  PodRuntime& rt = *it->second;
  if (rt.process == nullptr || rt.process->ExitCode().has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("pod ", ns, "/", name, " has no running process",
                     rt.simulated ? " (simulated node: use FailPod)" : ""));
  }
  rt.process->SignalGroup(signal);
  rt.dirty = true;
  return absl::OkStatus();
}

absl::Status Kubelet::KillPod(const std::string& ns, const std::string& name, int signal) {
  return SignalPod(ns, name, signal);
}

absl::Status Kubelet::StopPod(const std::string& ns, const std::string& name) {
  return SignalPod(ns, name, SIGSTOP);
}

absl::Status Kubelet::ContinuePod(const std::string& ns, const std::string& name) {
  return SignalPod(ns, name, SIGCONT);
}

absl::Status Kubelet::FailPod(const std::string& ns, const std::string& name, int exit_code) {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(PodKey{ns, name});
  if (it == pods_.end()) {
    return absl::NotFoundError(absl::StrCat("pod ", ns, "/", name, " is not on this kubelet"));
  }
  PodRuntime& rt = *it->second;
  if (!rt.simulated) {
    return absl::FailedPreconditionError(
        absl::StrCat("pod ", ns, "/", name, " runs a process: use KillPod"));
  }
  if (rt.state != ContainerPhase::kRunning || kube::IsBeingDeleted(rt.pod)) {
    return absl::FailedPreconditionError(
        absl::StrCat("pod ", ns, "/", name, "'s container is not running"));
  }
  rt.injected_exit = exit_code;
  rt.dirty = true;
  return absl::OkStatus();
}

absl::Status Kubelet::PreemptNode(const std::string& node, absl::Duration grace) {
  const NodeConfig* config = FindNode(node);
  if (config == nullptr) return absl::NotFoundError(absl::StrCat("node ", node, " not found"));
  const absl::Time now = clock_.Now();
  {
    absl::MutexLock lock(&mu_);
    std::optional<absl::Time>& evict_at = nodes_[node].evict_at;
    evict_at = std::min(evict_at.value_or(absl::InfiniteFuture()), now + grace);
  }
  absl::Status s;
  for (int attempt = 0; attempt < 3; ++attempt) {  // a conflict with the loop's node write
    s = SyncNode(*config, now);
    if (!absl::IsAborted(s)) break;
  }
  return absl::IsAborted(s) ? absl::OkStatus() : s;  // still conflicting: the loop retries
}

absl::Status Kubelet::SetNodeReady(const std::string& node, bool ready) {
  const NodeConfig* config = FindNode(node);
  if (config == nullptr) return absl::NotFoundError(absl::StrCat("node ", node, " not found"));
  {
    absl::MutexLock lock(&mu_);
    nodes_[node].ready = ready;
    for (auto& [key, rt] : pods_) {
      if (rt->node == node) rt->dirty = true;
    }
  }
  absl::Status s;
  for (int attempt = 0; attempt < 3; ++attempt) {
    s = SyncNode(*config, clock_.Now());
    if (!absl::IsAborted(s)) break;
  }
  return absl::IsAborted(s) ? absl::OkStatus() : s;
}

std::optional<pid_t> Kubelet::PodPid(const std::string& ns, const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = pods_.find(PodKey{ns, name});
  if (it == pods_.end() || it->second->process == nullptr) return std::nullopt;
  return it->second->process->pid();
}

}  // namespace phalanx::localcluster
