#include "operator/controller/spares.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "operator/controller/failure_policy.h"
#include "operator/controller/move_budget.h"

namespace phalanx::op {
namespace {

// The pod a spare took over from, once its exit is known: a fatal exit fails the job as it
// would have without the spare (the coordinator acts before the exit code is known).
const PodView* FatallyEnded(const PlanInputs& in, const TaskRecord& record) {
  for (const PodView& pod : record.stale) {
    if (pod.incarnation + 1 == record.status.incarnation && pod.ended() &&
        ClassifyFailure(in.spec.failure_policy, pod) == FailureClass::kFatal &&
        pod.phase == PodPhase::kFailed) {
      return &pod;
    }
  }
  return nullptr;
}

// The first pass that sees a spare's take-over of `record`'s task counts it; false when that
// spent the last of maxRestarts (the job failed).
bool CountTakeOver(const PlanInputs& in, JobPass& pass, TaskRecord& record) {
  TaskStatus& task = record.status;
  const size_t i = static_cast<size_t>(task.index);
  const Incarnation before =
      i < in.previous.tasks.size() ? in.previous.tasks[i].incarnation : base::kNoIncarnation;
  task.spare_of = record.pod->name;
  if (before != base::kNoIncarnation && before >= task.incarnation) return true;  // counted
  TrainingJobStatus& st = pass.out.status;
  // A task under a preemption that checkpointed and left is a preemption taken over, not a
  // failure: it counts as the preemption stage counts a move.
  const bool preempted =
      i < in.previous.tasks.size() && in.previous.tasks[i].preempting_since.has_value();
  const FailurePolicy& policy = in.spec.failure_policy;
  const bool spends_restart = !preempted || policy.preemptions_count_toward_max_restarts;
  if (spends_restart && st.restarts >= policy.max_restarts) {
    FailJob(in, pass, "MaxRestartsExceeded",
            absl::StrCat("task ", task.index, " failed and spare pod ", record.pod->name,
                         " took it over; the job was already restarted ", st.restarts,
                         st.restarts == 1 ? " time" : " times", " (maxRestarts ",
                         policy.max_restarts, ")"));
    return false;
  }
  ++task.restarts;
  if (preempted) {
    ++st.preemptions;
    if (in.spec.failure_policy.preemptions_count_toward_max_restarts) ++st.restarts;
    RecordMove(task, in.now);
    task.preempting_since.reset();
  } else {
    ++st.restarts;
  }
  ++st.spares.takeovers;
  st.last_restart_time = in.now;
  st.productive_at_last_restart = st.productive_seconds;
  std::string why = preempted ? "it was preempted and left" : "its process died";
  if (auto failed = in.world.coordinator_failed.find(task.index);
      failed != in.world.coordinator_failed.end() && failed->second.incarnation == before) {
    why = absl::StrCat("the coordinator declared incarnation ", before,
                       " failed: ", failed->second.reason);
    task.last_failure_message = failed->second.reason;
  }
  task.last_failure_reason = preempted ? "Preempted" : "SpareTookOver";
  task.last_exit_code.reset();
  task.failure_reported_at.reset();
  pass.out.replacements.push_back({task.index, preempted, "SpareTookOver"});
  pass.out.events.push_back(
      {true, "SpareTookOver",
       absl::StrCat("task ", task.index, ": ", why, "; spare pod ", record.pod->name,
                    " took it over as incarnation ", task.incarnation)});
  return true;
}

}  // namespace

Next ManageSpares(const PlanInputs& in, JobPass& pass) {
  const JobObservation& world = in.world;
  TrainingJobStatus& st = pass.out.status;
  // Take-overs: the pod becomes the task's in its labels too.
  for (const PodView& spare : world.spare_pods) {
    auto it = world.spare_takeovers.find(spare.name);
    if (it == world.spare_takeovers.end() || spare.being_deleted) continue;
    if (it->second.task < 0 || it->second.task >= in.spec.replicas) continue;
    pass.out.relabel.push_back({spare.name, it->second.task, it->second.incarnation});
  }
  for (TaskRecord& record : pass.tasks) {
    if (!record.pod.has_value() || !record.pod->from_spare) {
      record.status.spare_of.clear();
      continue;
    }
    if (!CountTakeOver(in, pass, record)) return Next::kDone;
    if (const PodView* fatal = FatallyEnded(in, record)) {
      FailJob(in, pass, "FatalFailure",
              absl::StrCat("task ", record.status.index, " ", Describe(*fatal),
                           ", a fatal failure (failurePolicy); spare pod ", record.pod->name,
                           " had taken it over"));
      return Next::kDone;
    }
  }
  // The spares that still wait (or will): live, not given a task.
  std::vector<const PodView*> live;
  for (const PodView& spare : world.spare_pods) {
    if (world.spare_takeovers.contains(spare.name)) continue;
    if (spare.ended() && !spare.being_deleted) pass.out.delete_pods.push_back(spare.name);
    if (spare.live()) live.push_back(&spare);
  }
  // Spares start once the job has run (every task at once): before, they would compete with
  // the job's own pods for nodes.
  const bool every_task_has_a_pod =
      st.start_time.has_value() &&
      std::none_of(pass.tasks.begin(), pass.tasks.end(),
                   [](const TaskRecord& r) { return r.event == TaskEvent::kNoPod; });
  int count = static_cast<int>(live.size());
  if (count > in.spec.spares) {
    // spec.spares lowered: the newest go (the oldest are likelier to be warm).
    std::sort(live.begin(), live.end(),
              [](const PodView* a, const PodView* b) { return a->created > b->created; });
    for (int k = 0; k < count - in.spec.spares; ++k) {
      pass.out.delete_pods.push_back(live[static_cast<size_t>(k)]->name);
    }
    live.erase(live.begin(), live.begin() + (count - in.spec.spares));
    count = in.spec.spares;
  }
  while (count < in.spec.spares && every_task_has_a_pod && pass.MayCreateTaskPods()) {
    pass.out.create.push_back(
        DesiredSparePod(in.job, in.spec, st.spares.created, pass.coordinator_address));
    ++st.spares.created;
    ++count;
  }
  st.spares.total = count;
  st.spares.ready = static_cast<int>(std::count_if(live.begin(), live.end(), [&](const PodView* p) {
    return world.spares_waiting.contains(p->name);
  }));
  return Next::kContinue;
}

}  // namespace phalanx::op
