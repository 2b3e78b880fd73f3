// Conversions between the coordination core's value types (types.h) and the wire protos.
// Pure functions; used by the RPC handler and the client.
#pragma once

#include <optional>

#include "runtime/coordination/types.h"
#include "runtime/proto/coordination.pb.h"

namespace phalanx::coord {

namespace pb = ::phalanx::coord::v1;

pb::TaskState ToProto(TaskState state);
TaskState FromProto(pb::TaskState state);
pb::TaskRef ToProto(const TaskRef& ref);
TaskRef FromProto(const pb::TaskRef& ref);
pb::TaskInfo ToProto(const TaskInfo& info);
TaskInfo FromProto(const pb::TaskInfo& info);
pb::JobState ToProto(const JobSnapshot& snapshot);
JobSnapshot FromProto(const pb::JobState& state);
pb::PreemptionRound ToProto(const PreemptionRound& round);
PreemptionRound FromProto(const pb::PreemptionRound& round);
pb::SessionEvent ToProto(const SessionEvent& event);
// Nullopt for an event with no recognised kind (a newer server).
std::optional<SessionEvent> FromProto(const pb::SessionEvent& event);

absl::Time FromUnixMicrosOrInfinite(int64_t micros);
int64_t ToUnixMicrosOrZero(absl::Time time);
// For instants that may not have happened yet (0 on the wire).
absl::Time MicrosOrInfinitePast(int64_t micros);

}  // namespace phalanx::coord
