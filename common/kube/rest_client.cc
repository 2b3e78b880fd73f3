#include "common/kube/rest_client.h"

#include <cpprest/http_client.h>
#include <openssl/ssl.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/asio/ssl.hpp>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/env_and_files.h"
#include "common/base/log.h"
#include "common/kube/api_status.h"
#include "common/kube/object_meta.h"
#include "common/kube/rest_watch.h"

namespace phalanx::kube {
namespace {

using web::http::http_request;
using web::http::http_response;
using web::http::methods;
using web::http::client::http_client;
using web::http::client::http_client_config;

std::string Encode(const std::string& value) { return web::uri::encode_data_string(value); }

void AddParam(std::string& query, const std::string& key, const std::string& value) {
  if (value.empty()) return;
  query += query.empty() ? '?' : '&';
  query += key + "=" + Encode(value);
}

// `path` with ?fieldValidation=<mode> (or &...) added; unchanged when mode is "".
std::string WithFieldValidation(std::string path, const std::string& mode) {
  std::string query;
  AddParam(query, "fieldValidation", mode);
  if (!query.empty() && path.find('?') != std::string::npos) query[0] = '&';
  return path + query;
}

std::string PropagationName(PropagationPolicy p) {
  switch (p) {
    case PropagationPolicy::kForeground:
      return "Foreground";
    case PropagationPolicy::kOrphan:
      return "Orphan";
    default:
      return "Background";
  }
}

// Keeps a token file's contents current: re-read whenever its modification time or size changes
// (kubelet rotates projected service-account tokens by replacing the file).
class TokenSource {
 public:
  TokenSource(std::string inline_token, std::string file)
      : inline_token_(std::move(inline_token)), file_(std::move(file)) {}

  std::string Current(bool force_reread) {
    if (file_.empty()) return inline_token_;
    absl::MutexLock lock(&mu_);
    struct stat st {};
    if (stat(file_.c_str(), &st) == 0) {
      const bool changed = st.st_mtim.tv_sec != mtime_.tv_sec ||
                           st.st_mtim.tv_nsec != mtime_.tv_nsec || st.st_size != size_;
      if (changed || force_reread) {
        if (absl::StatusOr<std::string> text = base::ReadFileToString(file_); text.ok()) {
          token_ = std::string(absl::StripAsciiWhitespace(*text));
          mtime_ = st.st_mtim;
          size_ = st.st_size;
        }
      }
    }
    return token_;
  }

 private:
  const std::string inline_token_;
  const std::string file_;
  absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);  // the file's contents as last read
  timespec mtime_ ABSL_GUARDED_BY(mu_) = {0, 0};
  off_t size_ ABSL_GUARDED_BY(mu_) = -1;
};

http_client_config MakeConfig(const ClusterConfig& config, absl::Duration timeout) {
  http_client_config c;
  c.set_timeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  c.set_validate_certificates(!config.insecure_skip_tls_verify);
  const std::string ca = config.ca_pem;
  const std::string cert = config.client_cert_pem;
  const std::string key = config.client_key_pem;
  c.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
    boost::system::error_code ignored;
    if (!ca.empty()) {
      // cpprest loads the system's CA bundle into every connection's context before this call.
      // A kubeconfig that names the cluster's CA trusts that CA alone (as client-go does), not
      // every public CA besides; and the bundle, ~70 KiB of parsed certificates a pooled
      // connection, is freed here.
      SSL_CTX_set_cert_store(ctx.native_handle(), X509_STORE_new());
      ctx.add_certificate_authority(boost::asio::buffer(ca), ignored);
    }
    if (!cert.empty() && !key.empty()) {
      ctx.use_certificate_chain(boost::asio::buffer(cert), ignored);
      ctx.use_private_key(boost::asio::buffer(key), boost::asio::ssl::context::pem, ignored);
    }
  });
  return c;
}

}  // namespace

