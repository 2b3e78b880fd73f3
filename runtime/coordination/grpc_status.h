// The one mapping between absl::Status and grpc::Status (codes are numerically identical;
// messages carry over). Used by the server and the client.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace phalanx::coord {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace phalanx::coord
