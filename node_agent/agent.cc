#include "node_agent/agent.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/log.h"
#include "common/kube/node_preemption.h"
#include "common/kube/object_meta.h"

namespace phalanx::agent {
namespace {

bool SameConditions(const std::vector<NodeCondition>& a, const std::vector<NodeCondition>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].type != b[i].type || a[i].status != b[i].status || a[i].reason != b[i].reason ||
        a[i].message != b[i].message) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<GpuFailurePolicy> ParseGpuFailurePolicy(absl::string_view name) {
  if (name == "node") return GpuFailurePolicy::kNode;
  if (name == "task") return GpuFailurePolicy::kTask;
  return absl::InvalidArgumentError(absl::StrCat("unknown GPU failure policy '", name,
                                                 "' (node: move every task on the node; task: "
                                                 "only those using the failed GPU)"));
}

Agent::Agent(AgentOptions options, AgentMetrics& metrics, NodeMarker* marker, NodeEventSink events,
             std::vector<std::unique_ptr<NoticeSource>> sources, GpuHealthTracker* gpus,
             absl::Status nvml_status, CliqueRegistry& cliques)
    : options_(std::move(options)),
      metrics_(metrics),
      marker_(marker),
      events_(std::move(events)),
      sources_(std::move(sources)),
      gpus_(gpus),
      nvml_status_(std::move(nvml_status)),
      cliques_(cliques) {
  metrics_.SetNvmlAvailable(gpus_ != nullptr);
  // Each source's error counter exists from the start at 0, so that the first error is an
  // increase an alert can see (a series that appears at 1 shows none).
  for (const std::unique_ptr<NoticeSource>& source : sources_) {
    metrics_.NoticeSourceKnown(source->name());
  }
  if (gpus_ == nullptr) {
    metrics_.SetGpus(0);
    PHX_LOG(WARNING) << "no GPU health: " << nvml_status_;
  }
}

void Agent::TakeNotice(NodeNotice notice) {
  notice_ = std::move(notice);
  marked_ = false;  // (re)write the taint with this notice's deadline
  unmark_pending_ = false;
  metrics_.Notice(notice_->source, notice_->kind);
  PHX_LOG(WARNING) << "node notice: " << notice_->DebugString();
  if (events_) {
    events_(true, "PreemptionNotice",
            absl::StrCat(notice_->kind, " notice from ", notice_->source, " (", notice_->detail,
                         "): tasks on this node checkpoint and move"));
  }
}

void Agent::ClearNotice(const std::string& why) {
  PHX_LOG(INFO) << "node notice over (" << why << "): " << notice_->DebugString();
  if (events_) {
    events_(false, "PreemptionNoticeCleared",
            absl::StrCat(notice_->kind, " notice from ", notice_->source, " is over (", why,
                         "): the node takes new tasks again"));
  }
  unmark_pending_ = unmark_pending_ || marked_;
  marked_ = false;
  notice_.reset();
}

void Agent::FindLeftoverTaint() {
  absl::StatusOr<std::optional<FoundTaint>> found = marker_->FindTaint(kPreemptingTaint);
  if (!found.ok()) {
    PHX_LOG(WARNING) << "could not read node " << marker_->node_name()
                     << " for a taint an earlier agent left (retrying next tick): "
                     << found.status();
    return;
  }
  leftover_checked_ = true;
  if (!found->has_value() || (*found)->notice_kind != kMaintenanceNotice) return;
  for (const std::unique_ptr<NoticeSource>& source : sources_) {
    if (source->name() != (*found)->value) continue;
    leftover_source_ = source->name();
    PHX_LOG(INFO) << "node " << marker_->node_name() << " has the " << kPreemptingTaint
                  << " taint of a maintenance notice from " << leftover_source_
                  << " (an earlier agent's): lifted once that source no longer reports it";
  }
}

void Agent::LiftLeftoverTaintIfOver(const NoticeSource& source,
                                    const std::optional<NodeNotice>& seen) {
  if (leftover_source_.empty() || source.name() != leftover_source_ || !source.answered()) return;
  leftover_source_.clear();  // decided now: lifted, or this process's own notice from here on
  if (seen.has_value() && seen->kind == kMaintenanceNotice) return;
  PHX_LOG(INFO) << "the maintenance notice an earlier agent marked is over ("
                << (seen.has_value() ? seen->detail : "no longer reported") << ")";
  if (events_) {
    events_(false, "PreemptionNoticeCleared",
            absl::StrCat("maintenance notice from ", source.name(),
                         " (marked before the agent restarted) is over: the node takes new tasks "
                         "again"));
  }
  unmark_pending_ = true;  // lifted below unless another notice holds the node
}

void Agent::PollSources(absl::Time now) {
  if (!leftover_checked_ && marker_ != nullptr) FindLeftoverTaint();
  for (const std::unique_ptr<NoticeSource>& source : sources_) {
    absl::StatusOr<std::optional<NodeNotice>> polled = source->Poll(now);
    if (!polled.ok()) {
      metrics_.SourceError(source->name());
      if (std::optional<std::string> line =
              error_log_.OnError(source->name(), polled.status(), now);
          line.has_value()) {
        PHX_LOG(WARNING) << *line;
      }
      continue;
    }
    if (std::optional<std::string> line = error_log_.OnSuccess(source->name()); line.has_value()) {
      PHX_LOG(INFO) << *line;
    }
    const std::optional<NodeNotice>& seen = *polled;
    LiftLeftoverTaintIfOver(*source, seen);
    // A maintenance window that its own source no longer reports is over; a preemption is not.
    if (notice_.has_value() && notice_->kind == kMaintenanceNotice &&
        notice_->source == source->name() &&
        (!seen.has_value() || seen->kind != kMaintenanceNotice)) {
      ClearNotice(seen.has_value() ? seen->detail : "no longer reported");
    }
    if (!seen.has_value()) continue;
    const bool upgrade = notice_.has_value() && notice_->kind == kMaintenanceNotice &&
                         seen->kind == kPreemptionNotice;
    if (!notice_.has_value() || upgrade) TakeNotice(*seen);
  }
  if (unmark_pending_ && !notice_.has_value() && marker_ != nullptr) {
    absl::Status lifted = marker_->Untaint(kPreemptingTaint);
    if (lifted.ok()) {
      unmark_pending_ = false;
    } else {
      PHX_LOG(WARNING) << "could not lift the " << kPreemptingTaint << " taint of node "
                       << marker_->node_name() << " (retrying next tick): " << lifted;
    }
  }
  if (notice_.has_value() && !marked_ && marker_ != nullptr) {
    // The deadline goes with the taint: the operator gives the job's checkpoint the earlier of
    // it and its own grace (a GCE VM has 30 s whatever checkpointGraceSeconds says).
    std::map<std::string, std::string> annotations = {{kNoticeKindAnnotation, notice_->kind}};
    if (notice_->deadline != absl::InfiniteFuture()) {
      annotations[kube::kPreemptionDeadlineAnnotation] = kube::FormatKubeTime(notice_->deadline);
    }
    absl::Status tainted = marker_->Taint(kPreemptingTaint, notice_->source, annotations);
    if (tainted.ok()) {
      marked_ = true;
    } else {
      PHX_LOG(WARNING) << "could not taint node " << marker_->node_name()
                       << " (retrying next tick): " << tainted;
    }
  }
}

void Agent::TickGpus(absl::Time now) {
  if (gpus_ == nullptr) return;
  for (const GpuHealthTracker::FailedGpu& gpu : gpus_->Tick(now)) {
    const std::string why = absl::StrJoin(gpu.reasons, "; ");
    PHX_LOG(ERROR) << "GPU " << gpu.index << " (" << gpu.uuid << ") failed: " << why;
    failed_gpus_.push_back(gpu);
    if (options_.gpu_failure_policy == GpuFailurePolicy::kNode) {
      gpu_taints_pending_.push_back(absl::StrCat("gpu", gpu.index));
    }
    const int tasks = cliques_.RequestAbortForDevice(
        gpu.index, absl::StrCat("gpu ", gpu.index, " failed: ", why));
    if (events_) {
      events_(true, "GpuFailed",
              absl::StrCat("GPU ", gpu.index, " (", gpu.uuid, ") failed: ", why, "; ", tasks,
                           " local task(s) asked to abort their cliques"));
    }
  }
  while (!gpu_taints_pending_.empty() && marker_ != nullptr) {
    absl::Status tainted = marker_->Taint(kGpuFailedTaint, gpu_taints_pending_.front());
    if (!tainted.ok()) {
      PHX_LOG(WARNING) << "could not taint node for a failed GPU (retrying): " << tainted;
      break;
    }
    gpu_taints_pending_.erase(gpu_taints_pending_.begin());
  }
  const GpuHealthTracker::Counters counters = gpus_->counters();
  for (const auto& [code, count] : counters.xids_by_code) {
    uint64_t& seen = xids_seen_[code];
    for (; seen < count; ++seen) metrics_.AddXid(static_cast<int>(code));
  }
  std::map<std::string, int> by_health;
  for (const auto& [health, n] : counters.gpus_by_health)
    by_health[std::string(GpuHealthName(health))] = n;
  metrics_.SetGpusByHealth(by_health);
  metrics_.SetGpus(static_cast<int>(gpus_->inventory().gpus.size()));
}

std::vector<NodeCondition> Agent::Conditions(const std::vector<CheckResult>& checks) const {
  std::vector<NodeCondition> out;
  if (failed_gpus_.empty()) {
    out.push_back({"PhalanxGpuHealthy", true, gpus_ != nullptr ? "GpusHealthy" : "NoGpus",
                   gpus_ != nullptr ? "" : std::string(nvml_status_.message())});
  } else {
    std::vector<std::string> which;
    for (const auto& g : failed_gpus_) which.push_back(absl::StrCat("gpu", g.index));
    out.push_back({"PhalanxGpuHealthy", false, "GpuFailed",
                   absl::StrCat("failed: ", absl::StrJoin(which, ", "))});
  }
  std::vector<std::string> failing;
  for (const CheckResult& c : checks) {
    if (!c.ok) failing.push_back(absl::StrCat(c.name, ": ", c.message));
  }
  out.push_back({"PhalanxNodeChecks", failing.empty(),
                 failing.empty() ? "ChecksPassed" : "CheckFailed", absl::StrJoin(failing, "; ")});
  out.push_back({"PhalanxPreemptionNotice", notice_.has_value(),
                 notice_.has_value() ? "NoticeReceived" : "NoNotice",
                 notice_.has_value() ? notice_->DebugString() : ""});
  return out;
}

void Agent::Tick(absl::Time now) {
  PollSources(now);
  TickGpus(now);
  std::vector<CheckResult> checks;
  checks.push_back(CheckTransparentHugePages(options_.thp_path));
  const GpuInventory inventory = gpus_ != nullptr ? gpus_->inventory() : GpuInventory{};
  checks.push_back(
      CheckNvidiaDriver(gpus_ != nullptr ? absl::OkStatus() : nvml_status_, inventory));
  if (!options_.required_cuda.empty()) {
    checks.push_back(CheckCudaCompatibility(inventory.cuda_driver_version, options_.required_cuda));
  }
  for (const CheckResult& c : checks) metrics_.SetCheck(c.name, c.ok);
  // Reports of tasks that died without FORGET go after the registry's TTL (clients refresh).
  cliques_.Expire(now);
  metrics_.SetCliquesByState(cliques_.CountByState());
  if (marker_ != nullptr) {
    std::vector<NodeCondition> conditions = Conditions(checks);
    if (!SameConditions(conditions, written_conditions_)) {
      absl::Status written = marker_->SetConditions(conditions, now);
      if (written.ok()) {
        written_conditions_ = std::move(conditions);
      } else {
        PHX_LOG(WARNING) << "node conditions not written (retrying next tick): " << written;
      }
    }
  }
  metrics_.Checked(now);
}

}  // namespace phalanx::agent