std::vector<std::string> ParseWarningHeader(const std::string& value) {
  // Each warning: <3-digit code> SP <agent> SP "<text with \-escapes>" [SP "<date>"].
  std::vector<std::string> out;
  size_t i = 0;
  while (i < value.size()) {
    while (i < value.size() && (value[i] == ' ' || value[i] == ',')) ++i;
    if (i == value.size()) break;
    const size_t open = value.find('"', i);
    if (open == std::string::npos) break;
    std::string text;
    size_t j = open + 1;
    for (; j < value.size() && value[j] != '"'; ++j) {
      if (value[j] == '\\' && j + 1 < value.size()) ++j;
      text += value[j];
    }
    if (j == value.size()) break;  // unterminated: give up, the whole value is returned
    out.push_back(std::move(text));
    i = j + 1;
    // An optional quoted date belongs to this warning.
    size_t k = i;
    while (k < value.size() && value[k] == ' ') ++k;
    if (k < value.size() && value[k] == '"') {
      const size_t close = value.find('"', k + 1);
      i = close == std::string::npos ? value.size() : close + 1;
    }
  }
  if (out.empty() && !value.empty()) out.push_back(value);
  return out;
}

// How long to wait before sending a request again, when the answer says the server did not act
// on it: a 429, or a 5xx with a Retry-After header (client-go's rule; a 5xx without one may have
// been acted on, so it is the caller's to retry). Retry-After in seconds, capped by the options;
// a 429 without a readable one waits a second. Without this one throttled request failed a whole
// reconcile pass, and a controller's per-key back-off grew past a minute under API throttling.
std::optional<absl::Duration> RetryAfter(int code, const http_response& response,
                                         const RestClientOptions& options) {
  if (code != 429 && code < 500) return std::nullopt;
  auto it = response.headers().find("Retry-After");
  if (it == response.headers().end()) {
    if (code != 429) return std::nullopt;
    return std::min(absl::Seconds(1), options.max_retry_after);
  }
  int64_t seconds = 1;
  if (!absl::SimpleAtoi(it->second, &seconds) || seconds < 0) seconds = 1;
  return std::min(absl::Seconds(seconds), options.max_retry_after);
}

struct RestClient::Impl {
  Impl(const ClusterConfig& c, RestClientOptions o, base::Clock& clk)
      : clock(clk),
        config(c),
        options(std::move(o)),
        client(web::uri(c.server), MakeConfig(c, options.request_timeout)),
        watch_client(web::uri(c.server),
                     MakeConfig(c, options.max_watch_timeout + absl::Seconds(30))),
        token(c.token, c.token_file),
        bucket(options.qps, options.burst, clock.Now()) {}

  void Throttle() {
    absl::Duration wait;
    {
      absl::MutexLock lock(&bucket_mu);
      wait = bucket.Reserve(clock.Now());
    }
    clock.SleepFor(wait);
  }

  http_request Build(const web::http::method& method, const std::string& path,
                     const std::string* body, const std::string& content_type, bool reread) {
    http_request req(method);
    req.set_request_uri(path);
    req.headers().add("Accept", "application/json");
    req.headers().add("User-Agent", options.user_agent);
    const std::string bearer = token.Current(reread);
    if (!bearer.empty()) req.headers().add("Authorization", "Bearer " + bearer);
    if (body != nullptr) {
      // The byte-vector overload: cpprestsdk's string overload reinterprets a char buffer as a
      // byte buffer (undefined behaviour that UBSan reports).
      req.set_body(std::vector<unsigned char>(body->begin(), body->end()));
      req.headers().set_content_type(content_type);
    }
    return req;
  }

  void Report(const std::string& verb, int code) {
    if (options.on_response) options.on_response(verb, code);
  }

  // The API server's Warning headers are meant for a human: log each, hand it to on_warning.
  void ReportWarnings(const std::string& verb, const std::string& path,
                      const http_response& response) {
    auto it = response.headers().find("Warning");
    if (it == response.headers().end()) return;
    for (const std::string& warning : ParseWarningHeader(it->second)) {
      PHX_LOG(WARNING) << "API server warning on " << verb << " " << path << ": " << warning;
      if (options.on_warning) options.on_warning(verb, path, warning);
    }
  }

  // One request. A 401 re-reads a token file once (the token may have just rotated). A request
  // the server did not act on (RetryAfter) is sent again after the wait it asks for.
  absl::StatusOr<std::string> Call(const std::string& verb, const web::http::method& method,
                                   const std::string& path, const std::string* body,
                                   const std::string& content_type) {
    const std::string what = absl::StrCat(method, " ", path);
    bool reread_token = false;
    int throttled = 0;
    while (true) {
      Throttle();
      try {
        http_response response =
            client.request(Build(method, path, body, content_type, reread_token)).get();
        const int code = response.status_code();
        std::string text = response.extract_utf8string(true).get();
        Report(verb, code);
        ReportWarnings(verb, path, response);
        if (code == 401 && !reread_token && !config.token_file.empty()) {
          reread_token = true;
          continue;
        }
        if (code >= 200 && code < 300) return text;
        const std::optional<absl::Duration> wait = RetryAfter(code, response, options);
        if (wait.has_value() && throttled < options.max_throttled_retries) {
          ++throttled;
          clock.SleepFor(*wait);
          continue;
        }
        return StatusFromResponse(code, text, what);
      } catch (const std::exception& e) {
        Report(verb, 0);
        return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
      }
    }
  }

