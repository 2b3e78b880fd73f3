#include "operator/controller/gang.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"
#include "operator/api/codec.h"

namespace phalanx::op {
namespace {

constexpr char kCondition[] = "GangWaiting";

}  // namespace

absl::Duration GangBackoff(absl::Duration timeout, int releases, const std::string& uid) {
  absl::Duration wait = timeout;
  for (int i = 1; i < releases && wait < kMaxGangBackoff; ++i) wait *= 2;
  wait = std::min(wait, kMaxGangBackoff);
  // The offset: a fixed fraction of one timeout for this job, in milliseconds.
  const int64_t per_mille = static_cast<int64_t>(std::hash<std::string>{}(uid) % 1000);
  return wait + absl::Milliseconds(absl::ToInt64Milliseconds(timeout) * per_mille / 1000);
}

Next FormGang(const PlanInputs& in, JobPass& pass) {
  TrainingJobStatus& st = pass.out.status;
  if (!in.spec.gang_timeout.has_value() || st.start_time.has_value()) {
    if (st.start_time.has_value() && FindCondition(st.conditions, kCondition).has_value()) {
      Mark(pass, kCondition, false, "GangRunning", "every task ran together", in.now);
    }
    return Next::kContinue;
  }
  const absl::Duration timeout = *in.spec.gang_timeout;
  const std::string uid = kube::MetaString(in.job, "uid");
  if (st.gang_released_at.has_value()) {
    const absl::Time retry_at = *st.gang_released_at + GangBackoff(timeout, st.gang_releases, uid);
    if (in.now < retry_at) {
      pass.gang_hold = true;
      RequeueWithin(pass, retry_at - in.now);
      return Next::kContinue;
    }
  }
  int placed = 0, unplaced = 0;
  absl::Time oldest = absl::InfiniteFuture();
  for (const TaskRecord& record : pass.tasks) {
    if (!record.pod.has_value() || !record.pod->live()) continue;
    const PodView& pod = *record.pod;
    oldest = std::min(oldest, pod.created);
    if (pod.unschedulable) {
      ++unplaced;
    } else if (!pod.node.empty()) {
      ++placed;
    }
  }
  // Nothing placed holds nothing; a gang without an unplaceable pod is only slow.
  if (placed == 0 || unplaced == 0 || oldest == absl::InfiniteFuture()) return Next::kContinue;
  if (in.now < oldest + timeout) {
    RequeueWithin(pass, oldest + timeout - in.now);
    return Next::kContinue;
  }
  ++st.gang_releases;
  st.gang_released_at = in.now;
  const absl::Time retry_at = in.now + GangBackoff(timeout, st.gang_releases, uid);
  // What did not fit, in the scheduler's words: the Unschedulable condition the schedulability
  // stage wrote this pass (bounded there).
  const std::optional<Condition> unschedulable = FindCondition(st.conditions, "Unschedulable");
  const std::string message = absl::StrCat(
      placed, placed == 1 ? " task was" : " tasks were", " placed but not the whole gang within ",
      absl::FormatDuration(timeout), " (",
      unschedulable.has_value() ? unschedulable->message : std::string("no node fits"),
      "): their pods are deleted so the GPUs go back to the cluster; every task is created again "
      "at ",
      kube::FormatKubeTime(retry_at), " (release ", st.gang_releases, ")");
  Mark(pass, kCondition, true, "GangReleased", message, in.now);
  pass.out.events.push_back({true, "GangReleased", message});
  DeleteLiveSpares(in, pass);  // they give their GPUs back too, and start after the gang
  for (TaskRecord& record : pass.tasks) {
    if (record.pod.has_value() && record.pod->live()) {
      pass.out.delete_pods.push_back(record.pod->name);
    }
    // Its next incarnation, as a suspend gives: the released pods are neither failures nor
    // restarts, and the new pods cannot collide with the old ones still terminating.
    TaskStatus& task = record.status;
    task.incarnation = NextIncarnation(in, task.index, task.incarnation);
    task.rank_restarts_in_pod = 0;
    task.state = TaskState::kPending;
    task.pod.clear();
    task.node.clear();
    record.event = TaskEvent::kNone;
  }
  pass.gang_hold = true;
  RequeueWithin(pass, retry_at - in.now);
  return Next::kContinue;
}

}  // namespace phalanx::op
