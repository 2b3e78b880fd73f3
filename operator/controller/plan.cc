#include "operator/controller/plan.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/kube/object_meta.h"
#include "operator/api/codec.h"
#include "operator/controller/blocked.h"

namespace phalanx::op {
namespace {

bool Contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }
bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool Terminal(const std::string& phase) { return phase == kPhaseSucceeded || phase == kPhaseFailed; }

void Mark(TrainingJobStatus& status, const std::string& type, bool value,
          const std::string& reason, const std::string& message, absl::Time now) {
  SetCondition(status.conditions,
               {type, value ? "True" : "False", reason, message, now, status.observed_generation},
               now);
}

std::string Describe(const PodView& pod) {
  std::string what = absl::StrCat("pod ", pod.name);
  if (pod.exit_code.has_value()) absl::StrAppend(&what, " exited with code ", *pod.exit_code);
  if (!pod.reason.empty()) absl::StrAppend(&what, " (", pod.reason, ")");
  if (!pod.message.empty()) absl::StrAppend(&what, ": ", pod.message);
  return what;
}

// The task pods of one index, the current one first.
struct TaskPods {
  std::optional<PodView> current;  // at the task's current incarnation
  std::vector<PodView> stale;      // older incarnations still around
};

}  // namespace

absl::Duration RestartBackoff(const BackoffSpec& backoff, int restarts_so_far) {
  if (restarts_so_far <= 0) return absl::ZeroDuration();
  absl::Duration d = backoff.base;
  for (int i = 1; i < restarts_so_far && d < backoff.max; ++i) d *= 2;
  return std::min(d, backoff.max);
}

FailureClass ClassifyFailure(const FailurePolicy& policy, const PodView& pod) {
  if (!pod.reason.empty() && Contains(policy.fatal_reasons, pod.reason)) return FailureClass::kFatal;
  if (pod.exit_code.has_value()) {
    if (Contains(policy.fatal_exit_codes, *pod.exit_code)) return FailureClass::kFatal;
    if (!policy.retryable_exit_codes.empty() &&
        !Contains(policy.retryable_exit_codes, *pod.exit_code)) {
      return FailureClass::kFatal;
    }
  }
  return FailureClass::kRetryable;
}

namespace {

// Goodput: time since the last accounting belongs to the phase the job was in. It is booked when
// the phase changes, and otherwise at most every kAccountingPeriod, so a steady job's status is
// not rewritten on every pass (each write is a watch event that would start another pass).
constexpr absl::Duration kAccountingPeriod = absl::Seconds(30);

void Account(const TrainingJobStatus& previous, TrainingJobStatus& st, absl::Time now) {
  if (Terminal(previous.phase)) return;
  if (!previous.accounted_until.has_value()) {
    st.accounted_until = now;
    return;
  }
  const absl::Duration elapsed = now - *previous.accounted_until;
  if (st.phase == previous.phase && elapsed < kAccountingPeriod) return;
  if (elapsed > absl::ZeroDuration()) {
    const double dt = absl::ToDoubleSeconds(elapsed);
    if (previous.phase == kPhaseRunning) {
      st.productive_seconds += dt;
    } else if (previous.phase == kPhaseRestarting ||
               ((previous.phase == kPhaseStarting || previous.phase == kPhaseBlocked) &&
                previous.restarts + previous.preemptions > 0)) {
      st.lost_seconds += dt;
    }
  }
  st.accounted_until = now;
}

ReconcilePlan PlanPass(const PlanInputs& in);

}  // namespace

ReconcilePlan PlanReconcile(const PlanInputs& in) {
  ReconcilePlan plan = PlanPass(in);
  Account(in.previous, plan.status, in.now);
  return plan;
}

namespace {

ReconcilePlan PlanPass(const PlanInputs& in) {
  ReconcilePlan plan;
  TrainingJobStatus& st = plan.status;
  st = in.previous;
  const std::string job = kube::MetaString(in.job, "name");
  const kube::ObjectMeta meta = kube::ObjectMeta::Decode(in.job);
  st.observed_generation = meta.generation;
  const int n = in.spec.replicas;
  st.tasks.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) st.tasks[static_cast<size_t>(i)].index = i;

