#include "examples/sample_worker/recovery_offer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace phalanx::examples {

namespace {

absl::StatusOr<int64_t> ParseStep(absl::string_view text, absl::string_view whole) {
  int64_t step = 0;
  if (!absl::SimpleAtoi(text, &step) || step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("recovery offer '", whole, "': '", text, "' is not a step"));
  }
  return step;
}

}  // namespace

std::string FormatOffer(const RecoveryOffer& offer) {
  std::string out = absl::StrCat("held=", absl::StrJoin(offer.held, ","));
  if (offer.pending.has_value()) absl::StrAppend(&out, " pending=", *offer.pending);
  return out;
}

absl::StatusOr<RecoveryOffer> ParseOffer(absl::string_view text) {
  RecoveryOffer offer;
  offer.held.insert(0);
  if (absl::StatusOr<int64_t> bare = ParseStep(text, text); bare.ok()) {
    offer.held.insert(*bare);
    return offer;
  }
  bool saw_held = false;
  for (absl::string_view field : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&field, "held=")) {
      saw_held = true;
      for (absl::string_view item : absl::StrSplit(field, ',', absl::SkipEmpty())) {
        absl::StatusOr<int64_t> step = ParseStep(item, text);
        if (!step.ok()) return step.status();
        offer.held.insert(*step);
      }
    } else if (absl::ConsumePrefix(&field, "pending=")) {
      absl::StatusOr<int64_t> step = ParseStep(field, text);
      if (!step.ok()) return step.status();
      offer.pending = *step;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("recovery offer '", text, "': unknown field '", field, "'"));
    }
  }
  if (!saw_held) {
    return absl::InvalidArgumentError(absl::StrCat("recovery offer '", text, "' has no held="));
  }
  return offer;
}

int64_t AgreeResumeStep(const std::vector<RecoveryOffer>& offers) {
  if (offers.empty()) return 0;
  int64_t proven = 0;  // the newest step some task reached
  for (const RecoveryOffer& offer : offers) {
    if (!offer.held.empty()) proven = std::max(proven, *offer.held.rbegin());
  }
  auto can_resume = [proven](const RecoveryOffer& offer, int64_t step) {
    return step == 0 || offer.held.contains(step) || (offer.pending == step && step <= proven);
  };
  // The step must be one the first offer can resume from, so its steps are the candidates.
  std::set<int64_t> candidates = offers.front().held;
  if (offers.front().pending.has_value()) candidates.insert(*offers.front().pending);
  for (auto step = candidates.rbegin(); step != candidates.rend(); ++step) {
    if (std::all_of(offers.begin(), offers.end(),
                    [&](const RecoveryOffer& o) { return can_resume(o, *step); })) {
      return *step;
    }
  }
  return 0;
}

}  // namespace phalanx::examples
