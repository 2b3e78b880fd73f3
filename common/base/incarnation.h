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

namespace phalanx::base {

using Incarnation = int64_t;

// No incarnation known (a pod without the label, a label that is not a number).
inline constexpr Incarnation kNoIncarnation = -1;

}  // namespace phalanx::base
