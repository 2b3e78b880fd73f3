// TCP by address text, the way flags, environment variables and the operator give it: "host:port"
// or "[v6]:port", where the host may be a name (resolved) or a numeric address (no resolver).
// The one place that splits, resolves, dials and listens for the coordinator's port and its
// clients (runtime/coordination/connection_listener.cc, runtime/client/wire_connection.cc);
// the node agent's stream endpoints (stream_endpoint.h) split with it too.
// Thread-safety: pure functions; the descriptors returned are the caller's.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace phalanx::base {

// ("host", "port") of "host:port" or "[v6]:port" (brackets dropped; the host may be empty for
// "any address"); InvalidArgument "<what> '<address>' must be host:port" otherwise.
absl::StatusOr<std::pair<std::string, std::string>> SplitHostPort(const std::string& address,
                                                                  std::string_view what);

// A non-blocking listening socket on `address` (every address for an empty host), with
// SO_REUSEADDR; `*port` is the port it got (for port 0). InvalidArgument for an address that
// does not parse or resolve, Unavailable ("cannot listen on <address>: ...") when it cannot
// bind.
absl::StatusOr<int> ListenTcp(const std::string& address, int* port);

// A connected socket to `address` (each resolved address tried in turn; a numeric one needs no
// resolver), the connect bounded by `deadline`. Left non-blocking. InvalidArgument for an
// address that does not parse; Unavailable ("cannot resolve ..." / "cannot connect to
// <what> at <address>: ...") otherwise.
absl::StatusOr<int> DialTcp(const std::string& address, absl::Time deadline, std::string_view what);

}  // namespace phalanx::base
