// The session wire's framing (coordination.proto, "The session wire", ADR 0005): shared by the
// coordinator's WireSessionServer and the client's WireConnection, so both cut frames the same
// way. A connection starts with the magic (each side sends it once), then carries frames: a
// 4-byte big-endian payload length, a 4-byte big-endian stream id, and the payload, one message.
// Streams multiplex the sessions of several tasks of one process over one connection; the
// client numbers them (1, 2, ..., increasing). A stream's first client frame is its WireHello;
// a client frame with an empty payload closes the stream (the task is gone, as a closed
// connection says for all of its streams).
// Thread-safety: pure functions, and PeerBatchWindow (not thread-safe: one per side).
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>

namespace phalanx::coord {

// What each side sends first. The first byte tells the coordinator's listener a wire
// connection from gRPC (HTTP/2 starts with 'P', TLS with 0x16); the last is the version (2:
// streams; 3: peer events once per connection, WirePeerBatch). A coordinator answers any magic with
// its own, so a client of another version learns it should use gRPC.
inline constexpr char kWireMagic[4] = {'\xF0', 'P', 'W', '\x03'};
inline constexpr std::string_view kWireMagicView(kWireMagic, sizeof(kWireMagic));
// A client's magic saying that a TLS handshake follows (tls_session.h, ADR 0006): sent in the
// clear, then everything both ways is TLS records, the coordinator's magic (kWireMagic) and the
// frames inside them. A coordinator with a certificate takes only this one; one without answers
// it with its cleartext magic and closes, so the client can say which side is misconfigured.
inline constexpr char kWireTlsMagic[4] = {'\xF0', 'P', 'T', '\x03'};
inline constexpr std::string_view kWireTlsMagicView(kWireTlsMagic, sizeof(kWireTlsMagic));
inline constexpr unsigned char kWireFirstByte = 0xF0;
inline constexpr size_t kWireHeaderBytes = 8;
// Peer batches (WirePeerBatch) each side keeps per connection: the last ones defined, the
// oldest forgotten first. Both sides count the same frames in the same order, so a stream's
// name for a batch (peer_batch_ref) always finds it; the coordinator defines a batch again for
// a stream that names it after it was forgotten.
inline constexpr size_t kWirePeerBatchesKept = 8;
// The stream of connection-wide frames (peer batch definitions): the client numbers its
// streams from 1.
inline constexpr uint32_t kWireConnectionStream = 0;

// The peer batches one side of a connection holds, by id: the last kWirePeerBatchesKept defined,
// the oldest forgotten first. The coordinator keeps one per connection (what it has defined) and
// the client one (what it was sent); fed the same definitions in the same order, they agree on
// which names still find their batch. `T` is what a side keeps of a batch. Not thread-safe.
template <typename T>
class PeerBatchWindow {
 public:
  void Define(uint64_t id, T batch) {
    kept_.emplace_back(id, std::move(batch));
    if (kept_.size() > kWirePeerBatchesKept) kept_.pop_front();
  }
  // The batch named `id`, or null once it was forgotten (or never defined).
  const T* Find(uint64_t id) const {
    for (const auto& [kept_id, batch] : kept_) {
      if (kept_id == id) return &batch;
    }
    return nullptr;
  }

 private:
  std::deque<std::pair<uint64_t, T>> kept_;
};

namespace wire_internal {
inline void PutBigEndian32(uint32_t value, unsigned char* p) {
  p[0] = static_cast<unsigned char>(value >> 24);
  p[1] = static_cast<unsigned char>(value >> 16);
  p[2] = static_cast<unsigned char>(value >> 8);
  p[3] = static_cast<unsigned char>(value);
}
inline uint32_t GetBigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
}  // namespace wire_internal

// Appends `message` as one frame of `stream` to `out`.
inline void AppendFrame(const google::protobuf::MessageLite& message, uint32_t stream,
                        std::string& out) {
  const size_t size = message.ByteSizeLong();
  const size_t at = out.size();
  out.resize(at + kWireHeaderBytes + size);
  auto* p = reinterpret_cast<unsigned char*>(out.data() + at);
  wire_internal::PutBigEndian32(static_cast<uint32_t>(size), p);
  wire_internal::PutBigEndian32(stream, p + 4);
  message.SerializeWithCachedSizesToArray(p + kWireHeaderBytes);
}

// Appends the frame that closes `stream` (client to coordinator: an empty payload).
inline void AppendCloseFrame(uint32_t stream, std::string& out) {
  const size_t at = out.size();
  out.resize(at + kWireHeaderBytes);
  auto* p = reinterpret_cast<unsigned char*>(out.data() + at);
  wire_internal::PutBigEndian32(0, p);
  wire_internal::PutBigEndian32(stream, p + 4);
}

enum class FrameCut { kNeedMore, kFrame, kTooBig };

struct Frame {
  uint32_t stream = 0;
  std::string_view payload;
  size_t consumed = 0;  // bytes the frame takes in the input, header included
};

// Cuts the frame at the front of `in`: kFrame and `frame` filled in; kNeedMore when `in` holds
// less than a whole frame; kTooBig when the header announces more than `max_bytes` (then only
// `frame->stream` is set).
inline FrameCut CutFrame(std::string_view in, size_t max_bytes, Frame* frame) {
  if (in.size() < kWireHeaderBytes) return FrameCut::kNeedMore;
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const size_t size = wire_internal::GetBigEndian32(p);
  frame->stream = wire_internal::GetBigEndian32(p + 4);
  if (size > max_bytes) return FrameCut::kTooBig;
  if (in.size() < kWireHeaderBytes + size) return FrameCut::kNeedMore;
  frame->payload = in.substr(kWireHeaderBytes, size);
  frame->consumed = kWireHeaderBytes + size;
  return FrameCut::kFrame;
}

}  // namespace phalanx::coord
