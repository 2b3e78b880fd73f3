// PeerBatch: the events every session must hear at one time (a task failed or restarted, a task
// reported an error), made by PeerEventCoalescer and shared by every session's outbox
// (SessionOutbox::PushShared): a mass failure is held in memory once, and the session wire
// encodes it once and sends it once per connection (WirePeerBatch), not once per stream.
// Immutable once made, except the wire's encoding, made once by whichever connection sends it
// first. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/call_once.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

struct PeerBatch {
  uint64_t id = 0;  // increasing per service: the wire names a batch by it
  std::vector<SessionEvent> events;

  // `encode()`'s result, computed on the first call only (the session wire's frame bytes).
  template <typename Encode>
  const std::string& EncodedOnce(Encode encode) const {
    absl::call_once(encode_once_, [&] { encoded_ = encode(); });
    return encoded_;
  }

 private:
  mutable absl::once_flag encode_once_;
  mutable std::string encoded_;
};

}  // namespace phalanx::coord
