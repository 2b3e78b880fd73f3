#include "runtime/coordination/error_details.h"

#include <atomic>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace phalanx::coord {
namespace {

std::atomic<bool> g_reword_errors{false};

}  // namespace

void SetRewordErrorsForTesting(bool on) { g_reword_errors = on; }

std::string MessageForClient(const absl::Status& status) {
  if (!g_reword_errors || status.ok()) return std::string(status.message());
  return absl::StrCat("reworded ", absl::StatusCodeToString(status.code()));
}

absl::Status WithDetails(absl::Status status, const pb::ErrorDetails& details) {
  if (!status.ok()) status.SetPayload(kErrorDetailsUrl, absl::Cord(details.SerializeAsString()));
  return status;
}

std::optional<pb::ErrorDetails> DetailsOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kErrorDetailsUrl);  // absl::optional here
  if (!payload.has_value()) return std::nullopt;
  pb::ErrorDetails details;
  if (!details.ParseFromString(std::string(*payload))) return std::nullopt;
  return details;
}

absl::Status WithContext(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  absl::Status out(status.code(), absl::StrCat(absl::string_view(context.data(), context.size()),
                                               status.message()));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace phalanx::coord
