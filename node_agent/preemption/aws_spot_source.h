// AwsSpotSource: spot interruption and scheduled-maintenance notices from the EC2 instance
// metadata service (IMDSv2), for node agents on EC2/EKS instances. Each Poll:
//   PUT {base_url}/latest/api/token  "X-aws-ec2-metadata-token-ttl-seconds: <ttl>"  -> token
//       (only when the cached token is missing or near its expiry)
//   GET {base_url}/latest/meta-data/spot/instance-action  "X-aws-ec2-metadata-token: <token>"
//       404: no interruption; 200: {"action": "terminate"|"stop"|"hibernate",
//                                   "time": "2026-11-22T23:59:00Z"}  (about 2 min ahead)
//   GET {base_url}/latest/meta-data/events/maintenance/scheduled   (when enabled)
//       a JSON array of events {"Code", "State", "NotBefore": "21 Jan 2019 09:00:43 GMT", ...}
// IMDSv2's PUT answer is dropped by the network when the instance's hop limit is 1 and the
// caller runs in a pod network namespace: run the agent with hostNetwork (its DaemonSet does).
// Used by the node agent binary, which polls it every tick. Thread-safety: NoticeSource's (Poll
// from one thread at a time).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "node_agent/preemption/http_fetch.h"
#include "node_agent/preemption/notice_source.h"

namespace phalanx::agent {

struct AwsSpotOptions {
  std::string base_url = "http://169.254.169.254";
  // Bounds one whole Poll (token and notice requests together).
  absl::Duration request_timeout = absl::Seconds(2);
  // The IMDSv2 session token's lifetime (whole seconds, at most 6 h); it is renewed a minute
  // before it expires.
  absl::Duration token_ttl = absl::Hours(6);
  // Also report scheduled maintenance events (reboots, retirement) as "maintenance" notices.
  bool check_scheduled_maintenance = true;
};

class AwsSpotSource final : public NoticeSource {
 public:
  // InvalidArgument for a base_url that is not http://host[:port][/prefix], a non-positive
  // timeout or a token TTL outside [2 min, 6 h].
  static absl::StatusOr<std::unique_ptr<AwsSpotSource>> Create(AwsSpotOptions options);

  std::string name() const override { return "aws-spot"; }

  // A "preemption" notice while a spot instance-action is pending (deadline: its time; detail:
  // its action); otherwise, when enabled, a "maintenance" notice for the first scheduled event
  // that is not canceled or completed (deadline: its NotBefore, InfiniteFuture when that does not
  // parse); otherwise nullopt. Errors as NoticeSource::Poll, plus Internal for a 200 answer that
  // is not the JSON above and Unavailable when IMDS rejects the token (401; a new one is fetched
  // next Poll).
  absl::StatusOr<std::optional<NodeNotice>> Poll(absl::Time now) override;

 private:
  AwsSpotSource(HttpEndpoint endpoint, AwsSpotOptions options)
      : endpoint_(std::move(endpoint)), options_(std::move(options)) {}

  absl::Status RefreshTokenIfNeeded(absl::Time now, const IoDeadline& deadline);
  absl::StatusOr<HttpResponse> Get(const std::string& path, const IoDeadline& deadline);
  absl::StatusOr<std::optional<NodeNotice>> SpotNotice(const IoDeadline& deadline);
  absl::StatusOr<std::optional<NodeNotice>> MaintenanceNotice(const IoDeadline& deadline);

  const HttpEndpoint endpoint_;
  const AwsSpotOptions options_;
  std::string token_;
  absl::Time token_expiry_ = absl::InfinitePast();
};

}  // namespace phalanx::agent
