// WorkerEvent: one `EVENT t_ms=... task=... inc=... kind=... k=v k="quoted v"` line printed by
// the sample worker, parsed. Used by the multi-process tests, the demo and the benchmarks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/base/incarnation.h"

namespace phalanx::harness {

struct WorkerEvent {
  int64_t t_ms = 0;
  int task = -1;
  base::Incarnation incarnation = 0;
  std::string kind;
  std::map<std::string, std::string> fields;

  // The field as an integer, or `fallback` when absent or not a number.
  int64_t Int(const std::string& name, int64_t fallback = -1) const;
};

// Nullopt for a line that is not an EVENT line.
std::optional<WorkerEvent> ParseWorkerEvent(const std::string& line);

}  // namespace phalanx::harness
