#include "common/kube/api_status.h"

#include <cpprest/json.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace phalanx::kube {
namespace {

struct StatusBody {
  std::string reason;
  std::string message;
};

// Reads `reason` and `message` from a metav1.Status body; empty fields when it is not one.
StatusBody ParseStatusBody(std::string_view body) {
  StatusBody out;
  // cpprestsdk's JSON parser throws on malformed input; nothing may escape this file.
  try {
    const web::json::value json = web::json::value::parse(std::string(body));
    if (!json.is_object()) return out;
    const web::json::object& object = json.as_object();
    auto kind = object.find("kind");
    if (kind == object.end() || !kind->second.is_string() || kind->second.as_string() != "Status") {
      return out;
    }
    if (auto it = object.find("reason"); it != object.end() && it->second.is_string()) {
      out.reason = it->second.as_string();
    }
    if (auto it = object.find("message"); it != object.end() && it->second.is_string()) {
      out.message = it->second.as_string();
    }
  } catch (const std::exception&) {
  }
  return out;
}

absl::StatusCode CodeFor(int http_status, const std::string& reason) {
  if (http_status >= 200 && http_status < 300) return absl::StatusCode::kOk;
  switch (http_status) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 409:
      return reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists
                                       : absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kUnavailable;
    default:
      if (http_status >= 500 && http_status < 600) return absl::StatusCode::kUnavailable;
      return absl::StatusCode::kUnknown;
  }
}

}  // namespace

absl::Status StatusFromResponse(int http_status, std::string_view body, std::string_view what) {
  const StatusBody status = ParseStatusBody(body);
  const absl::StatusCode code = CodeFor(http_status, status.reason);
  if (code == absl::StatusCode::kOk) return absl::OkStatus();
  std::string detail = status.message;
  if (detail.empty()) {
    constexpr size_t kQuote = 200;
    detail = std::string(body.substr(0, kQuote));
    if (body.size() > kQuote) detail += "…";
  }
  return absl::Status(code, absl::StrCat(std::string(what), ": HTTP ", http_status,
                                         status.reason.empty() ? "" : " ", status.reason,
                                         detail.empty() ? "" : ": ", detail));
}

bool IsRetryable(const absl::Status& status) { return absl::IsUnavailable(status); }

}  // namespace phalanx::kube
