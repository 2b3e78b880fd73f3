// The one codec for a status that crosses a process boundary, on either transport: gRPC's
// status (code, message, details bytes), the session's CallResult and the wire's WireStatus
// (code, message, details). A failure's facts (pb::ErrorDetails: the peers that failed, the
// tasks that never arrived, the barrier) ride beside its message as an absl::Status payload, so
// clients read fields, never the message, which is for people and may be reworded. Codes are
// numerically identical in absl and gRPC. Pure functions.
//
// One exception: CANCELLED. The service cancels a call only for a reason it names (a peer
// failed, a task cancelled the barrier, a newer call of the same task superseded it), and says
// so in the details (on gRPC a fixed marker when there is nothing more to say). A CANCELLED
// without them comes from gRPC itself (a server shutting down cancels what is still in flight): to
// the client that is the coordinator going away, so it arrives as Unavailable, which callers retry
// after reconnecting.
#pragma once

#include <grpcpp/support/status.h>

#include <optional>

#include "absl/status/status.h"
#include "runtime/coordination/error_details.h"
#include "runtime/proto/coordination.pb.h"

namespace phalanx::coord {

namespace pb = ::phalanx::coord::v1;

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace phalanx::coord
