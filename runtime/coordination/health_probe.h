// CheckGrpcHealth: one grpc.health.v1.Health/Check call with an empty service name (the
// whole server, as a kubelet gRPC probe asks) over a fresh channel, bounded by `timeout`.
// The coordinator's HTTP /healthz calls it against its own listening port, so "healthy" means
// a loopback RPC through the real server answers (a server that no longer accepts is not
// healthy, whatever its threads are doing). Thread-safe: no shared state.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace phalanx::coord {

// OK when the server answers SERVING. Unavailable when it answers another status or the call
// fails (connection refused or closed, deadline: the message says which); the call's own
// deadline is `timeout`. With `tls_server_name` the call goes over TLS asking for that name,
// without verifying the certificate (the caller is the server's own process).
absl::Status CheckGrpcHealth(const std::string& target, absl::Duration timeout,
                             const std::optional<std::string>& tls_server_name = std::nullopt);

// The loopback target for a listen address: its host, or 127.0.0.1 / [::1] for a wildcard.
std::string LoopbackTarget(const std::string& listen_address, int port);

}  // namespace phalanx::coord
