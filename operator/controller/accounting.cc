#include "operator/controller/accounting.h"

#include <algorithm>
#include <string>

#include "operator/api/codec.h"

namespace phalanx::op {
namespace {

// status.goodput.rollbackCoordinator's bound (the CRD's maxLength).
constexpr size_t kMaxCoordinatorIdBytes = 64;

// Whether the time since the last booking belongs to a loss: restarting, or not running again
// yet after the job had run.
bool LostPhase(const TrainingJobStatus& previous) {
  if (previous.phase == kPhaseRestarting) return true;
  const bool ran = previous.start_time.has_value() || previous.restarts + previous.preemptions > 0;
  return ran && (previous.phase == kPhaseStarting || previous.phase == kPhaseBlocked);
}

// Whether the time since the last booking is the job's start before it ever ran: Pending, or
// its first Starting (its time before the first step, with the Running time before the
// workers' first step).
bool BeforeFirstRun(const TrainingJobStatus& previous) {
  if (previous.phase != kPhasePending && previous.phase != kPhaseStarting) return false;
  return !LostPhase(previous) && !previous.goodput.first_step_time.has_value();
}

// The part of [from, until] that was booked (or this pass books) as productive: the job's current
// Running stretch, or up to where the last one ended; never into a coordinator outage (booked
// lost as such). Empty (start == end) when nothing of it was.
std::pair<absl::Time, absl::Time> ProductiveSpan(const TrainingJobStatus& previous, absl::Time from,
                                                 absl::Time until, absl::Time now) {
  const GoodputStatus& g = previous.goodput;
  absl::Time start = from;
  absl::Time end = start;
  const bool running = previous.phase == kPhaseRunning;
  if (g.running_since.has_value()) {
    // The stretch as booked, to the microsecond (a condition's time is whole seconds: it would
    // reach back into the lost time before it).
    start = std::max(start, *g.running_since);
    end = running ? now : g.running_until.value_or(start);
  } else if (const std::optional<Condition> c = FindCondition(previous.conditions, "Running")) {
    // A status written before the stretch was kept.
    if (c->status == "True" && running) {
      start = std::max(start, c->last_transition_time);
      end = now;
    } else if (c->status == "False") {
      end = c->last_transition_time;  // productive time ended there
    }
  }
  if (g.coordinator_down_since.has_value()) end = std::min(end, *g.coordinator_down_since);
  end = std::min({end, until, now});
  return {start, std::max(start, end)};
}

// A late-known loss from `from` to `until`: its productive part not moved already (never before
// detectionBookedUntil, which every such move advances).
std::pair<absl::Time, absl::Time> LossSpan(const TrainingJobStatus& previous, absl::Time from,
                                           absl::Time until, absl::Time now) {
  const absl::Time booked = previous.goodput.detection_booked_until.value_or(absl::InfinitePast());
  return ProductiveSpan(previous, std::max(from, booked), until, now);
}

double Seconds(const std::pair<absl::Time, absl::Time>& span) {
  return absl::ToDoubleSeconds(span.second - span.first);
}

// Moves up to `seconds` from productive to lost (never more than was booked productive);
// returns what was moved.
double Move(TrainingJobStatus& st, double seconds) {
  const double moved = std::clamp(seconds, 0.0, st.productive_seconds);
  st.productive_seconds -= moved;
  st.lost_seconds += moved;
  return moved;
}

}  // namespace

GoodputFacts GoodputFactsOf(const PlanInputs& in, const std::vector<TaskRecord>& tasks) {
  GoodputFacts facts;
  const std::optional<PodView>& coordinator = in.world.coordinator;
  facts.coordinator_up = coordinator.has_value() && coordinator->phase == PodPhase::kRunning &&
                         coordinator->ready && !coordinator->being_deleted;
  facts.rolled_back = in.world.rolled_back;
  facts.stepping = in.world.stepping;
  auto earliest = [&facts, &in](absl::Time t) {
    if (t == absl::InfinitePast() || t == absl::InfiniteFuture()) return;
    t = std::min(t, in.now);  // another machine's clock may run ahead
    facts.failed_since = std::min(facts.failed_since.value_or(t), t);
  };
  for (const TaskRecord& record : tasks) {
    if (record.event == TaskEvent::kFailed || record.event == TaskEvent::kFatal) {
      if (record.failure.finished_at.has_value()) earliest(*record.failure.finished_at);
    }
  }
  // The coordinator's word on a task's current incarnation (the one `previous` records: a task
  // replaced this pass has moved past it), including one still waiting for its pod's exit
  // status; words on incarnations already replaced are old news.
  for (const auto& [index, failure] : in.world.coordinator_failed) {
    if (index < 0 || static_cast<size_t>(index) >= tasks.size()) continue;
    const Incarnation current = static_cast<size_t>(index) < in.previous.tasks.size()
                                    ? in.previous.tasks[static_cast<size_t>(index)].incarnation
                                    : 0;
    if (failure.incarnation >= current) earliest(failure.last_heard);
  }
  return facts;
}

void AccountTime(const TrainingJobStatus& previous, TrainingJobStatus& st, absl::Time now,
                 const GoodputFacts& facts) {
  if (previous.phase == kPhaseSucceeded || previous.phase == kPhaseFailed) return;
  GoodputStatus& g = st.goodput;
  const std::optional<absl::Time> down_since = previous.goodput.coordinator_down_since;
  // Only Running time can be lost to an outage (the rest is lost or neither already).
  const bool running = st.phase == kPhaseRunning || previous.phase == kPhaseRunning;
  if (facts.coordinator_up || !running) {
    g.coordinator_down_since.reset();
  } else if (!down_since.has_value()) {
    g.coordinator_down_since = now;
  }
  if (!previous.accounted_until.has_value()) {
    st.accounted_until = now;
    return;
  }
  const absl::Time from = *previous.accounted_until;
  const absl::Duration elapsed = now - from;

  std::pair<absl::Time, absl::Time> detection{now, now};
  if (facts.failed_since.has_value()) {
    detection = LossSpan(previous, *facts.failed_since, now, now);
  }
  // A regroup the workers report (the coordinator's clock: never past now). Its part that
  // detection moves this pass is not moved again.
  std::pair<absl::Time, absl::Time> regroup{now, now};
  const SteppingReport& stepping = facts.stepping;
  if (stepping.regroup_since.has_value()) {
    const absl::Time until =
        stepping.regrouping ? now : stepping.stepping_since.value_or(*stepping.regroup_since);
    regroup = LossSpan(previous, std::min(*stepping.regroup_since, now), until, now);
    if (Seconds(detection) > 0) {
      regroup.first = std::max(regroup.first, detection.second);
      regroup.second = std::max(regroup.first, regroup.second);
    }
  }
  const bool first_step_news = stepping.first_step.has_value() && !g.first_step_time.has_value();
  double rolled_back = 0;
  std::string rollback_coordinator;
  if (facts.rolled_back.has_value()) {
    rollback_coordinator = facts.rolled_back->coordinator_id.substr(0, kMaxCoordinatorIdBytes);
    const double booked = rollback_coordinator == g.rollback_coordinator ? g.rollback_booked : 0.0;
    rolled_back = facts.rolled_back->seconds - booked;
  }
  const bool moves = Seconds(detection) > 0 || Seconds(regroup) > 0 || rolled_back > 0;
  if (st.phase == previous.phase && g.coordinator_down_since == down_since && !moves &&
      !first_step_news && elapsed < kAccountingPeriod) {
    return;
  }

  if (elapsed > absl::ZeroDuration()) {
    const double dt = absl::ToDoubleSeconds(elapsed);
    if (previous.phase == kPhaseRunning) {
      // Running while the coordinator was down: the tasks could not coordinate.
      const double outage =
          down_since.has_value()
              ? std::clamp(absl::ToDoubleSeconds(now - std::max(*down_since, from)), 0.0, dt)
              : 0.0;
      st.productive_seconds += dt - outage;
      st.lost_seconds += outage;
      g.coordinator_outage_seconds += outage;
    } else if (LostPhase(previous)) {
      st.lost_seconds += dt;
    } else if (BeforeFirstRun(previous)) {
      g.before_first_step_seconds += dt;  // scheduling, image pulls, the first start
    }
  }
  st.accounted_until = now;
  if (st.phase == kPhaseRunning && previous.phase != kPhaseRunning) {
    g.running_since = now;
    g.running_until.reset();
  } else if (st.phase != kPhaseRunning && previous.phase == kPhaseRunning) {
    g.running_until = now;
  }

  if (first_step_news) {
    // The workers' first step: the Running time booked before it was start-up (rendezvous,
    // name resolution, loading), not training. What was booked after it stays productive.
    g.first_step_time = std::min(*stepping.first_step, now);
    const double after = Seconds(ProductiveSpan(previous, *g.first_step_time, now, now));
    double before = std::clamp(st.productive_seconds - after, 0.0, st.productive_seconds);
    // Never more than the job could have run before it (the productive time after the first
    // step in an earlier Running stretch, heard of late, is not in `after`).
    if (previous.start_time.has_value()) {
      before = std::min(
          before, std::max(0.0, absl::ToDoubleSeconds(*g.first_step_time - *previous.start_time)));
    }
    st.productive_seconds -= before;
    g.before_first_step_seconds += before;
  }
  if (Seconds(detection) > 0) {
    g.detection_seconds += Move(st, Seconds(detection));
    g.detection_booked_until = detection.second;
  }
  if (Seconds(regroup) > 0) {
    g.regroup_seconds += Move(st, Seconds(regroup));
    g.detection_booked_until = regroup.second;
  }
  if (down_since.has_value() && !g.coordinator_down_since.has_value()) {
    // An outage that ended was booked lost whole: a failure found later does not reach into it.
    g.detection_booked_until = std::max(now, g.detection_booked_until.value_or(now));
  }
  if (rolled_back > 0) {
    g.rolled_back_seconds += Move(st, rolled_back);
    g.rollback_coordinator = rollback_coordinator;
    g.rollback_booked = facts.rolled_back->seconds;
  }
}

}  // namespace phalanx::op
