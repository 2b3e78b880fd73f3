#include "runtime/client/spare_assignment.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "runtime/coordination/bearer.h"
#include "runtime/coordination/status_codec.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::client {

namespace pb = ::phalanx::coord::v1;

absl::StatusOr<SpareIdentity> AwaitSpareAssignment(const SpareConfig& config,
                                                   absl::Duration unreachable_timeout,
                                                   absl::Duration poll) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      config.coordinator, CoordinatorChannelCredentials(config.tls, args), args);
  std::unique_ptr<pb::Coordination::Stub> stub = pb::Coordination::NewStub(channel);
  // A real-time bound, like the transport's own deadlines.
  absl::Time reachable_until = absl::Now() + unreachable_timeout;
  absl::Status last = absl::OkStatus();
  while (true) {
    // While the coordinator is unreachable the call waits for it (wait_for_ready) until the
    // bound, not failing at once; a poll never outlasts what is left of the bound.
    const absl::Duration left = std::max(absl::Milliseconds(100), reachable_until - absl::Now());
    const absl::Duration this_poll = std::min(poll, left);
    pb::AwaitAssignmentRequest request;
    request.set_pod(config.pod);
    request.set_timeout_ms(absl::ToInt64Milliseconds(this_poll));
    pb::AwaitAssignmentResponse response;
    grpc::ClientContext context;
    context.AddMetadata(coord::kAuthorizationHeader, coord::BearerCredential(config.credential));
    context.set_deadline(absl::ToChronoTime(absl::Now() + this_poll + absl::Seconds(5)));
    context.set_wait_for_ready(true);
    const absl::Status status =
        coord::FromGrpcStatus(stub->AwaitAssignment(&context, request, &response));
    if (status.ok()) {
      reachable_until = absl::Now() + unreachable_timeout;
      if (!response.assigned()) continue;  // the poll ended: wait again
      return SpareIdentity{response.task_id(), base::IncarnationFromWire(response.incarnation()),
                           response.credential(), response.num_tasks()};
    }
    if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) return status;
    last = status;
    if (absl::Now() >= reachable_until) {
      return absl::DeadlineExceededError(absl::StrCat("spare ", config.pod, ": the coordinator at ",
                                                      config.coordinator, " was unreachable for ",
                                                      absl::FormatDuration(unreachable_timeout),
                                                      ": ", last.message()));
    }
  }
}

}  // namespace phalanx::client
