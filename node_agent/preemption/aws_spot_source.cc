#include "node_agent/preemption/aws_spot_source.h"

#include <cpprest/json.h>

#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"
#include "common/kube/object_meta.h"

namespace phalanx::agent {
namespace {

using kube::Json;

constexpr char kTokenPath[] = "/latest/api/token";
constexpr char kInstanceActionPath[] = "/latest/meta-data/spot/instance-action";
constexpr char kScheduledEventsPath[] = "/latest/meta-data/events/maintenance/scheduled";
// A token is renewed this long before it expires, so one never expires between PUT and GET.
constexpr absl::Duration kTokenRenewMargin = absl::Minutes(1);

// Parses `body` as JSON; Internal (naming `what`) when it is not. cpprestsdk's parser reports
// through the error code, but JSON code may still throw: nothing escapes this file.
absl::StatusOr<Json> ParseJson(const std::string& body, absl::string_view what) {
  try {
    std::error_code error;
    Json value = Json::parse(body, error);
    if (!error) return value;
    return absl::InternalError(
        absl::StrCat(what, ": not JSON (", error.message(), "): ", Excerpt(body)));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": not JSON (", e.what(), "): ", Excerpt(body)));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<AwsSpotSource>> AwsSpotSource::Create(AwsSpotOptions options) {
  ASSIGN_OR_RETURN(HttpEndpoint endpoint, HttpEndpoint::Parse(options.base_url));
  if (options.request_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("AWS spot source: request timeout must be positive");
  }
  if (options.token_ttl < absl::Minutes(2) || options.token_ttl > absl::Hours(6)) {
    return absl::InvalidArgumentError("AWS spot source: token TTL must be within [2m, 6h]");
  }
  return std::unique_ptr<AwsSpotSource>(new AwsSpotSource(std::move(endpoint), std::move(options)));
}

absl::Status AwsSpotSource::RefreshTokenIfNeeded(absl::Time now, const IoDeadline& deadline) {
  if (!token_.empty() && now < token_expiry_ - kTokenRenewMargin) return absl::OkStatus();
  HttpRequest request;
  request.method = "PUT";
  request.path = kTokenPath;
  request.headers = {{"X-aws-ec2-metadata-token-ttl-seconds",
                      absl::StrCat(absl::ToInt64Seconds(options_.token_ttl))}};
  ASSIGN_OR_RETURN(HttpResponse response, HttpFetch(endpoint_, request, deadline));
  if (response.status_code != 200) {
    return ErrorForHttpStatus(response, "AWS IMDSv2 PUT /latest/api/token");
  }
  const std::string token(absl::StripAsciiWhitespace(response.body));
  if (token.empty() || token.size() > 1024 || token.find_first_of("\r\n ") != std::string::npos) {
    return absl::InternalError(
        absl::StrCat("AWS IMDSv2 PUT /latest/api/token: not a token: ", Excerpt(response.body)));
  }
  token_ = token;
  token_expiry_ = now + options_.token_ttl;
  return absl::OkStatus();
}

absl::StatusOr<HttpResponse> AwsSpotSource::Get(const std::string& path,
                                                const IoDeadline& deadline) {
  HttpRequest request;
  request.path = path;
  request.headers = {{"X-aws-ec2-metadata-token", token_}};
  ASSIGN_OR_RETURN(HttpResponse response, HttpFetch(endpoint_, request, deadline));
  if (response.status_code == 401) {
    token_.clear();  // expired or revoked: fetch a new one next Poll
    return absl::UnavailableError(
        absl::StrCat("AWS IMDS rejected the session token on GET ", path, "; renewing it"));
  }
  return response;
}

absl::StatusOr<std::optional<NodeNotice>> AwsSpotSource::SpotNotice(const IoDeadline& deadline) {
  const std::string what = absl::StrCat("AWS IMDS GET ", kInstanceActionPath);
  ASSIGN_OR_RETURN(HttpResponse response, Get(kInstanceActionPath, deadline));
  if (response.status_code == 404) return std::nullopt;
  if (response.status_code != 200) return ErrorForHttpStatus(response, what);
  ASSIGN_OR_RETURN(const Json json, ParseJson(response.body, what));
  const std::string action = kube::StringAt(json, "action");
  const std::string time_text = kube::StringAt(json, "time");
  absl::Time time;
  std::string error;
  if (action.empty() || !absl::ParseTime(absl::RFC3339_full, time_text, &time, &error)) {
    return absl::InternalError(absl::StrCat(
        what, ": want {\"action\": ..., \"time\": RFC 3339}, got ", Excerpt(response.body)));
  }
  return NodeNotice{name(), kPreemptionNotice, absl::StrCat("spot instance-action ", action), time};
}

absl::StatusOr<std::optional<NodeNotice>> AwsSpotSource::MaintenanceNotice(
    const IoDeadline& deadline) {
  const std::string what = absl::StrCat("AWS IMDS GET ", kScheduledEventsPath);
  ASSIGN_OR_RETURN(HttpResponse response, Get(kScheduledEventsPath, deadline));
  if (response.status_code == 404) return std::nullopt;
  if (response.status_code != 200) return ErrorForHttpStatus(response, what);
  if (absl::StripAsciiWhitespace(response.body).empty()) return std::nullopt;
  ASSIGN_OR_RETURN(const Json json, ParseJson(response.body, what));
  if (!json.is_array()) {
    return absl::InternalError(
        absl::StrCat(what, ": want a JSON array of events, got ", Excerpt(response.body)));
  }
  for (const Json& event : json.as_array()) {
    const std::string state = absl::AsciiStrToLower(kube::StringAt(event, "State"));
    if (state == "canceled" || state == "cancelled" || state == "completed") continue;
    std::string code = kube::StringAt(event, "Code");
    if (code.empty()) code = "unknown";
    const std::string not_before = kube::StringAt(event, "NotBefore");
    absl::Time deadline_at;
    std::string error;
    if (!absl::ParseTime("%d %b %Y %H:%M:%S GMT", not_before, &deadline_at, &error)) {
      deadline_at = absl::InfiniteFuture();
    }
    return NodeNotice{
        name(), kMaintenanceNotice,
        absl::StrCat("scheduled event ", code,
                     not_before.empty() ? "" : absl::StrCat(" not before ", not_before)),
        deadline_at};
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<NodeNotice>> AwsSpotSource::Poll(absl::Time now) {
  const IoDeadline deadline = IoDeadline::After(options_.request_timeout);
  RETURN_IF_ERROR(RefreshTokenIfNeeded(now, deadline));
  ASSIGN_OR_RETURN(std::optional<NodeNotice> spot, SpotNotice(deadline));
  if (spot.has_value() || !options_.check_scheduled_maintenance) return spot;
  return MaintenanceNotice(deadline);
}

}  // namespace phalanx::agent
