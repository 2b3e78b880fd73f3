#include "tests/localcluster/api_server.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/log.h"
#include "tests/localcluster/openapi_docs.h"

namespace phalanx::localcluster {
namespace {

Json VersionInfo() {
  Json v = Json::object();
  v["major"] = Json::string("1");
  v["minor"] = Json::string("32");
  v["gitVersion"] = Json::string("v1.32.0-phalanx-localcluster");
  v["gitCommit"] = Json::string("");
  v["gitTreeState"] = Json::string("clean");
  v["buildDate"] = Json::string("2026-01-01T00:00:00Z");
  v["goVersion"] = Json::string("none (C++)");
  v["compiler"] = Json::string("c++");
  v["platform"] = Json::string("linux/amd64");
  return v;
}

}  // namespace

void RespondJson(HttpResponse& response, int code, const Json& body) {
  response.Respond(code, "application/json", body.serialize());
}

void RespondJson(HttpResponse& response, int code, const Json& body,
                 const std::vector<std::string>& warnings) {
  if (warnings.empty()) return RespondJson(response, code, body);
  std::string header;
  for (const std::string& w : warnings) {
    PHX_LOG(WARNING) << "answered with a warning: " << w;
    if (!header.empty()) header += ", ";
    std::string quoted;
    for (char c : w) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    absl::StrAppend(&header, "299 - \"", quoted, "\"");
  }
  response.Respond(code, "application/json", body.serialize(), {{"Warning", header}});
}

ApiServer::ApiServer(ObjectStore& store, ResourceRegistry& registry, base::Clock& clock,
                     Options options)
    : store_(store),
      registry_(registry),
      clock_(clock),
      options_(std::move(options)),
      start_version_(store.resource_version()) {}

uint64_t ApiServer::WatchWindowStart(const std::string& store_key) {
  absl::MutexLock lock(&window_mu_);
  auto it = window_start_.find(store_key);
  return it == window_start_.end() ? start_version_ : it->second;
}

void ApiServer::Handle(const HttpRequest& request, HttpResponse& response) {
  requests_.fetch_add(1);
  if (request.path == "/healthz" || request.path == "/livez" || request.path == "/readyz") {
    response.Respond(200, "text/plain", "ok");
    return;
  }
  if (request.Header("authorization") != "Bearer " + options_.token) {
    RespondError(response, absl::UnauthenticatedError("Unauthorized"));
    return;
  }
  try {
    Dispatch(request, response);
  } catch (const std::exception& e) {
    // cpprestsdk's JSON accessors throw on type mismatches; a request that trips one is bad input.
    RespondError(response,
                 absl::InvalidArgumentError(absl::StrCat("malformed object: ", e.what())));
  }
}

void ApiServer::Dispatch(const HttpRequest& request, HttpResponse& response) {
  const std::string& path = request.path;
  if (path == "/version") return RespondJson(response, 200, VersionInfo());
  if (absl::StartsWith(path, "/admin/")) return faults_.HandleAdmin(request, response);
  if (path == "/openapi/v3") return RespondJson(response, 200, OpenApiV3Root(registry_));
  if (absl::StartsWith(path, "/openapi/v3/")) {
    if (std::optional<Json> doc = OpenApiV3GroupVersion(registry_, path.substr(12))) {
      return RespondJson(response, 200, *doc);
    }
  }
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  if (parts.empty()) {
    RespondError(response, absl::NotFoundError("the server could not find the requested resource"));
    return;
  }
  // Discovery.
  if (request.method == "GET" && parts.size() == 1 && parts[0] == "api") {
    return RespondJson(response, 200, registry_.CoreApiVersions(options_.address));
  }
  if (request.method == "GET" && parts.size() == 1 && parts[0] == "apis") {
    return RespondJson(response, 200, registry_.GroupList());
  }
  std::string group, version;
  size_t rest = 0;
  if (parts[0] == "api" && parts.size() >= 2) {
    version = parts[1];
    rest = 2;
  } else if (parts[0] == "apis" && parts.size() >= 3) {
    group = parts[1];
    version = parts[2];
    rest = 3;
  } else {
    RespondError(response, absl::NotFoundError("the server could not find the requested resource"));
    return;
  }
  if (rest == parts.size()) {
    if (std::optional<Json> list = registry_.ResourceList(group, version); list.has_value()) {
      return RespondJson(response, 200, *list);
    }
    RespondError(response, absl::NotFoundError("the server could not find the requested resource"));
    return;
  }
  std::vector<std::string> r(parts.begin() + static_cast<long>(rest), parts.end());
  Target target;
  std::optional<ResourceType> type;
  if (r[0] == "namespaces" && r.size() >= 3 &&
      (type = registry_.Find(group, version, r[2])).has_value() && type->namespaced) {
    target.ns = r[1];
    r.erase(r.begin(), r.begin() + 2);
  } else {
    type = registry_.Find(group, version, r[0]);
  }
  if (!type.has_value() || r.size() > 3) {
    RespondError(response, absl::NotFoundError(absl::StrCat(
                               "the server could not find the requested resource (", path, ")")));
    return;
  }
  target.type = *type;
  if (r.size() >= 2) target.name = r[1];
  if (r.size() == 3) target.subresource = r[2];
  if (faults_.InjectedError(response)) return;
  HandleResource(request, response, target);
}

}  // namespace phalanx::localcluster
