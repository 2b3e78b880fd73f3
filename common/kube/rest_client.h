// RestClient: kube::Client over the Kubernetes REST API (cpprestsdk). TLS verification against
// the configured CA (or system roots), bearer token (inline, or a file re-read whenever it changes
// — bound service-account tokens rotate), client certificates, a client-side QPS/burst limit, a
// user agent, per-request timeouts, and watch streams read on their own thread so Next() can wait
// with a bound. Works the same against a real API server and the local cluster. Thread-safe.
//
// Time: the QPS/burst limit reads and waits on the injected Clock (a throttled request waits in
// Clock::SleepFor, so under FakeClock it goes out when the test advances the clock), as does a
// throttled request's Retry-After wait (see max_throttled_retries). Request and
// watch timeouts stay real time: they bound socket I/O inside cpprestsdk, which no clock drives.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/kube/client.h"
#include "common/kube/cluster_config.h"
#include "common/kube/token_bucket.h"

namespace phalanx::kube {

struct RestClientOptions {
  double qps = 50;  // <= 0: unlimited
  int burst = 100;
  std::string user_agent = "phalanx/0.1";
  absl::Duration request_timeout = absl::Seconds(30);
  // A request the API server did not act on (429, or a 5xx with Retry-After: its max-in-flight
  // and priority-and-fairness limits) is sent again after the Retry-After it names, at most this
  // long, up to max_throttled_retries times, as client-go does; then the error is returned.
  int max_throttled_retries = 10;
  absl::Duration max_retry_after = absl::Seconds(10);
  // Watches may not ask the server for longer than this; the client read timeout is this plus
  // a margin, so a server that goes silent is noticed.
  absl::Duration max_watch_timeout = absl::Minutes(10);
  // Called after every response (verb like "GET"/"LIST"/"WATCH", HTTP code or 0 for a transport
  // error), e.g. for an api-requests metric. Must be cheap and thread-safe.
  std::function<void(const std::string& verb, int code)> on_response;
  // Sent as ?fieldValidation= on every create, update and patch: "Strict" makes the API server
  // refuse an object with unknown or duplicate fields (400, "strict decoding error: unknown
  // field ...") instead of dropping them; "Warn" (the server's own default from 1.25 on, and
  // what "" leaves it at) accepts the object and names the fields in a Warning header. Phalanx
  // only writes objects it built, so an unknown field is a bug to hear about, not to lose.
  std::string field_validation = "Strict";
  // Called with the text of each `Warning` response header (deprecations, PodSecurity "warn"
  // mode, unknown fields under "Warn"), after it is logged. Must be cheap and thread-safe.
  std::function<void(const std::string& verb, const std::string& path, const std::string& warning)>
      on_warning;
};

// The warning texts in a `Warning` header value (RFC 7234 5.5: `299 - "text"`, several joined
// by ", " when the header repeats); a value that does not parse is returned whole.
std::vector<std::string> ParseWarningHeader(const std::string& value);

class RestClient final : public Client {
 public:
  // InvalidArgument for an unusable config (no server, bad PEM).
  static absl::StatusOr<std::unique_ptr<RestClient>> Create(
      const ClusterConfig& config, RestClientOptions options = {},
      base::Clock& clock = base::RealClock::Get());
  ~RestClient() override;

  absl::StatusOr<Json> Get(const Resource& r, const std::string& ns,
                           const std::string& name) override;
  absl::StatusOr<ObjectList> List(const Resource& r, const std::string& ns,
                                  const ListOptions& options) override;
  absl::StatusOr<Json> Create(const Resource& r, const std::string& ns,
                              const Json& object) override;
  absl::StatusOr<Json> Update(const Resource& r, const std::string& ns,
                              const Json& object) override;
  absl::StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns,
                                    const Json& object) override;
  absl::StatusOr<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                             PatchType type, const Json& patch,
                             const PatchOptions& options) override;
  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& options) override;
  absl::StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                                     const WatchOptions& options) override;

  // A raw request (path with query, already encoded) for calls outside the typed surface:
  // discovery, the local cluster's admin endpoint. Returns the body of a 2xx response.
  absl::StatusOr<std::string> Raw(const std::string& method, const std::string& path_and_query,
                                  const std::string& body = "",
                                  const std::string& content_type = "application/json");

  // The path of a resource collection or object: /api/v1/namespaces/ns/pods/name.
  static std::string PathOf(const Resource& r, const std::string& ns, const std::string& name = "");

 private:
  struct Impl;
  explicit RestClient(std::unique_ptr<Impl> impl);
  absl::StatusOr<Json> JsonCall(const std::string& verb, const std::string& method,
                                const std::string& path, const Json* body,
                                const std::string& content_type = "application/json");

  std::unique_ptr<Impl> impl_;
};

}  // namespace phalanx::kube
