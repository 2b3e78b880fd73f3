// The session wire's framing (coordination.proto, "The session wire"): shared by the
// coordinator's WireSessionServer and the client's WireSessionStream, so both cut frames the
// same way. A frame is a 4-byte big-endian length and that many bytes of one message.
// Thread-safety: pure functions.
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace phalanx::coord {

// What each side sends first. The first byte tells the coordinator's listener a wire
// connection from gRPC (HTTP/2 starts with 'P', TLS with 0x16).
inline constexpr char kWireMagic[4] = {'\xF0', 'P', 'W', '\x01'};
inline constexpr std::string_view kWireMagicView(kWireMagic, sizeof(kWireMagic));
inline constexpr unsigned char kWireFirstByte = 0xF0;
inline constexpr size_t kWireHeaderBytes = 4;

// Appends `message` as one frame to `out`.
inline void AppendFrame(const google::protobuf::MessageLite& message, std::string& out) {
  const size_t size = message.ByteSizeLong();
  const size_t at = out.size();
  out.resize(at + kWireHeaderBytes + size);
  auto* p = reinterpret_cast<unsigned char*>(out.data() + at);
  p[0] = static_cast<unsigned char>(size >> 24);
  p[1] = static_cast<unsigned char>(size >> 16);
  p[2] = static_cast<unsigned char>(size >> 8);
  p[3] = static_cast<unsigned char>(size);
  message.SerializeWithCachedSizesToArray(p + kWireHeaderBytes);
}

enum class FrameCut { kNeedMore, kFrame, kTooBig };

// Cuts the frame at the front of `in`: kFrame with its message bytes in `payload` and the
// bytes it takes (header included) in `consumed`; kNeedMore when `in` holds less than a whole
// frame; kTooBig when the header announces more than `max_bytes`.
inline FrameCut CutFrame(std::string_view in, size_t max_bytes, std::string_view* payload,
                         size_t* consumed) {
  if (in.size() < kWireHeaderBytes) return FrameCut::kNeedMore;
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const size_t size = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
  if (size > max_bytes) return FrameCut::kTooBig;
  if (in.size() < kWireHeaderBytes + size) return FrameCut::kNeedMore;
  *payload = in.substr(kWireHeaderBytes, size);
  *consumed = kWireHeaderBytes + size;
  return FrameCut::kFrame;
}

}  // namespace phalanx::coord