  std::map<int, TaskPods> by_index;
  for (const PodView& pod : in.world.task_pods) {
    if (pod.index < 0) continue;
    if (pod.index >= n) {  // replicas shrank (only through an invalid update): remove extras
      if (!pod.being_deleted) plan.delete_pods.push_back(pod.name);
      continue;
    }
    TaskStatus& task = st.tasks[static_cast<size_t>(pod.index)];
    task.incarnation = std::max(task.incarnation, pod.incarnation);
  }
  for (const PodView& pod : in.world.task_pods) {
    if (pod.index < 0 || pod.index >= n) continue;
    TaskPods& slot = by_index[pod.index];
    if (pod.incarnation == st.tasks[static_cast<size_t>(pod.index)].incarnation) {
      slot.current = pod;
    } else {
      slot.stale.push_back(pod);
    }
  }
  auto delete_active_pods = [&] {
    for (const PodView& pod : in.world.task_pods) {
      if (!pod.being_deleted && pod.phase != "Succeeded" && pod.phase != "Failed") {
        plan.delete_pods.push_back(pod.name);
      }
    }
    if (in.world.coordinator.has_value() && !in.world.coordinator->being_deleted) {
      plan.delete_pods.push_back(in.world.coordinator->name);
    }
  };

  // Suspended: no pods; the job and its status stay.
  Mark(st, "Suspended", in.spec.suspend, in.spec.suspend ? "Suspended" : "Resumed",
               in.spec.suspend ? "the job is suspended: its pods are deleted" : "", in.now);
  if (in.spec.suspend && !Terminal(st.phase)) {
    if (st.phase != kPhaseSuspended) {
      plan.events.push_back({false, "Suspended", "job suspended"});
      // Resuming starts new processes: each task comes back as its next incarnation, and that
      // is neither a failure nor a restart to count.
      for (TaskStatus& task : st.tasks) {
        ++task.incarnation;
        task.state = "Suspended";
        task.pod.clear();
        task.node.clear();
        task.preempting_since.reset();
      }
    }
    delete_active_pods();
    st.phase = kPhaseSuspended;
    st.ready_tasks = 0;
    return plan;
  }
  if (Terminal(st.phase)) {
    delete_active_pods();
    st.ready_tasks = 0;
    return plan;
  }
  if (st.phase == kPhaseSuspended) {
    plan.events.push_back({false, "Resumed", "job resumed"});
    st.phase = kPhasePending;
  }

  // The job's fixed children.
  if (!in.world.has_secret) plan.create.push_back(DesiredSecret(in.job, in.token));
  if (!in.world.has_tasks_service) plan.create.push_back(DesiredTasksService(in.job));
  if (!in.world.has_coordinator_service) {
    plan.create.push_back(DesiredCoordinatorService(in.job, in.placement));
  }
  std::string coordinator_ip;
  if (!in.world.coordinator.has_value()) {
    plan.create.push_back(DesiredCoordinatorPod(in.job, in.spec, in.placement));
  } else if (in.world.coordinator->phase == "Failed" || in.world.coordinator->phase == "Succeeded") {
    // Recreated under the same name once the old one is gone; tasks reconnect and re-register.
    if (!in.world.coordinator->being_deleted) {
      plan.delete_pods.push_back(in.world.coordinator->name);
      plan.events.push_back({true, "CoordinatorRestarted",
                             absl::StrCat("coordinator ", Describe(*in.world.coordinator),
                                          "; recreating it")});
    }
    plan.requeue_after = absl::Seconds(1);
  } else if (in.world.coordinator->phase == "Running") {
    coordinator_ip = in.world.coordinator->ip;
  }
  const std::string address = CoordinatorAddress(in.job, in.placement, coordinator_ip);

