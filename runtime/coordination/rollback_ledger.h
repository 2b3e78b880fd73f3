// RollbackLedger: the job's total of work its tasks discarded rolling back to a checkpoint, as
// they report it (ReportRolledBack), for the operator's goodput (it books the total as lost).
// Every task of one recovery reports under the same name; the recovery counts once, at its
// largest report (the tasks rolled back together: the job lost that span once, not once per
// task). Memory is bounded: the newest kMaxRecoveries names are kept; an older recovery's
// amount stays in the total, and a report naming it again counts as a new recovery (recoveries
// hundreds apart do not report late). Plain data, guarded by the service's lock.
#pragma once

#include <deque>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace phalanx::coord {

class RollbackLedger {
 public:
  static constexpr size_t kMaxRecoveries = 256;
  static constexpr size_t kMaxNameBytes = 256;
  // No one report may claim more than this (a garbage value must not swamp the job's figure).
  static constexpr absl::Duration kMaxReport = absl::Hours(24 * 30);

  // Records `rolled_back` for `recovery`; returns whether the total changed. InvalidArgument
  // for an empty or over-long name, or a negative, infinite or over-large amount.
  absl::StatusOr<bool> Report(const std::string& recovery, absl::Duration rolled_back);
  double total_seconds() const { return total_seconds_; }

 private:
  double total_seconds_ = 0;
  absl::flat_hash_map<std::string, double> by_recovery_;  // seconds counted per recovery
  std::deque<std::string> order_;                         // oldest first
};

}  // namespace phalanx::coord
