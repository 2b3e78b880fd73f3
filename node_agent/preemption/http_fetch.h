// HttpFetch: a small blocking HTTP/1.1 client for the node agent's metadata-server notice sources
// (GceMetadataSource, AwsSpotSource). Metadata servers speak plain HTTP on a link-local address,
// and a notice source must answer within its request timeout, so this client does exactly one
// request per connection ("Connection: close") under one absolute deadline that covers name
// resolution, connect, send and receive — a server that trickles bytes cannot stretch it.
// No TLS, no redirects, no keep-alive, no proxies. Bodies are capped at kMaxResponseBytes.
//
// The deadline is real (monotonic) time, not the injected base::Clock: it bounds socket I/O,
// which a FakeClock cannot make time out. Host names (not address literals) are looked up on a
// short-lived detached thread so the deadline bounds the lookup too; a lookup that outlives it
// finishes there and is dropped. Everything here is stateless and thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace phalanx::agent {

inline constexpr size_t kMaxResponseBytes = 1 << 20;

// Where requests go: "http://host[:port][/prefix]". host is a name, an IPv4 address or a
// bracketed IPv6 address.
struct HttpEndpoint {
  std::string host;
  int port = 80;
  std::string path_prefix;  // "" or "/prefix" without a trailing slash

  // InvalidArgument (with what is wrong) for anything but a well-formed http:// URL.
  static absl::StatusOr<HttpEndpoint> Parse(absl::string_view base_url);
  std::string ToString() const;
};

// An absolute point in monotonic time by which an operation must finish.
class IoDeadline {
 public:
  static IoDeadline After(absl::Duration timeout);
  absl::Duration Remaining() const;  // zero once passed
  bool Expired() const { return Remaining() <= absl::ZeroDuration(); }

 private:
  explicit IoDeadline(std::chrono::steady_clock::time_point at) : at_(at) {}
  std::chrono::steady_clock::time_point at_;
};

struct HttpRequest {
  std::string method = "GET";
  std::string path;  // appended to the endpoint's path_prefix: "/computeMetadata/v1/..."
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct HttpResponse {
  int status_code = 0;
  std::string body;
};

// Sends `request` to `endpoint` and reads the whole response. Any status code is a response, not
// an error (see ErrorForHttpStatus). Errors:
//   DeadlineExceeded  `deadline` passed (resolving, connecting, sending or receiving)
//   Unavailable       the name does not resolve, connection refused or reset, the connection
//                     closed before a complete response, a response that is not HTTP, or one
//                     over kMaxResponseBytes
//   InvalidArgument   a request that cannot be sent (CR/LF in a header)
absl::StatusOr<HttpResponse> HttpFetch(const HttpEndpoint& endpoint, const HttpRequest& request,
                                       const IoDeadline& deadline);

// The error for an HTTP status a caller did not expect, naming `what` and a bounded excerpt of
// the body: 401/403 PermissionDenied, 404 NotFound, 408/429/5xx Unavailable, other 4xx
// FailedPrecondition, anything else Internal.
absl::Status ErrorForHttpStatus(const HttpResponse& response, absl::string_view what);

// At most `max` bytes of `text` with control characters escaped, for error messages that quote
// a server's answer.
std::string Excerpt(absl::string_view text, size_t max = 80);

}  // namespace phalanx::agent