  base::Clock& clock;  // the QPS/burst limit's time and its waits
  const ClusterConfig config;
  const RestClientOptions options;
  http_client client;
  http_client watch_client;
  TokenSource token;
  absl::Mutex bucket_mu;
  TokenBucket bucket ABSL_GUARDED_BY(bucket_mu);
};

absl::StatusOr<std::unique_ptr<RestClient>> RestClient::Create(const ClusterConfig& config,
                                                               RestClientOptions options,
                                                               base::Clock& clock) {
  if (config.server.empty()) return absl::InvalidArgumentError("cluster config has no server");
  try {
    web::uri uri(config.server);
    if (uri.scheme() != "https" && uri.scheme() != "http") {
      return absl::InvalidArgumentError(
          absl::StrCat("server \"", config.server, "\" is not an http(s) URL"));
    }
    return std::unique_ptr<RestClient>(
        new RestClient(std::make_unique<Impl>(config, std::move(options), clock)));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("server \"", config.server, "\" is not a URL: ", e.what()));
  }
}

RestClient::RestClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RestClient::~RestClient() = default;

std::string RestClient::PathOf(const Resource& r, const std::string& ns, const std::string& name) {
  std::string path = r.group.empty() ? "/api/" + r.version : "/apis/" + r.group + "/" + r.version;
  if (r.namespaced && !ns.empty()) path += "/namespaces/" + Encode(ns);
  path += "/" + r.resource;
  if (!name.empty()) path += "/" + Encode(name);
  return path;
}

absl::StatusOr<Json> RestClient::JsonCall(const std::string& verb, const std::string& method,
                                          const std::string& path, const Json* body,
                                          const std::string& content_type) {
  std::string text;
  if (body != nullptr) text = body->serialize();
  absl::StatusOr<std::string> response =
      impl_->Call(verb, method, path, body != nullptr ? &text : nullptr, content_type);
  if (!response.ok()) return response.status();
  std::error_code ec;
  Json parsed = Json::parse(*response, ec);
  if (ec || !parsed.is_object()) {
    return absl::UnavailableError(absl::StrCat(method, " ", path,
                                               ": the server's answer is not a JSON object: \"",
                                               response->substr(0, 120), "\""));
  }
  return parsed;
}

absl::StatusOr<std::string> RestClient::Raw(const std::string& method,
                                            const std::string& path_and_query,
                                            const std::string& body,
                                            const std::string& content_type) {
  return impl_->Call(method, method, path_and_query, body.empty() ? nullptr : &body, content_type);
}

absl::StatusOr<Json> RestClient::Get(const Resource& r, const std::string& ns,
                                     const std::string& name) {
  return JsonCall("GET", methods::GET, PathOf(r, ns, name), nullptr);
}

absl::StatusOr<ObjectList> RestClient::List(const Resource& r, const std::string& ns,
                                            const ListOptions& options) {
  std::string query;
  AddParam(query, "labelSelector", options.label_selector);
  AddParam(query, "fieldSelector", options.field_selector);
  if (options.limit > 0) AddParam(query, "limit", absl::StrCat(options.limit));
  AddParam(query, "continue", options.continue_token);
  absl::StatusOr<Json> list = JsonCall("LIST", methods::GET, PathOf(r, ns) + query, nullptr);
  if (!list.ok()) return list.status();
  ObjectList out;
  try {
    if (list->has_field("items") && list->at("items").is_array()) {
      for (const Json& item : list->at("items").as_array()) out.items.push_back(item);
    } else if (list->has_field("items") && !list->at("items").is_null()) {
      return absl::UnavailableError("list response: items is not an array");
    }
    if (list->has_field("metadata") && list->at("metadata").is_object()) {
      const Json& meta = list->at("metadata");
      if (meta.has_field("resourceVersion") && meta.at("resourceVersion").is_string()) {
        out.resource_version = meta.at("resourceVersion").as_string();
      }
      if (meta.has_field("continue") && meta.at("continue").is_string()) {
        out.continue_token = meta.at("continue").as_string();
      }
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("list response is malformed: ", e.what()));
  }
  return out;
}

