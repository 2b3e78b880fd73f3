#include "runtime/coordination/status_codec.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace phalanx::coord {
namespace {

// What grpc-status-details-bin holds on a CANCELLED the service decided on and has no details
// for: what clients from before ErrorDetails look for. (A CANCELLED with details, a peer's
// failure, reaches such a client as Unavailable: it reconnects, then sees the failed peer.)
constexpr char kLegacyServiceCancelled[] = "phalanx.service-cancelled";

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(status.code());
  std::optional<pb::ErrorDetails> details = DetailsOf(status);
  const std::string message = MessageForClient(status);
  if (details.has_value()) return grpc::Status(code, message, details->SerializeAsString());
  if (absl::IsCancelled(status)) {
    // A plain service cancel: the marker clients of every version read.
    return grpc::Status(code, message, kLegacyServiceCancelled);
  }
  return grpc::Status(code, message);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  std::optional<pb::ErrorDetails> details;
  if (status.error_details() == kLegacyServiceCancelled) {
    details.emplace();
    details->set_reason(pb::ErrorDetails::SERVICE_CANCELLED);
  } else if (!status.error_details().empty()) {
    details.emplace();
    if (!details->ParseFromString(status.error_details())) details.reset();
  }
  if (status.error_code() == grpc::StatusCode::CANCELLED && !details.has_value()) {
    return absl::UnavailableError(absl::StrCat("the call ended with the coordinator going away (",
                                               status.error_message(),
                                               "); retry after reconnecting"));
  }
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  return details.has_value() ? WithDetails(std::move(out), *details) : out;
}

}  // namespace phalanx::coord