  // Each task: its current pod, failures, preemptions.
  std::vector<int> failed, preempted, fatal, vanished_preempted;
  std::map<int, std::string> preemption_reason;  // NodePreempted, DisruptionTarget or Evicted
  std::map<int, PodView> failed_pods;
  int running = 0, ready = 0, succeeded = 0;
  for (int i = 0; i < n; ++i) {
    TaskStatus& task = st.tasks[static_cast<size_t>(i)];
    TaskPods& pods = by_index[i];
    for (const PodView& old : pods.stale) {
      if (!old.being_deleted) plan.delete_pods.push_back(old.name);
    }
    if (pods.current.has_value() && pods.current->being_deleted) {
      // Going away (an eviction, or someone deleted it): remember it, act once it is gone.
      task.state = "Terminating";
      if (pods.current->disruption_target && !task.preempting_since.has_value()) {
        task.preempting_since = in.now;
      }
      continue;
    }
    if (!pods.current.has_value()) {
      const bool vanished = task.pod == TaskPodName(job, i, task.incarnation) &&
                            (task.state == "Running" || task.state == "Terminating" ||
                             task.state == "Preempting");
      if (vanished && task.preempting_since.has_value()) {
        preemption_reason[i] = "Evicted";
        vanished_preempted.push_back(i);
      } else if (vanished) {
        // A process that ran is gone without a trace: a new process is a new incarnation.
        PodView gone;
        gone.name = task.pod;
        gone.reason = "PodDeleted";
        failed_pods[i] = gone;
        failed.push_back(i);
      } else {
        task.state = "Pending";
        if (!address.empty()) {
          plan.create.push_back(DesiredTaskPod(in.job, in.spec, i, task.incarnation, address));
          task.pod = TaskPodName(job, i, task.incarnation);
        }
      }
      continue;
    }
    const PodView& pod = *pods.current;
    task.pod = pod.name;
    task.node = pod.node;
    auto reported = in.world.coordinator_failed.find(i);
    const bool coordinator_says_failed =
        reported != in.world.coordinator_failed.end() && reported->second == task.incarnation;
    const bool on_preempted_node =
        in.spec.preemption.on_node_taints && in.world.preempting_nodes.contains(pod.node);
    const bool disrupted = in.spec.preemption.on_disruption_target && pod.disruption_target;
    if (pod.phase == "Succeeded") {
      task.state = "Succeeded";
      task.preempting_since.reset();
      ++succeeded;
    } else if ((on_preempted_node || disrupted) && pod.phase != "Failed") {
      preemption_reason[i] = on_preempted_node ? "NodePreempted" : "DisruptionTarget";
      preempted.push_back(i);
    } else if (pod.phase == "Failed" &&
               (disrupted || on_preempted_node || pod.reason == "Evicted" ||
                task.preempting_since.has_value())) {
      // Evicted before it could checkpoint, or it exited after its preemption checkpoint
      // (as JAX programs do once they reach the sync point): still a preemption.
      preemption_reason[i] = on_preempted_node ? "NodePreempted"
                             : disrupted       ? "DisruptionTarget"
                                               : "Evicted";
      preempted.push_back(i);
    } else if (pod.phase == "Failed" || coordinator_says_failed) {
      PodView seen = pod;
      if (pod.phase != "Failed") {
        // The pod looks fine; the coordinator saw the task hang, lose its session or report an
        // error. Say so, with the coordinator's words, in the reason and the Event.
        seen.reason = "CoordinatorDeclaredFailed";
        auto why = in.world.coordinator_failure_reasons.find(i);
        if (why != in.world.coordinator_failure_reasons.end()) seen.message = why->second;
      }
      failed_pods[i] = seen;
      (ClassifyFailure(in.spec.failure_policy, pod) == FailureClass::kFatal ? fatal : failed)
          .push_back(i);
    } else {
      task.state = pod.phase == "Running" ? "Running" : "Pending";
      if (pod.phase == "Running") ++running;
      if (pod.phase == "Running" && pod.ready) ++ready;
    }
  }
  st.ready_tasks = ready;

