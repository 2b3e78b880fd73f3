#include "tests/localcluster/fault_injector.h"

#include <algorithm>
#include <csignal>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/localcluster/store_types.h"

namespace phalanx::localcluster {
namespace {

struct HttpError {
  int code;
  const char* reason;
};

HttpError ToHttp(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound:
      return {404, "NotFound"};
    case absl::StatusCode::kAlreadyExists:
      return {409, "AlreadyExists"};
    case absl::StatusCode::kAborted:
      return {409, "Conflict"};
    case absl::StatusCode::kFailedPrecondition:
      return {409, "Conflict"};
    case absl::StatusCode::kOutOfRange:
      return {410, "Expired"};
    case absl::StatusCode::kInvalidArgument:
      return {400, "BadRequest"};
    case absl::StatusCode::kUnauthenticated:
      return {401, "Unauthorized"};
    case absl::StatusCode::kPermissionDenied:
      return {403, "Forbidden"};
    case absl::StatusCode::kUnimplemented:
      return {405, "MethodNotAllowed"};
    case absl::StatusCode::kResourceExhausted:
      return {429, "TooManyRequests"};
    case absl::StatusCode::kUnavailable:
      return {503, "ServiceUnavailable"};
    default:
      return {500, "InternalError"};
  }
}

}  // namespace

void RespondError(HttpResponse& response, const absl::Status& status) {
  const HttpError http = ToHttp(status.code());
  Json body = Json::object();
  body["kind"] = Json::string("Status");
  body["apiVersion"] = Json::string("v1");
  body["metadata"] = Json::object();
  body["status"] = Json::string("Failure");
  body["message"] = Json::string(std::string(status.message()));
  body["reason"] = Json::string(http.reason);
  body["code"] = Json::number(http.code);
  std::map<std::string, std::string> headers;
  // emplace, not `headers["Retry-After"] = "1"`: assigning a literal to the new entry trips
  // GCC 12's false -Wrestrict (GCC bug 105329).
  if (http.code == 429) headers.emplace("Retry-After", "1");
  response.Respond(http.code, "application/json", body.serialize(), headers);
}

void FaultInjector::InjectErrors(double share, int code) {
  absl::MutexLock lock(&mu_);
  error_share_ = std::clamp(share, 0.0, 1.0);
  error_code_ = code;
  error_credit_ = 0;
}

bool FaultInjector::InjectedError(HttpResponse& response) {
  int code;
  {
    absl::MutexLock lock(&mu_);
    if (error_share_ <= 0) return false;
    // Deterministic share: every request earns `share` credit; a full credit buys one error.
    error_credit_ += error_share_;
    if (error_credit_ < 1.0) return false;
    error_credit_ -= 1.0;
    code = error_code_;
  }
  RespondError(response, code == 429 ? absl::ResourceExhaustedError("injected: too many requests")
                                     : absl::InternalError("injected: internal error"));
  return true;
}

void FaultInjector::HandleAdmin(const HttpRequest& request, HttpResponse& response) {
  std::vector<std::string> p = absl::StrSplit(request.path, '/', absl::SkipEmpty());
  auto done = [&](const absl::Status& s) {
    if (!s.ok()) return RespondError(response, s);
    response.Respond(200, "text/plain", "ok\n");
  };
  if (request.method != "POST") return done(absl::UnimplementedError("admin calls are POSTs"));
  if (p.size() == 3 && p[1] == "watches" && p[2] == "drop") {
    DropWatches();
    return done(absl::OkStatus());
  }
  if (p.size() == 2 && p[1] == "errors") {
    double share = 0;
    int code = 500;
    if (!absl::SimpleAtod(request.Param("share"), &share) || share < 0 || share > 1 ||
        (!request.Param("code").empty() && !absl::SimpleAtoi(request.Param("code"), &code)) ||
        (code != 429 && code != 500)) {
      return done(absl::InvalidArgumentError("want ?share=0..1&code=429|500"));
    }
    InjectErrors(share, code);
    return done(absl::OkStatus());
  }
  if (faults_ == nullptr) return done(absl::UnavailableError("no kubelet runs in this cluster"));
  if (p.size() == 5 && p[1] == "pods") {
    const std::string& ns = p[2];
    const std::string& name = p[3];
    const std::string& verb = p[4];
    if (verb == "kill") {
      int sig = SIGKILL;
      if (!request.Param("signal").empty() && !absl::SimpleAtoi(request.Param("signal"), &sig)) {
        return done(absl::InvalidArgumentError("signal must be a number"));
      }
      return done(faults_->KillPod(ns, name, sig));
    }
    if (verb == "stop") return done(faults_->StopPod(ns, name));
    if (verb == "continue") return done(faults_->ContinuePod(ns, name));
    if (verb == "fail") {
      int code = 1;
      if (!request.Param("exitCode").empty() &&
          !absl::SimpleAtoi(request.Param("exitCode"), &code)) {
        return done(absl::InvalidArgumentError("exitCode must be a number"));
      }
      return done(faults_->FailPod(ns, name, code));
    }
  }
  if (p.size() == 4 && p[1] == "nodes") {
    const std::string& node = p[2];
    if (p[3] == "preempt") {
      int64_t grace = 30;
      if (!request.Param("graceSeconds").empty() &&
          !absl::SimpleAtoi(request.Param("graceSeconds"), &grace)) {
        return done(absl::InvalidArgumentError("graceSeconds must be a number"));
      }
      return done(faults_->PreemptNode(node, absl::Seconds(grace)));
    }
    if (p[3] == "ready") return done(faults_->SetNodeReady(node, true));
    if (p[3] == "notready") return done(faults_->SetNodeReady(node, false));
  }
  done(absl::NotFoundError(absl::StrCat("no admin call ", request.path)));
}

}  // namespace phalanx::localcluster
