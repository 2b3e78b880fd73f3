// ApiServer::Watch: one watch stream. Events come from the store's history, filtered by the
// request's selectors, one JSON object per line (chunked). A resourceVersion older than the
// history is answered the way kube-apiserver does it: HTTP 200, then an ERROR event carrying a
// 410 Expired Status, so clients exercise their in-stream relist path.
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kube/object_filter.h"
#include "common/kube/object_meta.h"
#include "tests/localcluster/api_server.h"
#include "tests/localcluster/table_printer.h"

namespace phalanx::localcluster {
namespace {

constexpr int64_t kDefaultTimeoutSeconds = 1800;
constexpr int64_t kMaxTimeoutSeconds = 3600;

Json ExpiredStatus(uint64_t since, uint64_t oldest) {
  Json status = Json::object();
  status["kind"] = Json::string("Status");
  status["apiVersion"] = Json::string("v1");
  status["metadata"] = Json::object();
  status["status"] = Json::string("Failure");
  status["message"] =
      Json::string(absl::StrCat("too old resource version: ", since, " (", oldest, ")"));
  status["reason"] = Json::string("Expired");
  status["code"] = Json::number(410);
  return status;
}

}  // namespace

void ApiServer::Watch(const HttpRequest& request, HttpResponse& response, const Target& target) {
  absl::StatusOr<kube::ObjectFilter> filter =
      kube::ObjectFilter::Parse(request.Param("labelSelector"), request.Param("fieldSelector"));
  if (!filter.ok()) return RespondError(response, filter.status());
  int64_t timeout_seconds = kDefaultTimeoutSeconds;
  if (!request.Param("timeoutSeconds").empty() &&
      (!absl::SimpleAtoi(request.Param("timeoutSeconds"), &timeout_seconds) ||
       timeout_seconds < 0)) {
    return RespondError(response, absl::InvalidArgumentError("timeoutSeconds must be a number"));
  }
  timeout_seconds = std::min(timeout_seconds, kMaxTimeoutSeconds);
  const std::string& rv_param = request.Param("resourceVersion");
  uint64_t since = 0;
  const bool initial_state = rv_param.empty() || rv_param == "0";
  if (!initial_state && !absl::SimpleAtoi(rv_param, &since)) {
    return RespondError(response, absl::InvalidArgumentError("resourceVersion must be a number"));
  }
  const bool as_table = absl::StrContains(request.Header("accept"), "as=Table");
  const bool bookmarks = request.Param("allowWatchBookmarks") == "true";
  const ResourceType& type = target.type;
  const std::string key = type.StoreKey();
  const uint64_t epoch = faults_.watch_epoch();
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_seconds);

  auto render = [&](Json object) {
    object["apiVersion"] = Json::string(type.ApiVersion());
    if (!as_table) return object;
    return BuildTable(type.plural, type.columns, {object},
                      kube::MetaString(object, "resourceVersion"), clock_.Now());
  };
  auto send = [&](const std::string& event_type, Json object) {
    Json event = Json::object();
    event["type"] = Json::string(event_type);
    event["object"] = std::move(object);
    return response.WriteChunk(event.serialize() + "\n");
  };

  if (!response.StartStream(200, "application/json")) return;
  if (initial_state) {
    // "Start at most recent" with the current state first, as kube-apiserver does.
    absl::StatusOr<ListResult> list = store_.List(key, target.ns, *filter, 0, "");
    if (!list.ok()) return;
    since = list->resource_version;
    for (Json& item : list->items) {
      if (!send("ADDED", render(std::move(item)))) return;
    }
  }
  if (const uint64_t window = WatchWindowStart(key); !initial_state && since < window) {
    send("ERROR", ExpiredStatus(since, window));
    return;
  }
  absl::Time last_write = absl::Now();
  while (!response.Stopping() && faults_.watch_epoch() == epoch && absl::Now() < deadline) {
    const uint64_t seen = store_.resource_version();
    absl::StatusOr<std::vector<WatchEvent>> events = store_.EventsSince(key, target.ns, since);
    if (!events.ok()) {
      send("ERROR", ExpiredStatus(since, store_.resource_version()));
      return;
    }
    for (WatchEvent& e : *events) {
      since = e.resource_version;
      if (!filter->Matches(e.object)) continue;
      if (!send(e.type, render(std::move(e.object)))) return;
      last_write = absl::Now();
    }
    since = std::max(since, seen);
    if (bookmarks && absl::Now() - last_write >= options_.bookmark_interval) {
      Json bookmark = Json::object();
      bookmark["kind"] = Json::string(type.kind);
      bookmark["apiVersion"] = Json::string(type.ApiVersion());
      bookmark["metadata"] = Json::object();
      bookmark["metadata"]["resourceVersion"] = Json::string(absl::StrCat(since));
      if (!send("BOOKMARK", bookmark)) return;
      last_write = absl::Now();
    }
    // Bounded so a stop, a drop or the deadline is noticed promptly.
    store_.WaitForChange(seen, std::min(absl::Milliseconds(250), deadline - absl::Now()));
  }
}

}  // namespace phalanx::localcluster
