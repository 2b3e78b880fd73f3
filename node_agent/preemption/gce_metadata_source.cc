#include "node_agent/preemption/gce_metadata_source.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"

namespace phalanx::agent {
namespace {

constexpr char kPreemptedPath[] = "/computeMetadata/v1/instance/preempted";
constexpr char kMaintenancePath[] = "/computeMetadata/v1/instance/maintenance-event";

// Maintenance events are upper-case identifiers; anything else is not a metadata server answer.
bool IsEventName(absl::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!absl::ascii_isupper(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// GCE documents three values: NONE, MIGRATE_ON_HOST_MAINTENANCE (the VM is live-migrated and
// keeps running: nothing to checkpoint for) and TERMINATE_ON_HOST_MAINTENANCE (it is stopped:
// GPU VMs, which cannot migrate, get this one). FALSE is not documented there but has been seen
// (the preempted endpoint's "nothing"); it stops nothing either. Any other event name is taken
// as one that may stop the VM: a checkpoint too many costs little, a missed one the work since
// the last. The notice goes away again when the event does (the agent then lifts its taint).
bool EventStopsTheVm(absl::string_view event) {
  return event != "NONE" && event != "FALSE" && event != "MIGRATE_ON_HOST_MAINTENANCE";
}

}  // namespace

absl::StatusOr<std::unique_ptr<GceMetadataSource>> GceMetadataSource::Create(
    GceMetadataOptions options) {
  ASSIGN_OR_RETURN(HttpEndpoint endpoint, HttpEndpoint::Parse(options.base_url));
  if (options.request_timeout <= absl::ZeroDuration() ||
      options.preemption_grace <= absl::ZeroDuration() ||
      options.maintenance_grace <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "GCE metadata source: request timeout and grace periods must be positive");
  }
  return std::unique_ptr<GceMetadataSource>(
      new GceMetadataSource(std::move(endpoint), std::move(options)));
}

absl::StatusOr<std::string> GceMetadataSource::Get(const std::string& path,
                                                   const IoDeadline& deadline) {
  HttpRequest request;
  request.path = path;
  request.headers = {{"Metadata-Flavor", "Google"}};
  ASSIGN_OR_RETURN(HttpResponse response, HttpFetch(endpoint_, request, deadline));
  if (response.status_code != 200) {
    return ErrorForHttpStatus(response, absl::StrCat("GCE metadata GET ", path));
  }
  return std::string(absl::StripAsciiWhitespace(response.body));
}

absl::StatusOr<std::optional<NodeNotice>> GceMetadataSource::Poll(absl::Time now) {
  const IoDeadline deadline = IoDeadline::After(options_.request_timeout);
  ASSIGN_OR_RETURN(const std::string preempted, Get(kPreemptedPath, deadline));
  if (preempted == "TRUE") {
    const absl::Time since = preempted_.Observe(preempted, now);
    return NodeNotice{name(), kPreemptionNotice, "instance/preempted=TRUE",
                      since + options_.preemption_grace};
  }
  if (preempted != "FALSE") {
    return absl::InternalError(absl::StrCat(
        "GCE metadata instance/preempted: want TRUE or FALSE, got ", Excerpt(preempted)));
  }
  preempted_.Reset();

  ASSIGN_OR_RETURN(const std::string event, Get(kMaintenancePath, deadline));
  if (!EventStopsTheVm(event)) {
    maintenance_.Reset();
    return std::nullopt;
  }
  if (!IsEventName(event)) {
    return absl::InternalError(
        absl::StrCat("GCE metadata instance/maintenance-event: want NONE or an event name, got ",
                     Excerpt(event)));
  }
  const absl::Time since = maintenance_.Observe(event, now);
  return NodeNotice{name(), kMaintenanceNotice, absl::StrCat("instance/maintenance-event=", event),
                    since + options_.maintenance_grace};
}

}  // namespace phalanx::agent
