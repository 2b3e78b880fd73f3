#include "runtime/coordination/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace phalanx::coord {
namespace {

// Rides in grpc-status-details-bin on a CANCELLED the service itself decided on.
constexpr char kServiceCancelled[] = "phalanx.service-cancelled";

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(status.code());
  if (absl::IsCancelled(status)) {
    return grpc::Status(code, std::string(status.message()), kServiceCancelled);
  }
  return grpc::Status(code, std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  if (status.error_code() == grpc::StatusCode::CANCELLED &&
      status.error_details() != kServiceCancelled) {
    return absl::UnavailableError(absl::StrCat("the call ended with the coordinator going away (",
                                               status.error_message(),
                                               "); retry after reconnecting"));
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace phalanx::coord
