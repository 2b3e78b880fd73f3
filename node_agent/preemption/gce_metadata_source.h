// GceMetadataSource: preemption and host-maintenance notices from the Google Compute Engine
// metadata server, for node agents on GCE/GKE VMs (spot and preemptible VMs, and GPU VMs, which
// cannot live-migrate and are stopped for host maintenance). Each Poll reads
//   GET {base_url}/computeMetadata/v1/instance/preempted          "TRUE" | "FALSE"
//   GET {base_url}/computeMetadata/v1/instance/maintenance-event  "NONE" |
//       "MIGRATE_ON_HOST_MAINTENANCE" | "TERMINATE_ON_HOST_MAINTENANCE" | ...
// with "Metadata-Flavor: Google". GCE stops a preempted VM about 30 s after preempted turns TRUE,
// so the notice's deadline is (first time TRUE was seen) + preemption_grace; a maintenance event
// is announced about 60 s ahead: (first time seen) + maintenance_grace.
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

struct GceMetadataOptions {
  std::string base_url = "http://metadata.google.internal";
  // Bounds one whole Poll (both requests).
  absl::Duration request_timeout = absl::Seconds(2);
  absl::Duration preemption_grace = absl::Seconds(30);
  absl::Duration maintenance_grace = absl::Seconds(60);
};

class GceMetadataSource final : public NoticeSource {
 public:
  // InvalidArgument for a base_url that is not http://host[:port][/prefix] or a non-positive
  // duration.
  static absl::StatusOr<std::unique_ptr<GceMetadataSource>> Create(GceMetadataOptions options);

  std::string name() const override { return "gce-metadata"; }

  // A "preemption" notice while preempted is TRUE; otherwise a "maintenance" notice while
  // maintenance-event names an event that may stop the VM (TERMINATE_ON_HOST_MAINTENANCE or an
  // unknown name; detail names it); nullopt for NONE, FALSE and MIGRATE_ON_HOST_MAINTENANCE
  // (live migration: the VM keeps running). Errors as
  // NoticeSource::Poll; Internal for a body that is not one of the values above.
  absl::StatusOr<std::optional<NodeNotice>> Poll(absl::Time now) override;

 private:
  GceMetadataSource(HttpEndpoint endpoint, GceMetadataOptions options)
      : endpoint_(std::move(endpoint)), options_(std::move(options)) {}

  // The trimmed body of a 200 answer to GET `path`.
  absl::StatusOr<std::string> Get(const std::string& path, const IoDeadline& deadline);

  const HttpEndpoint endpoint_;
  const GceMetadataOptions options_;
  FirstSeen preempted_;
  FirstSeen maintenance_;
};

}  // namespace phalanx::agent
