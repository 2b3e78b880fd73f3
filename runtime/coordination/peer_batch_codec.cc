#include "runtime/coordination/peer_batch_codec.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "runtime/coordination/proto_convert.h"

namespace phalanx::coord {

namespace {

// Appends `info` to the run of task changes being written.
class ColumnsWriter {
 public:
  explicit ColumnsWriter(pb::TaskInfoColumns& out) : out_(out) {}

  void Add(const TaskInfo& info) {
    const int64_t changed = ToUnixMicrosOrZero(info.changed);
    if (out_.task_id_size() == 0) out_.set_base_unix_micros(changed);
    out_.add_task_id(info.task_id);
    out_.add_incarnation(base::IncarnationToWire(info.incarnation));
    out_.add_state(ToProto(info.state));
    auto [it, added] = reason_index_.try_emplace(info.reason, out_.reasons_size());
    if (added) out_.add_reasons(info.reason);
    out_.add_reason_index(it->second);
    out_.add_changed_delta_micros(changed - out_.base_unix_micros());
    out_.add_last_heard_delta_micros(ToUnixMicrosOrZero(info.last_heard) - changed);
  }

 private:
  pb::TaskInfoColumns& out_;
  absl::flat_hash_map<std::string, uint32_t> reason_index_;
};

absl::Status ReadColumns(const pb::TaskInfoColumns& in, std::vector<SessionEvent>& out) {
  const int n = in.task_id_size();
  if (in.incarnation_size() != n || in.state_size() != n || in.reason_index_size() != n ||
      in.changed_delta_micros_size() != n || in.last_heard_delta_micros_size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("a peer batch's task columns disagree in length (", n, " task ids)"));
  }
  for (int i = 0; i < n; ++i) {
    if (in.reason_index(i) >= static_cast<uint32_t>(in.reasons_size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("a peer batch's reason index ", in.reason_index(i), " is out of range"));
    }
    // Unsigned: a hostile delta wraps instead of overflowing.
    const auto changed = static_cast<int64_t>(static_cast<uint64_t>(in.base_unix_micros()) +
                                              static_cast<uint64_t>(in.changed_delta_micros(i)));
    const auto last_heard = static_cast<int64_t>(
        static_cast<uint64_t>(changed) + static_cast<uint64_t>(in.last_heard_delta_micros(i)));
    out.push_back(TaskInfo{in.task_id(i), base::IncarnationFromWire(in.incarnation(i)),
                           FromProto(static_cast<pb::TaskState>(in.state(i))),
                           in.reasons(static_cast<int>(in.reason_index(i))),
                           MicrosOrInfinitePast(changed), MicrosOrInfinitePast(last_heard)});
  }
  return absl::OkStatus();
}

}  // namespace

pb::WirePeerBatch EncodePeerBatch(uint64_t id, const std::vector<SessionEvent>& events) {
  pb::WirePeerBatch batch;
  batch.set_id(id);
  std::optional<ColumnsWriter> run;  // the run of task changes being written, if any
  for (const SessionEvent& event : events) {
    if (const auto* info = std::get_if<TaskInfo>(&event)) {
      if (!run.has_value()) run.emplace(*batch.add_segments()->mutable_tasks());
      run->Add(*info);
      continue;
    }
    run.reset();
    *batch.add_segments()->mutable_event() = ToProto(event);
  }
  return batch;
}

absl::StatusOr<std::vector<SessionEvent>> DecodePeerBatch(const pb::WirePeerBatch& batch) {
  std::vector<SessionEvent> events;
  for (const pb::WirePeerSegment& segment : batch.segments()) {
    if (segment.has_tasks()) {
      if (absl::Status read = ReadColumns(segment.tasks(), events); !read.ok()) return read;
      continue;
    }
    std::optional<SessionEvent> event =
        segment.has_event() ? FromProto(segment.event()) : std::nullopt;
    // A newer coordinator's kind of event is skipped, as on a stream; an empty segment too.
    if (event.has_value()) events.push_back(*std::move(event));
  }
  return events;
}

}  // namespace phalanx::coord
