// The status codec on every carrier: a failure's details survive gRPC, CallResult and
// WireStatus whatever its message says; CANCELLED keeps the service-or-shutdown distinction.
#include "runtime/coordination/status_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/coordination/error_details.h"

namespace phalanx::coord {
namespace {

pb::ErrorDetails PeerFailed(int task, uint64_t incarnation) {
  pb::ErrorDetails d;
  d.set_reason(pb::ErrorDetails::PEER_FAILED);
  pb::TaskRef* ref = d.add_failed_tasks();
  ref->set_task_id(task);
  ref->set_incarnation(incarnation);
  d.set_failure_reason("session broken");
  return d;
}

void ExpectPeerFailed(const absl::Status& s, int task, uint64_t incarnation) {
  std::optional<pb::ErrorDetails> d = DetailsOf(s);
  ASSERT_TRUE(d.has_value()) << s;
  EXPECT_EQ(d->reason(), pb::ErrorDetails::PEER_FAILED);
  ASSERT_EQ(d->failed_tasks_size(), 1);
  EXPECT_EQ(d->failed_tasks(0).task_id(), task);
  EXPECT_EQ(d->failed_tasks(0).incarnation(), incarnation);
  EXPECT_EQ(d->failure_reason(), "session broken");
}

TEST(StatusCodecTest, DetailsSurviveEveryCarrier) {
  // An incarnation past 2^32 and 2^63: nothing narrows it on the way.
  for (uint64_t incarnation : {uint64_t{0}, uint64_t{1} << 33, uint64_t{1} << 63}) {
    const absl::Status failed =
        WithDetails(absl::CancelledError("any words at all"), PeerFailed(3, incarnation));
    const absl::Status over_grpc = FromGrpcStatus(ToGrpcStatus(failed));
    EXPECT_TRUE(absl::IsCancelled(over_grpc)) << over_grpc;
    ExpectPeerFailed(over_grpc, 3, incarnation);

    pb::CallResult result;
    StatusToFields(failed, result);
    ExpectPeerFailed(StatusFromFields(result), 3, incarnation);
    pb::WireStatus end;
    StatusToFields(failed, end);
    ExpectPeerFailed(StatusFromFields(end), 3, incarnation);
    EXPECT_EQ(StatusFromFields(end).message(), "any words at all");
  }
}

TEST(StatusCodecTest, CancelledIsTheServicesOnlyWhenItSaysSo) {
  // The service's own cancel, with no details: the marker older clients also read.
  const grpc::Status plain = ToGrpcStatus(absl::CancelledError("barrier cancelled"));
  EXPECT_EQ(plain.error_details(), "phalanx.service-cancelled");
  EXPECT_TRUE(absl::IsCancelled(FromGrpcStatus(plain)));
  // gRPC's own cancel (a server shutting down): the coordinator going away.
  const absl::Status shutdown =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::CANCELLED, "Cancelled"));
  EXPECT_TRUE(absl::IsUnavailable(shutdown)) << shutdown;
  // Details that are not ours (garbage bytes) are no details.
  const absl::Status garbage =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::INTERNAL, "x", std::string("\xff\xff", 2)));
  EXPECT_TRUE(absl::IsInternal(garbage));
  EXPECT_FALSE(DetailsOf(garbage).has_value());
}

TEST(StatusCodecTest, RewordingForTestsChangesTheWordsOnly) {
  SetRewordErrorsForTesting(true);
  const absl::Status failed =
      WithDetails(absl::CancelledError("peer task 3 failed"), PeerFailed(3, 7));
  const grpc::Status sent = ToGrpcStatus(failed);
  pb::CallResult result;
  StatusToFields(failed, result);
  SetRewordErrorsForTesting(false);
  EXPECT_EQ(sent.error_message(), "reworded CANCELLED");
  EXPECT_EQ(result.message(), "reworded CANCELLED");
  ExpectPeerFailed(FromGrpcStatus(sent), 3, 7);
  ExpectPeerFailed(StatusFromFields(result), 3, 7);
  EXPECT_EQ(ToGrpcStatus(failed).error_message(), "peer task 3 failed");
}

TEST(StatusCodecTest, OkCarriesNothing) {
  EXPECT_TRUE(FromGrpcStatus(ToGrpcStatus(absl::OkStatus())).ok());
  EXPECT_TRUE(WithDetails(absl::OkStatus(), PeerFailed(1, 1)).ok());
  EXPECT_FALSE(DetailsOf(absl::OkStatus()).has_value());
}

}  // namespace
}  // namespace phalanx::coord