  auto fail_job = [&](const std::string& reason, const std::string& message) {
    st.phase = kPhaseFailed;
    st.completion_time = in.now;
    Mark(st, "Failed", true, reason, message, in.now);
    Mark(st, "Running", false, reason, message, in.now);
    plan.events.push_back({true, reason, message});
    delete_active_pods();
    plan.create.clear();
    plan.requeue_after = absl::ZeroDuration();
  };

  if (!fatal.empty()) {
    const int i = fatal.front();
    fail_job("FatalFailure", absl::StrCat("task ", i, " ", Describe(failed_pods[i]),
                                          ", which the failure policy treats as fatal"));
    return plan;
  }

  // Restart one task (or all of them), giving it the next incarnation.
  auto restart_task = [&](int i, const std::string& reason, std::optional<int> exit_code) {
    TaskStatus& task = st.tasks[static_cast<size_t>(i)];
    const TaskPods& pods = by_index[i];
    if (pods.current.has_value() && !pods.current->being_deleted) {
      plan.delete_pods.push_back(pods.current->name);
    }
    ++task.incarnation;
    ++task.restarts;
    task.last_failure_reason = reason;
    task.last_exit_code = exit_code;
    task.preempting_since.reset();
    task.state = "Restarting";
    const auto preempted_reason = preemption_reason.find(i);
    if (reason == "Preempted" && preempted_reason != preemption_reason.end()) {
      plan.replacements.push_back({i, true, preempted_reason->second});
    } else {
      plan.replacements.push_back({i, false, reason});
    }
    if (!address.empty()) {
      plan.create.push_back(DesiredTaskPod(in.job, in.spec, i, task.incarnation, address));
      task.pod = TaskPodName(job, i, task.incarnation);
    }
  };
  // Every task restarts; the ones that failed or were preempted keep that as their reason.
  auto restart_all = [&](const std::string& reason, const std::vector<int>& cause) {
    for (int i = 0; i < n; ++i) {
      const bool here = Contains(cause, i);
      restart_task(i, here ? reason : "JobRestart",
                   here && failed_pods.contains(i) ? failed_pods[i].exit_code : std::nullopt);
    }
  };

  // Preemptions: open a coordinated checkpoint once, move the task after the grace period (or at
  // once if its pod is already gone). They do not spend maxRestarts unless configured to.
  std::vector<int> move_now = vanished_preempted;
  for (int i : preempted) {
    TaskStatus& task = st.tasks[static_cast<size_t>(i)];
    const PodView& pod = *by_index[i].current;
    if (!task.preempting_since.has_value()) {
      // The reconciler notifies the coordinator of every task with preempting_since set until
      // it acknowledges (level-triggered); this pass only starts the clock and says so.
      task.preempting_since = in.now;
      plan.events.push_back({false, "PreemptionNotice",
                             absl::StrCat("task ", i, " on node ", pod.node,
                                          " is being preempted; coordinated checkpoint started")});
    }
    const absl::Time deadline = *task.preempting_since + in.spec.preemption.checkpoint_grace;
    if (pod.phase == "Failed" || in.now >= deadline) {
      move_now.push_back(i);
    } else {
      task.state = "Preempting";
      const absl::Duration wait = deadline - in.now;
      plan.requeue_after = plan.requeue_after == absl::ZeroDuration()
                               ? wait
                               : std::min(plan.requeue_after, wait);
    }
  }
  if (!move_now.empty()) {
    st.preemptions += static_cast<int>(move_now.size());
    if (in.spec.failure_policy.preemptions_count_toward_max_restarts) {
      if (st.restarts + static_cast<int>(move_now.size()) > in.spec.failure_policy.max_restarts) {
        fail_job("MaxRestartsExceeded",
                 absl::StrCat("task ", move_now.front(), " was preempted; maxRestarts (",
                              in.spec.failure_policy.max_restarts,
                              ") is exhausted and preemptions count toward it"));
        return plan;
      }
      st.restarts += static_cast<int>(move_now.size());
    }
    st.last_restart_time = in.now;
    for (int i : move_now) {
      plan.events.push_back({true, "TaskPreempted",
                             absl::StrCat("task ", i, " moved off its preempted node as incarnation ",
                                          st.tasks[static_cast<size_t>(i)].incarnation + 1)});
    }
    if (in.spec.failure_policy.restart_scope == RestartScope::kJob) {
      restart_all("Preempted", move_now);
    } else {
      for (int i : move_now) restart_task(i, "Preempted", std::nullopt);
    }
  }

