// Incarnation: which process speaks for a task. Every time a task's process is replaced (a
// failure, a preemption, a job-wide restart, a resume after suspend) it gets the next
// incarnation, and everything the old one was part of (barriers, cliques, sync points) must not
// count the new one. One type for the whole project so an incarnation is never silently narrowed
// between the parts that carry it (the pod label phalanx.dev/incarnation, the TrainingJob's
// status.tasks[].incarnation, PHALANX_INCARNATION, the coordination protocol).
//
// Signed on purpose: the operator reads incarnations from pod labels and status, where "absent
// or garbage" must be representable (kNoIncarnation) and JSON integers are signed. The runtime
// (runtime/coordination, runtime/client, node_agent/cliques) still spells it uint64_t, as the
// proto does; it moves to this type with its next change (issue 12) — values are always >= 0, so
// the conversion between the two is lossless.
#pragma once

#include <cstdint>
#include <limits>

namespace phalanx::base {

using Incarnation = int64_t;

// No incarnation known (a pod without the label, a label that is not a number).
inline constexpr Incarnation kNoIncarnation = -1;

// An incarnation as the coordination protocol carries it (uint64): every value Phalanx writes
// fits; one that does not (above 2^63 - 1, from something else) is kNoIncarnation, never a
// wrapped or narrowed number.
constexpr Incarnation IncarnationFromWire(uint64_t wire) {
  return wire > static_cast<uint64_t>(std::numeric_limits<Incarnation>::max())
             ? kNoIncarnation
             : static_cast<Incarnation>(wire);
}

}  // namespace phalanx::base
