// PeerEventCoalescer: holds the events every session must hear (a task failed or restarted, a
// task reported an error) and turns them into one batch per tick, which every session's outbox
// shares (SessionOutbox::PushShared). Used by CoordinationService, which decides when to send.
//
// Why: pushing each event to every session made N tasks failing at once cost N events per
// survivor, O(N²) in all (+777 MB at N = 3000). Policy: the first event after a tick goes out at
// once (a single failure is not delayed); later ones wait for the tick and go out together; for
// a task's state only its latest TaskInfo is kept.
//
//            Add() while ready: send now               Add() while holding: keep
//   READY ─────────────────────────────▶ HOLDING ◀───────────────────────────────┐
//     ▲                                    │  └──────────────────────────────────┘
//     └──────────── EndTick() ─────────────┘  (Take() at the tick sends what was kept)
//
// Not thread-safe: the service calls it with its lock held.
#pragma once

#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "runtime/coordination/peer_batch.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

class PeerEventCoalescer {
 public:
  // Keeps `event` (a TaskInfo or an ErrorReport) for the next batch.
  void Add(SessionEvent event);
  // True when a batch went out since the last tick: new events wait for the next one.
  bool holding() const { return holding_; }
  // Holds what comes next until Take() (a tick, or a call that adds several related events).
  void Hold() { holding_ = true; }
  // The kept events in order (superseded TaskInfos dropped), or nullptr when there are none.
  // Holds until EndTick().
  std::shared_ptr<const PeerBatch> Take();
  // A tick is over: the next event goes out at once again.
  void EndTick() { holding_ = false; }

 private:
  std::vector<SessionEvent> pending_;
  absl::flat_hash_map<int, size_t> latest_info_;  // task id → index of its newest TaskInfo
  bool holding_ = false;
  uint64_t last_batch_id_ = 0;
};

}  // namespace phalanx::coord
