#include "runtime/coordination/proto_convert.h"

#include "runtime/coordination/error_details.h"

namespace phalanx::coord {

pb::TaskState ToProto(TaskState state) {
  switch (state) {
    case TaskState::kUnregistered:
      return pb::TASK_STATE_UNREGISTERED;
    case TaskState::kConnected:
      return pb::TASK_STATE_CONNECTED;
    case TaskState::kFailed:
      return pb::TASK_STATE_FAILED;
    case TaskState::kShutdown:
      return pb::TASK_STATE_SHUTDOWN;
  }
  return pb::TASK_STATE_UNSPECIFIED;
}

TaskState FromProto(pb::TaskState state) {
  switch (state) {
    case pb::TASK_STATE_CONNECTED:
      return TaskState::kConnected;
    case pb::TASK_STATE_FAILED:
      return TaskState::kFailed;
    case pb::TASK_STATE_SHUTDOWN:
      return TaskState::kShutdown;
    default:
      return TaskState::kUnregistered;
  }
}

absl::Time FromUnixMicrosOrInfinite(int64_t micros) {
  return micros <= 0 ? absl::InfiniteFuture() : absl::FromUnixMicros(micros);
}

// For instants that may not have happened yet (0 on the wire).
absl::Time MicrosOrInfinitePast(int64_t micros) {
  return micros == 0 ? absl::InfinitePast() : absl::FromUnixMicros(micros);
}

int64_t ToUnixMicrosOrZero(absl::Time time) {
  if (time == absl::InfiniteFuture() || time == absl::InfinitePast()) return 0;
  return absl::ToUnixMicros(time);
}

pb::TaskRef ToProto(const TaskRef& ref) {
  pb::TaskRef out;
  out.set_task_id(ref.task_id);
  out.set_incarnation(base::IncarnationToWire(ref.incarnation));
  return out;
}

TaskRef FromProto(const pb::TaskRef& ref) {
  return TaskRef{ref.task_id(), base::IncarnationFromWire(ref.incarnation())};
}

pb::TaskInfo ToProto(const TaskInfo& info) {
  pb::TaskInfo out;
  out.set_task_id(info.task_id);
  out.set_incarnation(base::IncarnationToWire(info.incarnation));
  out.set_state(ToProto(info.state));
  out.set_reason(info.reason);
  out.set_changed_unix_micros(ToUnixMicrosOrZero(info.changed));
  out.set_last_heard_unix_micros(ToUnixMicrosOrZero(info.last_heard));
  return out;
}

TaskInfo FromProto(const pb::TaskInfo& info) {
  return TaskInfo{info.task_id(),
                  base::IncarnationFromWire(info.incarnation()),
                  FromProto(info.state()),
                  info.reason(),
                  MicrosOrInfinitePast(info.changed_unix_micros()),
                  MicrosOrInfinitePast(info.last_heard_unix_micros())};
}

pb::JobState ToProto(const JobSnapshot& snapshot) {
  pb::JobState out;
  out.set_job(snapshot.job);
  out.set_version(snapshot.version);
  out.set_coordinator_id(snapshot.coordinator_id);
  out.set_rolled_back_seconds(snapshot.rolled_back_seconds);
  out.set_first_step_unix_micros(ToUnixMicrosOrZero(snapshot.stepping.first_step));
  out.set_stepping_since_unix_micros(ToUnixMicrosOrZero(snapshot.stepping.stepping_since));
  out.set_regroup_since_unix_micros(ToUnixMicrosOrZero(snapshot.stepping.regroup_since));
  out.set_regrouping(snapshot.stepping.regrouping);
  for (const TaskInfo& task : snapshot.tasks) *out.add_tasks() = ToProto(task);
  for (const SpareInfo& spare : snapshot.spares) {
    pb::SpareInfo& s = *out.add_spares();
    s.set_pod(spare.pod);
    s.set_slot(spare.slot);
    s.set_task_id(spare.task_id);
    s.set_incarnation(spare.incarnation);
    s.set_since_unix_micros(ToUnixMicrosOrZero(spare.since));
  }
  return out;
}

JobSnapshot FromProto(const pb::JobState& state) {
  JobSnapshot out{
      state.job(), state.version(), {}, state.coordinator_id(), state.rolled_back_seconds()};
  for (const pb::TaskInfo& task : state.tasks()) out.tasks.push_back(FromProto(task));
  for (const pb::SpareInfo& s : state.spares()) {
    out.spares.push_back({s.pod(), s.slot(), s.task_id(),
                          base::IncarnationFromWire(s.incarnation()),
                          MicrosOrInfinitePast(s.since_unix_micros())});
  }
  out.stepping = {MicrosOrInfinitePast(state.first_step_unix_micros()),
                  MicrosOrInfinitePast(state.stepping_since_unix_micros()),
                  MicrosOrInfinitePast(state.regroup_since_unix_micros()), state.regrouping()};
  return out;
}

pb::PreemptionRound ToProto(const PreemptionRound& round) {
  pb::PreemptionRound out;
  out.set_round(round.round);
  out.set_deadline_unix_micros(ToUnixMicrosOrZero(round.deadline));
  out.set_reason(round.reason);
  for (int task : round.affected_tasks) out.add_affected_tasks(task);
  return out;
}

PreemptionRound FromProto(const pb::PreemptionRound& round) {
  return PreemptionRound{round.round(),
                         FromUnixMicrosOrInfinite(round.deadline_unix_micros()),
                         round.reason(),
                         {round.affected_tasks().begin(), round.affected_tasks().end()}};
}

pb::SessionEvent ToProto(const SessionEvent& event) {
  pb::SessionEvent out;
  if (const auto* snapshot = std::get_if<JobSnapshot>(&event)) {
    *out.mutable_opened() = ToProto(*snapshot);
  } else if (const auto* ack = std::get_if<HeartbeatAck>(&event)) {
    out.mutable_heartbeat_ack()->set_sent_unix_micros(ack->sent_unix_micros);
  } else if (const auto* info = std::get_if<TaskInfo>(&event)) {
    *out.mutable_task_changed() = ToProto(*info);
  } else if (const auto* error = std::get_if<ErrorReport>(&event)) {
    *out.mutable_error()->mutable_task() = ToProto(error->task);
    out.mutable_error()->set_message(error->message);
  } else if (const auto* round = std::get_if<PreemptionRound>(&event)) {
    *out.mutable_preemption() = ToProto(*round);
  } else if (const auto* result = std::get_if<CallResult>(&event)) {
    pb::CallResult* r = out.mutable_call_result();
    r->set_call_id(result->call_id);
    StatusToFields(result->status, *r);
    r->set_value(result->value);
  }
  return out;
}

std::optional<SessionEvent> FromProto(const pb::SessionEvent& event) {
  switch (event.kind_case()) {
    case pb::SessionEvent::kOpened:
      return FromProto(event.opened());
    case pb::SessionEvent::kHeartbeatAck:
      return HeartbeatAck{event.heartbeat_ack().sent_unix_micros()};
    case pb::SessionEvent::kTaskChanged:
      return FromProto(event.task_changed());
    case pb::SessionEvent::kError:
      return ErrorReport{FromProto(event.error().task()), event.error().message()};
    case pb::SessionEvent::kPreemption:
      return FromProto(event.preemption());
    case pb::SessionEvent::kCallResult: {
      const pb::CallResult& r = event.call_result();
      return CallResult{r.call_id(), StatusFromFields(r), r.value()};
    }
    default:
      return std::nullopt;
  }
}

}  // namespace phalanx::coord
