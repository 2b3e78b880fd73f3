// The one mapping between absl::Status and grpc::Status (codes are numerically identical;
// messages carry over). Used by the server and the client.
//
// One exception: CANCELLED. The service cancels a call only for a reason it names (a task
// cancelled the barrier, a newer call of the same task superseded it), and marks those
// statuses. An unmarked CANCELLED comes from gRPC itself (a server shutting down cancels what is
// still in flight) or from a coordinator older than the mark: to the client that is the
// coordinator going away, so it arrives as Unavailable, which callers retry after reconnecting.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace phalanx::coord {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace phalanx::coord
