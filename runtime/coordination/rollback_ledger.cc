#include "runtime/coordination/rollback_ledger.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace phalanx::coord {

absl::StatusOr<bool> RollbackLedger::Report(const std::string& recovery,
                                            absl::Duration rolled_back) {
  if (recovery.empty() || recovery.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a recovery's name must have 1 to ",
                                                   kMaxNameBytes, " bytes, got ", recovery.size()));
  }
  if (rolled_back < absl::ZeroDuration() || rolled_back > kMaxReport) {
    return absl::InvalidArgumentError(absl::StrCat("rolled-back time must be between 0 and ",
                                                   absl::FormatDuration(kMaxReport), ", got ",
                                                   absl::FormatDuration(rolled_back)));
  }
  const double seconds = absl::ToDoubleSeconds(rolled_back);
  auto it = by_recovery_.find(recovery);
  if (it == by_recovery_.end()) {
    if (order_.size() == kMaxRecoveries) {
      by_recovery_.erase(order_.front());
      order_.pop_front();
    }
    it = by_recovery_.emplace(recovery, 0.0).first;
    order_.push_back(recovery);
  }
  if (seconds <= it->second) return false;
  total_seconds_ += seconds - it->second;
  it->second = seconds;
  return true;
}

}  // namespace phalanx::coord
