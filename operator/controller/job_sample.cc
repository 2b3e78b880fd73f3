#include "operator/controller/job_sample.h"

#include <algorithm>

#include "common/kube/object_meta.h"
#include "operator/api/codec.h"
#include "operator/controller/schedulability.h"

namespace phalanx::op {

JobSample SampleJob(const kube::Json& job) {
  const TrainingJobStatus status = DecodeStatus(job);
  JobSample s;
  s.ns = kube::MetaString(job, "namespace");
  s.name = kube::MetaString(job, "name");
  s.phase = status.phase.empty() ? std::string(kPhasePending) : status.phase;
  s.unschedulable = JobIsUnschedulable(job);
  s.productive_seconds = status.productive_seconds;
  const GoodputStatus& g = status.goodput;
  s.lost_seconds[kLostDetection] = g.detection_seconds;
  s.lost_seconds[kLostCoordinatorOutage] = g.coordinator_outage_seconds;
  s.lost_seconds[kLostRolledBack] = g.rolled_back_seconds;
  s.lost_seconds[kLostRegroup] = g.regroup_seconds;
  // The parts add up to lostSeconds; what they do not name is the phases' own loss. Never
  // negative, should a hand-edited status disagree.
  s.lost_seconds[kLostRecovery] =
      std::max(0.0, status.lost_seconds - g.detection_seconds - g.coordinator_outage_seconds -
                        g.rolled_back_seconds - g.regroup_seconds);
  s.before_first_step_seconds = g.before_first_step_seconds;
  s.restarts = status.restarts;
  s.rank_restarts = status.rank_restarts;
  s.last_recovery_seconds = status.last_recovery_seconds;
  s.preemptions = status.preemptions;
  s.coordinator_restarts = status.coordinator.restarts;
  s.spares_total = status.spares.total;
  s.spares_ready = status.spares.ready;
  return s;
}

void JobSampleCache::Add(const kube::Json& job) {
  const std::string key = kube::MetaString(job, "namespace") + "/" + kube::MetaString(job, "name");
  const std::string version = kube::MetaString(job, "resourceVersion");
  Entry& entry = entries_[key];
  if (entry.sample.name.empty() || version.empty() || entry.resource_version != version) {
    entry.sample = SampleJob(job);
    entry.resource_version = version;
  }
  entry.seen = true;
}

std::vector<JobSample> JobSampleCache::Take() {
  std::vector<JobSample> out;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (!it->second.seen) {
      it = entries_.erase(it);  // deleted since
      continue;
    }
    it->second.seen = false;
    out.push_back(it->second.sample);
    ++it;
  }
  return out;
}

}  // namespace phalanx::op
