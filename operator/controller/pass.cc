#include "operator/controller/pass.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/kube/object_meta.h"
#include "operator/api/codec.h"
#include "operator/controller/failed_pods.h"
#include "operator/controller/recovery_time.h"
#include "operator/controller/terminal_tasks.h"

namespace phalanx::op {

std::string JobName(const PlanInputs& in) { return kube::MetaString(in.job, "name"); }

bool IsTerminal(const std::string& phase) {
  return phase == kPhaseSucceeded || phase == kPhaseFailed;
}

void Mark(JobPass& pass, const std::string& type, bool value, const std::string& reason,
          const std::string& message, absl::Time now) {
  TrainingJobStatus& st = pass.out.status;
  SetCondition(st.conditions,
               {type, value ? "True" : "False", reason, message, now, st.observed_generation}, now);
}

std::string Describe(const PodView& pod) {
  std::string what = absl::StrCat("pod ", pod.name);
  if (pod.exit_code.has_value()) absl::StrAppend(&what, " exited with code ", *pod.exit_code);
  if (!pod.reason.empty()) absl::StrAppend(&what, " (", pod.reason, ")");
  // A termination message, or the log tail the kubelet falls back to, has many lines; an Event
  // or condition message is read as one line (kubectl get events), so they are joined with " | "
  // (status.tasks[].lastFailureMessage keeps them as they were).
  std::vector<absl::string_view> lines;
  for (absl::string_view line : absl::StrSplit(pod.message, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) lines.push_back(line);
  }
  if (!lines.empty()) absl::StrAppend(&what, ": ", absl::StrJoin(lines, " | "));
  return what;
}

std::string DescribeDisruption(int task, const PodView& pod) {
  return absl::StrCat("task ", task, "'s pod ", pod.name, " is disrupted (DisruptionTarget",
                      pod.disruption.empty() ? "" : " ", pod.disruption, ")");
}

void RequeueWithin(JobPass& pass, absl::Duration d) {
  absl::Duration& requeue = pass.out.requeue_after;
  requeue = requeue == absl::ZeroDuration() ? d : std::min(requeue, d);
}

void DeleteLiveSpares(const PlanInputs& in, JobPass& pass) {
  for (const PodView& pod : in.world.spare_pods) {
    if (pod.live() && !in.world.spare_takeovers.contains(pod.name)) {
      pass.out.delete_pods.push_back(pod.name);
    }
  }
}

void DeleteActivePods(const PlanInputs& in, JobPass& pass) {
  for (const PodView& pod : in.world.task_pods) {
    if (pod.live()) pass.out.delete_pods.push_back(pod.name);
  }
  for (const PodView& pod : in.world.spare_pods) {
    if (pod.live()) pass.out.delete_pods.push_back(pod.name);
  }
  if (in.world.coordinator.has_value() && !in.world.coordinator->being_deleted) {
    pass.out.delete_pods.push_back(in.world.coordinator->name);
  }
}

void FailJob(const PlanInputs& in, JobPass& pass, const std::string& reason,
             const std::string& message) {
  pass.out.status.phase = kPhaseFailed;
  pass.out.status.completion_time = in.now;
  Mark(pass, "Failed", true, reason, message, in.now);
  Mark(pass, "Running", false, reason, message, in.now);
  pass.out.events.push_back({true, reason, message});
  DeleteActivePods(in, pass);
  SettleTaskStates(pass);
  pass.out.create.clear();
  pass.out.requeue_after = absl::ZeroDuration();
}

Incarnation NextIncarnation(const PlanInputs& in, int i, Incarnation current) {
  auto it = in.world.coordinator_incarnations.find(i);
  Incarnation newest =
      it == in.world.coordinator_incarnations.end() ? base::kNoIncarnation : it->second;
  // Incarnations the coordinator handed to spares, registered or not (spares.h).
  for (const auto& [pod, takeover] : in.world.spare_takeovers) {
    if (takeover.task == i) newest = std::max(newest, takeover.incarnation);
  }
  return std::max(current, newest) + 1;
}

Json NewTaskPod(const PlanInputs& in, const JobPass& pass, int index, Incarnation incarnation) {
  return DesiredTaskPod(in.job, in.spec, index, incarnation, pass.coordinator_address,
                        in.agent_clique_port, pass.out.status.coordinator.tls.value_or(false),
                        pass.out.status.incarnation_bound_credentials.value_or(false));
}

void RestartTask(const PlanInputs& in, JobPass& pass, int i, const std::string& reason,
                 std::optional<int> exit_code) {
  TaskRecord& record = pass.tasks[static_cast<size_t>(i)];
  TaskStatus& task = record.status;
  // A failed pod stays for its logs (failed_pods.h); the children stage bounds how many.
  if (record.pod.has_value() && !record.pod->being_deleted &&
      !KeepWhenReplaced(*record.pod, in.spec.failure_policy.keep_failed_pods)) {
    pass.out.delete_pods.push_back(record.pod->name);
  }
  task.recovering_since = StoppedAt(in, record);
  task.incarnation = NextIncarnation(in, i, task.incarnation);
  ++task.restarts;
  task.last_failure_reason = reason;
  task.last_exit_code = exit_code;
  task.last_failure_message.clear();  // the failure stage fills it in for a failed task
  task.failure_reported_at.reset();
  task.preempting_since.reset();
  task.state = TaskState::kRestarting;
  task.rank_restarts_in_pod = 0;  // the next pod's ranks start afresh
  const bool preemption = reason == "Preempted" && !record.preemption_reason.empty();
  pass.out.replacements.push_back({i, preemption, preemption ? record.preemption_reason : reason});
  if (pass.MayCreateTaskPods()) {
    pass.out.create.push_back(NewTaskPod(in, pass, i, task.incarnation));
    task.pod = TaskPodName(JobName(in), i, task.incarnation);
  }
}

void RestartAll(const PlanInputs& in, JobPass& pass, const std::string& reason,
                const std::vector<int>& cause) {
  for (int i = 0; i < static_cast<int>(pass.tasks.size()); ++i) {
    const TaskRecord& record = pass.tasks[static_cast<size_t>(i)];
    const bool here = std::find(cause.begin(), cause.end(), i) != cause.end();
    const bool failed = record.event == TaskEvent::kFailed || record.event == TaskEvent::kFatal;
    RestartTask(in, pass, i, here ? reason : "JobRestart",
                here && failed ? record.failure.exit_code : std::nullopt);
  }
}

std::vector<int> TasksWith(const JobPass& pass, TaskEvent event) {
  std::vector<int> out;
  for (const TaskRecord& record : pass.tasks) {
    if (record.event == event) out.push_back(record.status.index);
  }
  return out;
}

}  // namespace phalanx::op
