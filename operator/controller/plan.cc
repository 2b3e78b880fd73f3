#include "operator/controller/plan.h"

#include "operator/controller/accounting.h"
#include "operator/controller/children.h"
#include "operator/controller/coordinator_move.h"
#include "operator/controller/failure_policy.h"
#include "operator/controller/gang.h"
#include "operator/controller/lifecycle.h"
#include "operator/controller/observe_tasks.h"
#include "operator/controller/pass.h"
#include "operator/controller/phase.h"
#include "operator/controller/preemption_policy.h"
#include "operator/controller/rank_restarts.h"
#include "operator/controller/recovery_time.h"
#include "operator/controller/schedulability.h"
#include "operator/controller/spares.h"
#include "operator/controller/success_policy.h"
#include "operator/controller/suspend_policy.h"
#include "operator/controller/task_state.h"

namespace phalanx::op {
namespace {

constexpr Stage kStages[] = {
    {"ttl", ExpireFinishedJob},
    {"suspend", ApplySuspend},
    {"deadline", EnforceActiveDeadline},
    {"coordinator move", MoveCoordinator},
    {"children", EnsureJobChildren},
    {"task states", ClassifyTasks},
    {"rank restarts", CountRankRestarts},
    {"recovery time", MeasureRecoveries},
    {"schedulability", MarkUnschedulable},
    {"gang", FormGang},
    {"task pods", EnsureTaskPods},
    {"spares", ManageSpares},
    {"fatal", FailOnFatal},
    {"preemption", ApplyPreemptions},
    {"failures", RestartFailedTasks},
    {"success", ApplySuccessPolicy},
    {"phase", SetPhaseAndConditions},
};

}  // namespace

std::span<const Stage> Stages() { return kStages; }

JobPass PassBefore(const PlanInputs& in, std::string_view stage) {
  JobPass pass = ObserveTasks(in);
  for (const Stage& s : Stages()) {
    if (s.name == stage || s.run(in, pass) == Next::kDone) break;
  }
  return pass;
}

ReconcilePlan PlanReconcile(const PlanInputs& in) {
  JobPass pass = ObserveTasks(in);
  for (const Stage& stage : Stages()) {
    if (stage.run(in, pass) == Next::kDone) break;
  }
  ReconcilePlan plan = std::move(pass.out);
  plan.notices = PreemptionNotices(pass.tasks, in.spec.preemption);
  const GoodputFacts goodput = GoodputFactsOf(in, pass.tasks);
  for (TaskRecord& record : pass.tasks) plan.status.tasks.push_back(std::move(record.status));
  AccountTime(in.previous, plan.status, in.now, goodput);
  return plan;
}

}  // namespace phalanx::op
