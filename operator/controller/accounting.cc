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

// The part of [failed, now] that was booked (or this pass books) as productive and was not
// moved already: the job's current Running stretch, or up to where the last one ended; never
// before detectionBookedUntil, never into a coordinator outage (booked lost as such).
std::pair<absl::Time, absl::Time> DetectionSpan(const TrainingJobStatus& previous,
                                                absl::Time failed, absl::Time now) {
  const GoodputStatus& g = previous.goodput;
  absl::Time start = std::max(failed, g.detection_booked_until.value_or(absl::InfinitePast()));
  absl::Time end = start;
  const std::optional<Condition> running = FindCondition(previous.conditions, "Running");
  if (running.has_value() && running->status == "True" && previous.phase == kPhaseRunning) {
    start = std::max(start, running->last_transition_time);
    end = now;
  } else if (running.has_value() && running->status == "False") {
    end = running->last_transition_time;  // productive time ended there
  }
  if (g.coordinator_down_since.has_value()) end = std::min(end, *g.coordinator_down_since);
  return {start, std::min(end, now)};
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
  if (facts.failed_since.has_value()) detection = DetectionSpan(previous, *facts.failed_since, now);
  double rolled_back = 0;
  std::string rollback_coordinator;
  if (facts.rolled_back.has_value()) {
    rollback_coordinator = facts.rolled_back->coordinator_id.substr(0, kMaxCoordinatorIdBytes);
    const double booked = rollback_coordinator == g.rollback_coordinator ? g.rollback_booked : 0.0;
    rolled_back = facts.rolled_back->seconds - booked;
  }
  const bool moves = detection.second > detection.first || rolled_back > 0;
  if (st.phase == previous.phase && g.coordinator_down_since == down_since && !moves &&
      elapsed < kAccountingPeriod) {
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
    }
  }
  st.accounted_until = now;

  if (detection.second > detection.first) {
    g.detection_seconds += Move(st, absl::ToDoubleSeconds(detection.second - detection.first));
    g.detection_booked_until = detection.second;
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
