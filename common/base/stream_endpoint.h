// A local stream endpoint, written the way flags and environment variables give it: a Unix
// socket ("/run/x.sock" or "unix:/run/x.sock") or TCP ("10.0.0.7:8479", "[::1]:8479",
// "0.0.0.0:8479"). The node agent's clique channel uses both (docs/adr/0004): a Unix socket
// where a pod may mount it, TCP on the node's address where Pod Security forbids host paths.
// Thread-safety: pure functions; the descriptors returned are the caller's.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace phalanx::base {

struct StreamEndpoint {
  enum class Kind { kUnix, kTcp };
  Kind kind = Kind::kUnix;
  std::string path;  // kUnix
  std::string host;  // kTcp: a numeric IPv4 or IPv6 address (no name lookups)
  int port = 0;      // kTcp: 1..65535 (0 only to listen on any free port)
  std::string ToString() const;
};

// InvalidArgument saying what is wrong (empty, a path too long for sun_path, a bad port, a host
// that is not a numeric address).
absl::StatusOr<StreamEndpoint> ParseStreamEndpoint(const std::string& text);

// A connected blocking socket whose reads and writes time out after `io_timeout`, or
// Unavailable naming the endpoint and why. The connect itself is bounded by `io_timeout` too.
absl::StatusOr<int> ConnectStream(const StreamEndpoint& endpoint, absl::Duration io_timeout);

// A non-blocking listening socket (SO_REUSEADDR for TCP; a stale Unix socket file is replaced
// and the new one made 0660). FailedPrecondition when it cannot bind.
absl::StatusOr<int> ListenStream(const StreamEndpoint& endpoint);

// The TCP port `fd` listens on (for port 0), or 0.
int LocalPort(int fd);

}  // namespace phalanx::base
