// Fuzz target: the session wire's server (runtime/coordination/wire_server.h) as a hostile peer
// meets it: bytes written into one end of a socket pair whose other end the server adopted,
// then the connection closed. The bytes are the whole conversation: the magic, frames with any
// stream ids and lengths (hellos, opens, calls, heartbeats, close frames), interleaved however
// the input says. The input:
//   byte 0: the job's task count (1..8);
//   then pieces [length: 1 byte][bytes], each written with its own send() (so frames are cut
//   across reads), the last one taking what is left.
// The corpus holds whole conversations made with the job token "fuzz-token".
//
// Checked, besides no crash (ASan/UBSan under `make fuzz`): what the server sends back is
// always the magic and then well-formed frames of parseable WireServerFrames; the server closes
// the connection once the peer has (never a hang: bounded by a deadline); and afterwards it
// holds no stream (phalanx_coordinator_wire_streams is 0: every session on the connection was
// closed, the crash signal of its tasks).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz/fuzz_input.h"
#include "prometheus/registry.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/rpc_handler.h"
#include "runtime/coordination/service.h"
#include "runtime/coordination/wire_format.h"
#include "runtime/coordination/wire_server.h"
#include "runtime/proto/coordination.pb.h"

namespace {

namespace pb = ::phalanx::coord::v1;
using phalanx::coord::CoordinationService;
using phalanx::coord::WireSessionServer;

constexpr char kToken[] = "fuzz-token";

double Gauge(prometheus::Registry& registry, const std::string& name) {
  for (const auto& family : registry.Collect()) {
    if (family.name == name && !family.metric.empty()) return family.metric.at(0).gauge.value;
  }
  return -1;
}

// Reads what the server sends until it closes, at most 10 s (a hang is a finding).
std::string ReadUntilClosed(int fd) {
  std::string in;
  char buffer[64 << 10];
  int waited_ms = 0;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, 100);
    if (ready == 0) {
      waited_ms += 100;
      PHALANX_FUZZ_CHECK(waited_ms < 10000);  // the server never closed the connection
      continue;
    }
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      in.append(buffer, n);
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    return in;  // closed (or reset)
  }
}

// The server's side of the conversation: its magic, then whole frames that parse.
void CheckServerBytes(std::string_view out) {
  if (out.empty()) return;  // closed before it answered anything (e.g. no magic arrived)
  PHALANX_FUZZ_CHECK(out.substr(0, phalanx::coord::kWireMagicView.size()) ==
                     phalanx::coord::kWireMagicView.substr(0, std::min(out.size(), size_t{4})));
  out.remove_prefix(std::min(out.size(), phalanx::coord::kWireMagicView.size()));
  while (!out.empty()) {
    phalanx::coord::Frame frame;
    const phalanx::coord::FrameCut cut = phalanx::coord::CutFrame(out, 64 << 20, &frame);
    // A frame may be cut short only where the server dropped a peer that stopped reading.
    if (cut != phalanx::coord::FrameCut::kFrame) return;
    pb::WireServerFrame message;
    PHALANX_FUZZ_CHECK(message.ParseFromArray(frame.payload.data(), frame.payload.size()));
    out.remove_prefix(frame.consumed);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  prometheus::Registry registry;
  phalanx::coord::CoordinatorMetrics metrics(registry);
  CoordinationService::Options options;
  options.job = "fuzz";
  options.num_tasks = 1 + data[0] % 8;
  auto service = CoordinationService::Create(options, phalanx::base::RealClock::Get(), metrics);
  PHALANX_FUZZ_CHECK(service.ok());
  phalanx::coord::RpcHandler handler(**service);
  WireSessionServer server(WireSessionServer::Options{kToken}, handler, metrics,
                           phalanx::base::RealClock::Get(), [](const std::string&) {});
  PHALANX_FUZZ_CHECK(server.Start().ok());

  int pair[2];
  PHALANX_FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK);
  server.Adopt(pair[0], "fuzz-peer");
  const int peer = pair[1];

  size_t at = 1;
  while (at < size) {
    size_t length = data[at++];
    if (length == 0 || at + length > size) length = size - at;  // the last piece: the rest
    const char* bytes = reinterpret_cast<const char*>(data + at);
    size_t sent = 0;
    while (sent < length) {
      const ssize_t n = send(peer, bytes + sent, length - sent, MSG_NOSIGNAL);
      if (n <= 0) break;  // the server ended the connection: the rest is not read
      sent += static_cast<size_t>(n);
    }
    if (sent < length) break;
    at += length;
  }
  shutdown(peer, SHUT_WR);
  CheckServerBytes(ReadUntilClosed(peer));
  close(peer);

  server.Stop();
  PHALANX_FUZZ_CHECK(Gauge(registry, "phalanx_coordinator_wire_streams") == 0);
  (*service)->Stop();
  return 0;
}