  // Failures: within maxRestarts, after the back-off.
  if (!failed.empty() && move_now.empty()) {
    const bool job_scope = in.spec.failure_policy.restart_scope == RestartScope::kJob;
    const int needed = job_scope ? 1 : static_cast<int>(failed.size());
    if (st.restarts + needed > in.spec.failure_policy.max_restarts) {
      const int i = failed.front();
      fail_job("MaxRestartsExceeded",
               absl::StrCat("task ", i, " ", Describe(failed_pods[i]), "; maxRestarts (",
                            in.spec.failure_policy.max_restarts, ") is exhausted"));
      return plan;
    }
    const absl::Duration backoff = RestartBackoff(in.spec.failure_policy.backoff, st.restarts);
    const absl::Time not_before =
        st.last_restart_time.has_value() ? *st.last_restart_time + backoff : in.now;
    if (in.now < not_before) {
      for (int i : failed) st.tasks[static_cast<size_t>(i)].state = "BackingOff";
      st.phase = kPhaseRestarting;
      plan.requeue_after = not_before - in.now;
      return plan;
    }
    st.restarts += needed;
    st.last_restart_time = in.now;
    std::vector<std::string> which;
    for (int i : failed) which.push_back(absl::StrCat(i));
    for (int i : failed) {
      plan.events.push_back(
          {true, "TaskRestarted",
           absl::StrCat("task ", i, " ", Describe(failed_pods[i]), "; restarting ",
                        job_scope ? "every task" : "it", " as incarnation ",
                        st.tasks[static_cast<size_t>(i)].incarnation + 1)});
    }
    if (job_scope) {
      restart_all("Failed", failed);
    } else {
      for (int i : failed) {
        const PodView& pod = failed_pods[i];
        restart_task(i, pod.reason.empty() ? "Failed" : pod.reason, pod.exit_code);
      }
    }
  }

  // Success and phase.
  const bool success = in.spec.success_policy == SuccessPolicy::kTaskZero
                           ? st.tasks[0].state == "Succeeded"
                           : succeeded == n;
  if (success) {
    st.phase = kPhaseSucceeded;
    st.completion_time = in.now;
    Mark(st, "Succeeded", true, "Completed",
                 in.spec.success_policy == SuccessPolicy::kTaskZero ? "task 0 succeeded"
                                                                     : "every task succeeded",
                 in.now);
    Mark(st, "Running", false, "Completed", "", in.now);
    plan.events.push_back({false, "Completed", "job succeeded"});
    delete_active_pods();
    plan.create.clear();
    return plan;
  }
  const bool restarting = !move_now.empty() || (!failed.empty());
  if (restarting) {
    st.phase = kPhaseRestarting;
  } else if (running + succeeded == n && running > 0) {
    st.phase = kPhaseRunning;
    if (!st.start_time.has_value()) st.start_time = in.now;
  } else if (running > 0 || st.start_time.has_value()) {
    st.phase = kPhaseStarting;
  } else {
    st.phase = kPhasePending;
  }
  if (StaysBlocked(in.previous, !plan.create.empty())) st.phase = kPhaseBlocked;
  Mark(st, "Running", st.phase == kPhaseRunning,
               st.phase == kPhaseRunning ? "AllTasksRunning" : st.phase,
               absl::StrCat(running, "/", n, " tasks running"), in.now);
  if (address.empty() && plan.requeue_after == absl::ZeroDuration()) {
    plan.requeue_after = absl::Milliseconds(500);  // waiting for the coordinator's address
  }
  return plan;
}

}  // namespace

}  // namespace phalanx::op