absl::StatusOr<Json> RestClient::Create(const Resource& r, const std::string& ns,
                                        const Json& object) {
  return JsonCall("CREATE", methods::POST,
                  WithFieldValidation(PathOf(r, ns), impl_->options.field_validation), &object);
}

absl::StatusOr<Json> RestClient::Update(const Resource& r, const std::string& ns,
                                        const Json& object) {
  const std::string name = MetaString(object, "name");
  if (name.empty()) return absl::InvalidArgumentError("update: object has no metadata.name");
  return JsonCall("UPDATE", methods::PUT,
                  WithFieldValidation(PathOf(r, ns, name), impl_->options.field_validation),
                  &object);
}

absl::StatusOr<Json> RestClient::UpdateStatus(const Resource& r, const std::string& ns,
                                              const Json& object) {
  const std::string name = MetaString(object, "name");
  if (name.empty()) return absl::InvalidArgumentError("update status: object has no metadata.name");
  return JsonCall(
      "UPDATE", methods::PUT,
      WithFieldValidation(PathOf(r, ns, name) + "/status", impl_->options.field_validation),
      &object);
}

absl::StatusOr<Json> RestClient::Patch(const Resource& r, const std::string& ns,
                                       const std::string& name, PatchType type, const Json& patch,
                                       const PatchOptions& options) {
  std::string path = PathOf(r, ns, name);
  if (options.status) path += "/status";
  std::string query;
  std::string content_type = "application/merge-patch+json";
  if (type == PatchType::kApply) {
    content_type = "application/apply-patch+yaml";  // JSON is YAML
    AddParam(query, "fieldManager", options.field_manager);
    if (options.force) AddParam(query, "force", "true");
  }
  return JsonCall("PATCH", methods::PATCH,
                  WithFieldValidation(path + query, impl_->options.field_validation), &patch,
                  content_type);
}

absl::Status RestClient::Delete(const Resource& r, const std::string& ns, const std::string& name,
                                const DeleteOptions& options) {
  Json body = Json::object();
  body["kind"] = Json::string("DeleteOptions");
  body["apiVersion"] = Json::string("v1");
  body["propagationPolicy"] = Json::string(PropagationName(options.propagation));
  if (options.grace_period_seconds.has_value()) {
    body["gracePeriodSeconds"] = Json::number(*options.grace_period_seconds);
  }
  if (!options.uid_precondition.empty() || !options.resource_version_precondition.empty()) {
    Json pre = Json::object();
    if (!options.uid_precondition.empty()) pre["uid"] = Json::string(options.uid_precondition);
    if (!options.resource_version_precondition.empty()) {
      pre["resourceVersion"] = Json::string(options.resource_version_precondition);
    }
    body["preconditions"] = pre;
  }
  return JsonCall("DELETE", methods::DEL, PathOf(r, ns, name), &body).status();
}

absl::StatusOr<std::unique_ptr<WatchStream>> RestClient::Watch(const Resource& r,
                                                               const std::string& ns,
                                                               const WatchOptions& options) {
  std::string query = "?watch=true";
  AddParam(query, "resourceVersion", options.resource_version);
  AddParam(query, "labelSelector", options.label_selector);
  AddParam(query, "fieldSelector", options.field_selector);
  if (options.allow_bookmarks) AddParam(query, "allowWatchBookmarks", "true");
  const absl::Duration server_timeout =
      std::clamp(options.server_timeout, absl::Seconds(1), impl_->options.max_watch_timeout);
  AddParam(query, "timeoutSeconds", absl::StrCat(absl::ToInt64Seconds(server_timeout)));
  const std::string path = PathOf(r, ns) + query;
  const std::string what = absl::StrCat("WATCH ", path);
  impl_->Throttle();
  pplx::cancellation_token_source cancel;
  try {
    http_response response =
        impl_->watch_client
            .request(impl_->Build(methods::GET, path, nullptr, "", false), cancel.get_token())
            .get();
    const int code = response.status_code();
    impl_->Report("WATCH", code);
    if (code != 200) {
      return StatusFromResponse(code, response.extract_utf8string(true).get(), what);
    }
    return std::unique_ptr<WatchStream>(
        std::make_unique<RestWatchStream>(std::move(response), std::move(cancel), what));
  } catch (const std::exception& e) {
    impl_->Report("WATCH", 0);
    return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace phalanx::kube
