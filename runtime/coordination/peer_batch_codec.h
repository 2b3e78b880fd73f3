// The session wire's peer batches (WirePeerBatch, coordination.proto): the events every session
// hears (membership changes, error reports), encoded once per batch and sent once per
// connection. A run of task changes is written by column (TaskInfoColumns): a mass failure's
// thousands of changes share a few reasons and differ little in time, ~10 bytes a task instead
// of ~90 as separate events.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/coordination/types.h"
#include "runtime/proto/coordination.pb.h"

namespace phalanx::coord {

// `events` as batch `id`, in order (the same events FromProto gives back after DecodePeerBatch).
v1::WirePeerBatch EncodePeerBatch(uint64_t id, const std::vector<SessionEvent>& events);

// The events of `batch`, in order. InvalidArgument when the columns disagree in length, a reason
// index is out of range, or a segment holds no event a peer batch carries.
absl::StatusOr<std::vector<SessionEvent>> DecodePeerBatch(const v1::WirePeerBatch& batch);

}  // namespace phalanx::coord
