// Incarnation: which process speaks for a task. Every time a task's process is replaced (a
// failure, a preemption, a job-wide restart, a resume after suspend) it gets the next
// incarnation, and everything the old one was part of (barriers, cliques, sync points) must not
// count the new one. One type for the whole project so an incarnation is never silently narrowed
// between the parts that carry it (the pod label phalanx.dev/incarnation, the TrainingJob's
// status.tasks[].incarnation, PHALANX_INCARNATION, the coordination protocol).
//
// Signed on purpose: the operator reads incarnations from pod labels and status, where "absent
// or garbage" must be representable (kNoIncarnation) and JSON integers are signed. The
// coordination protocol and the C ABI carry it as uint64; the conversion happens at those edges
// only (IncarnationFromWire / IncarnationToWire: proto_convert.cc, c_api.cc), and is lossless for
// every value Phalanx writes.
//
// A named alias, not a wrapper class: what it must prevent is narrowing (an incarnation stored in
// an `int` once wrapped at 2^31). Every signature that carries one says Incarnation, so a
// conversion to anything else stands out in review, and brace initialisation from another
// integer type is a compile error (-Wc++11-narrowing). A wrapper would cost a conversion at each
// of the hundreds of {task, incarnation} literals in tests and catch nothing more that bites.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "absl/strings/numbers.h"

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

// The wire form of an incarnation. kNoIncarnation (never sent by Phalanx) goes out as 0, the
// wire's "none".
constexpr uint64_t IncarnationToWire(Incarnation incarnation) {
  return incarnation < 0 ? 0 : static_cast<uint64_t>(incarnation);
}

// An incarnation written as decimal text (PHALANX_INCARNATION, the clique socket's inc=):
// nullopt for anything but a number in [0, 2^63 - 1].
inline std::optional<Incarnation> ParseIncarnation(std::string_view text) {
  Incarnation value = 0;
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &value) || value < 0) {
    return std::nullopt;
  }
  return value;
}

}  // namespace phalanx::base
