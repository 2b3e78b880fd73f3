#include "runtime/coordination/peer_batch_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/coordination/proto_convert.h"

namespace phalanx::coord {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'790'000'000);

TaskInfo Failed(int id, absl::Duration after) {
  return TaskInfo{id,
                  1,
                  TaskState::kFailed,
                  "the task closed its session connection",
                  kT0 + after,
                  kT0 + after - absl::Milliseconds(300)};
}

// The events a stream would carry, as protos (what a client compares).
std::vector<std::string> AsSent(const std::vector<SessionEvent>& events) {
  std::vector<std::string> out;
  for (const SessionEvent& event : events) out.push_back(ToProto(event).SerializeAsString());
  return out;
}

TEST(PeerBatchCodecTest, EventsComeBackInOrderWithEveryField) {
  std::vector<SessionEvent> events = {
      Failed(3, absl::ZeroDuration()),
      TaskInfo{4, 2, TaskState::kConnected, "registered", kT0 - absl::Seconds(5),
               absl::InfinitePast()},  // never heard: 0 on the wire
      ErrorReport{TaskRef{3, 1}, "CUDA error: an illegal memory access"},
      Failed(7, absl::Microseconds(17)),
      TaskInfo{9, 0, TaskState::kShutdown, "left: done", absl::InfinitePast(),
               absl::InfinitePast()},
  };
  const v1::WirePeerBatch batch = EncodePeerBatch(42, events);
  EXPECT_EQ(batch.id(), 42u);
  // Two runs of task changes around the error report keep the order.
  ASSERT_EQ(batch.segments_size(), 3);
  EXPECT_EQ(batch.segments(0).tasks().task_id_size(), 2);
  EXPECT_TRUE(batch.segments(1).has_event());
  EXPECT_EQ(batch.segments(2).tasks().task_id_size(), 2);

  v1::WirePeerBatch parsed;
  ASSERT_TRUE(parsed.ParseFromString(batch.SerializeAsString()));
  absl::StatusOr<std::vector<SessionEvent>> decoded = DecodePeerBatch(parsed);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(AsSent(*decoded), AsSent(events));
}

// What the batch is for: a mass failure's changes share a reason and differ little in time.
TEST(PeerBatchCodecTest, AMassFailureCostsAFewBytesATask) {
  std::vector<SessionEvent> events;
  size_t as_events = 0;
  for (int id = 0; id < 8192; ++id) {
    events.push_back(Failed(10'000 + id, absl::Microseconds(id * 3)));
    as_events += ToProto(events.back()).ByteSizeLong();
  }
  const size_t as_batch = EncodePeerBatch(1, events).ByteSizeLong();
  EXPECT_LT(as_batch, 8192u * 14) << "bytes a task: " << as_batch / 8192.0;
  EXPECT_GT(as_events, as_batch * 5);
  absl::StatusOr<std::vector<SessionEvent>> decoded = DecodePeerBatch(EncodePeerBatch(1, events));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(AsSent(*decoded), AsSent(events));
}

TEST(PeerBatchCodecTest, MalformedColumnsAreRefusedNotTrusted) {
  v1::WirePeerBatch short_column = EncodePeerBatch(1, {Failed(1, {}), Failed(2, {})});
  short_column.mutable_segments(0)->mutable_tasks()->mutable_incarnation()->RemoveLast();
  EXPECT_THAT(DecodePeerBatch(short_column).status().message(),
              testing::HasSubstr("disagree in length"));

  v1::WirePeerBatch bad_reason = EncodePeerBatch(1, {Failed(1, {})});
  bad_reason.mutable_segments(0)->mutable_tasks()->set_reason_index(0, 5);
  EXPECT_EQ(DecodePeerBatch(bad_reason).status().code(), absl::StatusCode::kInvalidArgument);

  // Extreme deltas wrap instead of overflowing (UBSan would say).
  v1::WirePeerBatch extreme = EncodePeerBatch(1, {Failed(1, {})});
  extreme.mutable_segments(0)->mutable_tasks()->set_base_unix_micros(INT64_MAX);
  extreme.mutable_segments(0)->mutable_tasks()->set_changed_delta_micros(0, INT64_MAX);
  EXPECT_TRUE(DecodePeerBatch(extreme).ok());

  // An empty segment (a newer coordinator's kind) is skipped.
  v1::WirePeerBatch empty;
  empty.add_segments();
  ASSERT_TRUE(DecodePeerBatch(empty).ok());
  EXPECT_TRUE(DecodePeerBatch(empty)->empty());
}

}  // namespace
}  // namespace phalanx::coord
