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
    if (pod.incarnation + 1 == record.status.incarnation && pod.phase == PodPhase::kFailed &&
        ClassifyFailure(in.spec.failure_policy, pod) == FailureClass::kFatal) {
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
  if (spends_restart) ++st.restarts;
  if (preempted) {
    ++st.preemptions;
    RecordMove(task, in.now);
    task.preempting_since.reset();
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

// How long a failed pod's replacement waits for the coordinator's word while a spare waits: the
// coordinator sees a process die before the kubelet reports it, and hands the task to the spare
// in the same step, so its word is normally there already; under load the pod's status can
// overtake it, and a replacement made then would claim the incarnation the spare was given.
constexpr absl::Duration kSpareGrace = absl::Seconds(3);

// A failed task that a waiting spare may be about to take over (the coordinator has not said
// yet whether it did): its replacement waits, up to kSpareGrace after the pod ended.
void HoldForTheCoordinator(const PlanInputs& in, JobPass& pass, TaskRecord& record) {
  if (record.event != TaskEvent::kFailed || in.world.spares_waiting.empty()) return;
  auto said = in.world.coordinator_failed.find(record.status.index);
  if (said != in.world.coordinator_failed.end() &&
      said->second.incarnation >= record.status.incarnation) {
    return;  // it has spoken: a take-over would be in the same snapshot
  }
  if (!record.failure.finished_at.has_value()) return;
  const absl::Time until = *record.failure.finished_at + kSpareGrace;
  if (in.now >= until) return;
  record.event = TaskEvent::kNone;
  record.status.state = TaskState::kRestarting;
  RequeueWithin(pass, until - in.now);
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
    HoldForTheCoordinator(in, pass, record);
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
  // Each slot's current generation; a slot whose pod took a task over or ended moves on, so
  // its next pod has a new name (and a pass that does not see its own create yet names the
  // same pod again: AlreadyExists, not a second spare).
  std::vector<int>& generations = st.spares.generations;
  const int slots = std::max(in.spec.spares, static_cast<int>(generations.size()));
  generations.resize(static_cast<size_t>(slots), 0);
  auto move_on = [&](const PodView& pod) {
    if (pod.spare_slot >= 0 && pod.spare_slot < slots &&
        pod.spare_generation == generations[static_cast<size_t>(pod.spare_slot)]) {
      ++generations[static_cast<size_t>(pod.spare_slot)];
    }
  };
  for (const TaskRecord& record : pass.tasks) {
    if (record.pod.has_value() && record.pod->from_spare) move_on(*record.pod);
  }
  // The spares that still wait (or will): live, not given a task, in a slot of spec.spares.
  std::vector<bool> filled(static_cast<size_t>(slots), false);
  int count = 0;
  int ready = 0;
  for (const PodView& spare : world.spare_pods) {
    if (world.spare_takeovers.contains(spare.name)) continue;
    if (spare.ended()) {
      if (!spare.being_deleted) pass.out.delete_pods.push_back(spare.name);
      move_on(spare);
      continue;
    }
    if (!spare.live()) continue;
    const bool current =
        spare.spare_slot >= 0 && spare.spare_slot < in.spec.spares &&
        spare.spare_generation == generations[static_cast<size_t>(spare.spare_slot)] &&
        !filled[static_cast<size_t>(spare.spare_slot)];
    if (!current) {  // spec.spares lowered, or a pod of a slot's older generation
      pass.out.delete_pods.push_back(spare.name);
      continue;
    }
    filled[static_cast<size_t>(spare.spare_slot)] = true;
    ++count;
    if (world.spares_waiting.contains(spare.name)) ++ready;
  }
  // Spares start once the job has run (every task at once): before, they would compete with
  // the job's own pods for nodes.
  const bool job_ran = st.start_time.has_value() &&
                       std::none_of(pass.tasks.begin(), pass.tasks.end(), [](const TaskRecord& r) {
                         return r.event == TaskEvent::kNoPod;
                       });
  for (int k = 0; k < in.spec.spares && job_ran && pass.MayCreateTaskPods(); ++k) {
    if (filled[static_cast<size_t>(k)]) continue;
    pass.out.create.push_back(
        DesiredSparePod(in.job, in.spec, k, generations[static_cast<size_t>(k)],
                        pass.coordinator_address, pass.out.status.coordinator.tls.value_or(false)));
    ++count;
  }
  generations.resize(static_cast<size_t>(in.spec.spares));
  st.spares.total = count;
  st.spares.ready = ready;
  return Next::kContinue;
}

}  // namespace phalanx::op
