// A failure's facts (pb::ErrorDetails: the peers that failed, the tasks that never arrived,
// the barrier) attached to an absl::Status as a payload, where the service makes the failure,
// and the status codec of the session's CallResult and the wire's WireStatus (code, message,
// details); status_codec.h is gRPC's. Pure functions; no gRPC (the coordination core uses them).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "runtime/proto/coordination.pb.h"

namespace phalanx::coord {

namespace pb = ::phalanx::coord::v1;

// The payload's type URL (absl::Status::SetPayload).
inline constexpr char kErrorDetailsUrl[] = "type.googleapis.com/phalanx.coord.v1.ErrorDetails";

// `status` with `details` attached (an OK status stays OK, without them).
absl::Status WithDetails(absl::Status status, const pb::ErrorDetails& details);
// The details attached to `status`, if any (and parseable).
std::optional<pb::ErrorDetails> DetailsOf(const absl::Status& status);
// `status` with `context` before its message ("barrier 'b' failed: "), its code and details
// kept (absl::Status(code, message) would drop them).
absl::Status WithContext(const absl::Status& status, std::string_view context);

// Tests only (the coordinator's --testing_reword_errors): every status the service encodes for
// a client says "reworded <CODE>" instead of its message, so a test proves the clients read the
// details, never the words. Process-wide; off by default.
void SetRewordErrorsForTesting(bool on);
// The message a status carries to a client: its own, or the reworded one above.
std::string MessageForClient(const absl::Status& status);

// pb::CallResult and pb::WireStatus: both have code, message and details fields.
template <typename Fields>
void StatusToFields(const absl::Status& status, Fields& out) {
  out.set_code(static_cast<int32_t>(status.code()));
  out.set_message(MessageForClient(status));
  if (std::optional<pb::ErrorDetails> details = DetailsOf(status)) {
    *out.mutable_details() = *std::move(details);
  }
}
template <typename Fields>
absl::Status StatusFromFields(const Fields& in) {
  absl::Status status(static_cast<absl::StatusCode>(in.code()), in.message());
  return in.has_details() ? WithDetails(std::move(status), in.details()) : status;
}

}  // namespace phalanx::coord
