// The resource verbs of ApiServer: get, list, create, update, patch, delete, pods/log.
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/log.h"
#include "common/kube/merge_patch.h"
#include "common/kube/object_filter.h"
#include "common/kube/object_meta.h"
#include "tests/localcluster/api_server.h"
#include "tests/localcluster/known_fields.h"
#include "tests/localcluster/protobuf_body.h"
#include "tests/localcluster/schema_validator.h"
#include "tests/localcluster/strategic_merge.h"
#include "tests/localcluster/table_printer.h"

namespace phalanx::localcluster {
namespace {

bool WantsTable(const HttpRequest& request) {
  return absl::StrContains(request.Header("accept"), "as=Table");
}

absl::StatusOr<Json> ParseBody(const std::string& body) {
  if (absl::StartsWith(body, std::string("k8s\0", 4))) return DecodeProtobufBody(body);
  std::error_code ec;
  Json object = Json::parse(body, ec);
  if (ec || !object.is_object()) {
    return absl::InvalidArgumentError(
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json");
  }
  return object;
}

// DNS-1123 subdomain, the rule for most object names.
bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-' && c != '.') return false;
  }
  return absl::ascii_isalnum(name.front()) && absl::ascii_isalnum(name.back());
}

// DNS-1123 label (namespaces, container names) and DNS-1035 label (services: a letter first).
bool ValidLabelName(const std::string& name, bool letter_first) {
  if (name.empty() || name.size() > 63 || name.find('.') != std::string::npos) return false;
  if (letter_first && !absl::ascii_islower(name.front())) return false;
  return ValidName(name);
}

// A label value or the name part of a label key: at most 63 of [A-Za-z0-9_.-], alphanumeric at
// both ends (a value may be empty).
bool ValidQualifiedPart(const std::string& s, bool allow_empty) {
  if (s.empty()) return allow_empty;
  if (s.size() > 63) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return absl::ascii_isalnum(s.front()) && absl::ascii_isalnum(s.back());
}

void ValidateLabels(const Json& object, std::vector<FieldError>& errors) {
  const Json& labels = kube::FieldOrNull(kube::FieldOrNull(object, "metadata"), "labels");
  if (!labels.is_object()) return;
  for (const auto& [key, value] : labels.as_object()) {
    const size_t slash = key.find('/');
    const std::string prefix = slash == std::string::npos ? "" : key.substr(0, slash);
    const std::string name = slash == std::string::npos ? key : key.substr(slash + 1);
    if (!ValidQualifiedPart(name, false) || (slash != std::string::npos && !ValidName(prefix))) {
      errors.push_back({"FieldValueInvalid", "metadata.labels",
                        absl::StrCat("Invalid value: \"", key,
                                     "\": name part must consist of alphanumeric characters, '-', "
                                     "'_' or '.', and must start and end with an alphanumeric "
                                     "character, at most 63 characters, with an optional DNS "
                                     "subdomain prefix and '/'")});
    }
    const std::string v = value.is_string() ? value.as_string() : value.serialize();
    if (!value.is_string() || !ValidQualifiedPart(v, true)) {
      errors.push_back(
          {"FieldValueInvalid", "metadata.labels",
           absl::StrCat("Invalid value: \"", v,
                        "\": a valid label must be an empty string or consist of "
                        "alphanumeric characters, '-', '_' or '.', and must start and "
                        "end with an alphanumeric character (at most 63 characters)")});
    }
  }
}

// Whether an openAPIV3Schema (or anything holding one) carries CEL rules.
bool HasCelRules(const Json& v) {
  if (v.is_object()) {
    for (const auto& [key, child] : v.as_object()) {
      if (key == "x-kubernetes-validations" || HasCelRules(child)) return true;
    }
  } else if (v.is_array()) {
    for (const Json& child : v.as_array()) {
      if (HasCelRules(child)) return true;
    }
  }
  return false;
}

// The Pod Security level a namespace's labels ask for ("" when none).
std::string PodSecurityLabels(const Json& ns) {
  const Json& labels = kube::FieldOrNull(kube::FieldOrNull(ns, "metadata"), "labels");
  std::string found;
  if (!labels.is_object()) return found;
  for (const auto& [key, value] : labels.as_object()) {
    if (absl::StartsWith(key, "pod-security.kubernetes.io/")) {
      absl::StrAppend(&found, found.empty() ? "" : ", ", key, "=",
                      value.is_string() ? value.as_string() : value.serialize());
    }
  }
  return found;
}

std::string StrictMessage(const std::vector<std::string>& unknown) {
  std::string out = "strict decoding error: ";
  for (size_t i = 0; i < unknown.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", "unknown field \"", unknown[i], "\"");
  }
  return out;
}

Json BadRequestStatus(const std::string& message) {
  Json body = Json::object();
  body["kind"] = Json::string("Status");
  body["apiVersion"] = Json::string("v1");
  body["metadata"] = Json::object();
  body["status"] = Json::string("Failure");
  body["message"] = Json::string(message);
  body["reason"] = Json::string("BadRequest");
  body["code"] = Json::number(400);
  return body;
}

// A body this server cannot decode (protobuf of a kind it does not map): 415 as kube-apiserver
// answers an unsupported media type.
void RespondUnsupportedMediaType(HttpResponse& response, const absl::Status& status) {
  Json body = BadRequestStatus(std::string(status.message()));
  body["reason"] = Json::string("UnsupportedMediaType");
  body["code"] = Json::number(415);
  RespondJson(response, 415, body);
}

void RespondBodyError(HttpResponse& response, const absl::Status& status) {
  if (absl::IsUnimplemented(status)) return RespondUnsupportedMediaType(response, status);
  RespondError(response, status);
}

std::string RandomSuffix() {
  static constexpr char kChars[] = "bcdfghjklmnpqrstvwxz2456789";
  thread_local std::mt19937 rng(std::random_device{}());
  std::string s;
  for (int i = 0; i < 5; ++i) s += kChars[rng() % (sizeof(kChars) - 1)];
  return s;
}

void SetDefault(Json& object, const char* key, Json value) {
  if (!object.has_field(key)) object[key] = std::move(value);
}

Json StatusSuccess(const std::string& name, const std::string& kind) {
  Json body = Json::object();
  body["kind"] = Json::string("Status");
  body["apiVersion"] = Json::string("v1");
  body["metadata"] = Json::object();
  body["status"] = Json::string("Success");
  Json details = Json::object();
  details["name"] = Json::string(name);
  details["kind"] = Json::string(kind);
  body["details"] = details;
  return body;
}

// Deletes every object of `store_key` in `ns` ("" = every namespace), as namespace and CRD
// deletion do to what they contain.
void DeleteEvery(ObjectStore& store, const std::string& store_key, const std::string& ns,
                 ObjectStore::Propagation policy, std::optional<int64_t> grace) {
  absl::StatusOr<ListResult> all = store.List(store_key, ns, {}, 0, "");
  if (!all.ok()) return;
  for (const Json& o : all->items) {
    store
        .Delete(store_key, kube::MetaString(o, "namespace"), kube::MetaString(o, "name"), "",
                policy, grace)
        .IgnoreError();
  }
}

}  // namespace

void ApiServer::HandleResource(const HttpRequest& request, HttpResponse& response,
                               const Target& target) {
  const std::string& m = request.method;
  if (target.subresource == "log" && target.type.plural == "pods" && m == "GET") {
    return PodLog(response, target);
  }
  if (!target.subresource.empty() &&
      !(target.subresource == "status" && target.type.status_subresource)) {
    return RespondError(response, absl::NotFoundError(absl::StrCat(
                                      "the server could not find the requested resource ",
                                      target.type.plural, "/", target.subresource)));
  }
  const bool collection = target.name.empty();
  if (m == "GET" && collection) {
    const std::string watch = request.Param("watch");
    if (watch == "true" || watch == "1") return Watch(request, response, target);
    return List(request, response, target);
  }
  if (m == "GET") return Get(request, response, target);
  if (m == "POST" && collection) return Create(request, response, target);
  if (m == "PUT" && !collection) return Update(request, response, target);
  if (m == "PATCH" && !collection) return Patch(request, response, target);
  if (m == "DELETE" && !collection) return Delete(request, response, target);
  RespondError(response, absl::UnimplementedError(absl::StrCat(
                             m, " is not supported on ", collection ? "a collection" : "an object",
                             " here (deletecollection is not implemented)")));
}

void ApiServer::Get(const HttpRequest& request, HttpResponse& response, const Target& target) {
  absl::StatusOr<Json> object = store_.Get(target.type.StoreKey(), target.ns, target.name);
  if (!object.ok()) return RespondError(response, object.status());
  (*object)["apiVersion"] = Json::string(target.type.ApiVersion());
  if (WantsTable(request)) {
    return RespondJson(response, 200,
                       BuildTable(target.type.plural, target.type.columns, {*object},
                                  kube::MetaString(*object, "resourceVersion"), clock_.Now()));
  }
  RespondJson(response, 200, *object);
}

void ApiServer::List(const HttpRequest& request, HttpResponse& response, const Target& target) {
  absl::StatusOr<kube::ObjectFilter> filter =
      kube::ObjectFilter::Parse(request.Param("labelSelector"), request.Param("fieldSelector"));
  if (!filter.ok()) return RespondError(response, filter.status());
  int64_t limit = 0;
  if (!request.Param("limit").empty() && !absl::SimpleAtoi(request.Param("limit"), &limit)) {
    return RespondError(response, absl::InvalidArgumentError("limit must be a number"));
  }
  absl::StatusOr<ListResult> list =
      store_.List(target.type.StoreKey(), target.ns, *filter, limit, request.Param("continue"));
  if (!list.ok()) return RespondError(response, list.status());
  const std::string rv = absl::StrCat(list->resource_version);
  for (Json& item : list->items) item["apiVersion"] = Json::string(target.type.ApiVersion());
  if (WantsTable(request)) {
    Json table = BuildTable(target.type.plural, target.type.columns, list->items, rv, clock_.Now());
    if (!list->continue_token.empty()) {
      table["metadata"]["continue"] = Json::string(list->continue_token);
    }
    return RespondJson(response, 200, table);
  }
  Json out = Json::object();
  out["kind"] = Json::string(target.type.kind + "List");
  out["apiVersion"] = Json::string(target.type.ApiVersion());
  out["metadata"] = Json::object();
  out["metadata"]["resourceVersion"] = Json::string(rv);
  if (!list->continue_token.empty()) {
    out["metadata"]["continue"] = Json::string(list->continue_token);
  }
  Json items = Json::array(list->items.size());
  for (size_t i = 0; i < list->items.size(); ++i) items[i] = std::move(list->items[i]);
  out["items"] = std::move(items);
  RespondJson(response, 200, out);
}

ApiServer::WriteContext ApiServer::ContextOf(const HttpRequest& request) {
  WriteContext context;
  const std::string mode = request.Param("fieldValidation");
  if (mode == "Strict" || mode == "Ignore") context.field_validation = mode;
  return context;
}

absl::Status ApiServer::Admit(const Target& target, Json& object, bool create,
                              WriteContext& context, HttpResponse& response, bool* responded) {
  *responded = false;
  const ResourceType& type = target.type;
  std::vector<FieldError> errors;
  const std::string name = kube::MetaString(object, "name");
  // Unknown fields first, as kube-apiserver's decoder meets them before any validation.
  std::vector<std::string> unknown;
  if (type.crd_name.empty()) unknown = DropUnknownFields(type.ApiVersion(), type.kind, object);
  std::vector<FieldError> schema_errors;
  if (!type.schema.is_null()) {
    std::vector<std::string> pruned;
    schema_errors = ValidateAndDefault(type.schema, object, &pruned);
    unknown.insert(unknown.end(), pruned.begin(), pruned.end());
  }
  if (!unknown.empty() && context.field_validation == "Strict") {
    *responded = true;
    if (context.patch) {
      Json status =
          InvalidStatus(type.kind, type.group, name,
                        {{"FieldValueInvalid", "patch",
                          absl::StrCat("Invalid value: \"<patch>\": ", StrictMessage(unknown))}});
      RespondJson(response, 422, status);
    } else {
      RespondJson(response, 400,
                  BadRequestStatus(absl::StrCat(type.kind, " in version \"", type.version,
                                                "\" cannot be handled as a ", type.kind, ": ",
                                                StrictMessage(unknown))));
    }
    return absl::OkStatus();
  }
  if (context.field_validation == "Warn") {
    for (const std::string& u : unknown) {
      context.warnings.push_back(absl::StrCat("unknown field \"", u, "\""));
    }
  }
  ValidateLabels(object, errors);
  if (type.StoreKey() == "services" || type.StoreKey() == "namespaces") {
    // Services name DNS-1035 labels (a letter first); namespaces are DNS-1123 labels.
    if (!ValidLabelName(name, type.StoreKey() == "services")) {
      errors.push_back(
          {"FieldValueInvalid", "metadata.name",
           absl::StrCat("Invalid value: \"", name, "\": a ",
                        type.StoreKey() == "services" ? "DNS-1035" : "lowercase RFC 1123",
                        " label must consist of lower case alphanumeric characters or "
                        "'-', at most 63 characters")});
    }
  } else if (!ValidName(name)) {
    errors.push_back({"FieldValueInvalid", "metadata.name",
                      absl::StrCat("Invalid value: \"", name,
                                   "\": a lowercase RFC 1123 subdomain must consist of lower case "
                                   "alphanumeric characters, '-' or '.', and must start and end "
                                   "with an alphanumeric character")});
  }
  const bool status_write = target.subresource == "status";
  if (type.StoreKey() == "pods" && !status_write) {
    Json& spec = object["spec"];
    if (!spec.is_object() || !spec.has_field("containers") || !spec.at("containers").is_array() ||
        spec.at("containers").size() == 0) {
      errors.push_back({"FieldValueRequired", "spec.containers", "Required value"});
    } else {
      for (size_t i = 0; i < spec.at("containers").size(); ++i) {
        const Json& c = spec.at("containers").at(i);
        const std::string at = absl::StrCat("spec.containers[", i, "]");
        const std::string cname = kube::StringAt(c, "name");
        if (cname.empty()) {
          errors.push_back({"FieldValueRequired", at + ".name", "Required value"});
        } else if (!ValidLabelName(cname, false)) {
          errors.push_back({"FieldValueInvalid", at + ".name",
                            absl::StrCat("Invalid value: \"", cname,
                                         "\": a lowercase RFC 1123 label must consist of lower "
                                         "case alphanumeric characters or '-'")});
        }
        if (kube::StringAt(c, "image").empty()) {
          errors.push_back({"FieldValueRequired", at + ".image", "Required value"});
        }
      }
      SetDefault(spec, "dnsPolicy", Json::string("ClusterFirst"));
      SetDefault(spec, "restartPolicy", Json::string("Always"));
      SetDefault(spec, "terminationGracePeriodSeconds", Json::number(30));
      SetDefault(spec, "schedulerName", Json::string("default-scheduler"));
      if (create) {
        object["status"] = Json::object();
        object["status"]["phase"] = Json::string("Pending");
      }
    }
  } else if (type.StoreKey() == "namespaces" && create) {
    object["status"] = Json::object();
    object["status"]["phase"] = Json::string("Active");
  }
  if (type.StoreKey() == "namespaces" && !status_write) {
    if (const std::string labels = PodSecurityLabels(object); !labels.empty()) {
      context.warnings.push_back(absl::StrCat(
          "PodSecurity is not enforced by phalanx-localcluster's built-in API server: namespace ",
          name, " asks for ", labels,
          " and will admit any pod (a real kube-apiserver enforces "
          "it; use --backend real)"));
    }
  }
  if (type.StoreKey() == "pods" && create) {
    absl::StatusOr<Json> ns = store_.Get("namespaces", "", target.ns);
    if (ns.ok()) {
      if (const std::string labels = PodSecurityLabels(*ns); !labels.empty()) {
        context.warnings.push_back(
            absl::StrCat("PodSecurity (", labels, ") of namespace ", target.ns,
                         " is not enforced by phalanx-localcluster's built-in API server: pod ",
                         name, " was admitted unchecked"));
      }
    }
  } else if (type.StoreKey() == "services" && !status_write) {
    Json& spec = object["spec"];
    if (spec.is_object()) {
      SetDefault(spec, "type", Json::string("ClusterIP"));
      if (create && !spec.has_field("clusterIP")) {
        static std::atomic<int> next_ip{10};
        const int n = next_ip.fetch_add(1);
        spec["clusterIP"] = Json::string(absl::StrCat("10.96.", n / 250, ".", n % 250 + 1));
      }
    }
  } else if (type.StoreKey() == "secrets" && object.has_field("stringData")) {
    // The API server folds stringData into base64 data; clients never read stringData back.
    if (object.at("stringData").is_object()) {
      for (const auto& [k, v] : object.at("stringData").as_object()) {
        if (v.is_string()) object["data"][k] = Json::string(absl::Base64Escape(v.as_string()));
      }
    }
    object.erase("stringData");
  } else if (type.StoreKey() == "customresourcedefinitions.apiextensions.k8s.io" && !status_write) {
    std::vector<FieldError> crd_errors = ValidateCrd(object);
    errors.insert(errors.end(), crd_errors.begin(), crd_errors.end());
    if (HasCelRules(kube::FieldOrNull(object, "spec"))) {
      context.warnings.push_back(absl::StrCat(
          "x-kubernetes-validations are not evaluated by phalanx-localcluster's built-in API "
          "server: objects of ",
          name,
          " are accepted without their CEL rules (a real "
          "kube-apiserver enforces them; use --backend real)"));
    }
  }
  if (!type.crd_name.empty() && HasCelRules(type.schema)) {
    context.warnings.push_back(absl::StrCat(
        "x-kubernetes-validations rules of ", type.crd_name,
        " were not evaluated (phalanx-localcluster's built-in API server has no CEL)"));
  }
  errors.insert(errors.end(), schema_errors.begin(), schema_errors.end());
  // A real API server refuses new finalizers on an object that is being deleted.
  if (context.current != nullptr && kube::IsBeingDeleted(*context.current) && !status_write) {
    const Json& before =
        kube::FieldOrNull(kube::FieldOrNull(*context.current, "metadata"), "finalizers");
    const Json& after = kube::FieldOrNull(kube::FieldOrNull(object, "metadata"), "finalizers");
    std::vector<std::string> added;
    if (after.is_array()) {
      for (const Json& f : after.as_array()) {
        bool known = false;
        if (before.is_array()) {
          for (const Json& b : before.as_array()) known |= b == f;
        }
        if (!known && f.is_string()) added.push_back(f.as_string());
      }
    }
    if (!added.empty()) {
      errors.push_back({"FieldValueForbidden", "metadata.finalizers",
                        absl::StrCat("Forbidden: no new finalizers can be added if the object is "
                                     "being deleted, found new finalizers []string{\"",
                                     absl::StrJoin(added, "\", \""), "\"}")});
    }
  }
  if (!errors.empty()) {
    *responded = true;
    RespondJson(response, 422, InvalidStatus(type.kind, type.group, name, errors));
  }
  return absl::OkStatus();
}

void ApiServer::AfterWrite(const Target& target, const Json& stored, bool deleted) {
  if (target.type.StoreKey() != "customresourcedefinitions.apiextensions.k8s.io") return;
  const std::string name = kube::MetaString(stored, "name");
  if (deleted) {
    // The CRD's objects go with it.
    for (const ResourceType& t : registry_.All()) {
      if (t.crd_name == name) {
        DeleteEvery(store_, t.StoreKey(), "", ObjectStore::Propagation::kBackground, std::nullopt);
      }
    }
    registry_.UnregisterCrd(name);
    absl::MutexLock lock(&window_mu_);
    window_start_.erase(absl::StrCat(kube::StringAt(stored, "spec.names.plural"), ".",
                                     kube::StringAt(stored, "spec.group")));
    return;
  }
  if (!registry_.RegisterCrd(stored).ok()) return;
  for (const ResourceType& t : registry_.All()) {
    if (t.crd_name == name && t.status_subresource) store_.EnableStatusSubresource(t.StoreKey());
    if (t.crd_name == name) {
      uint64_t rv = 0;
      if (absl::SimpleAtoi(kube::MetaString(stored, "resourceVersion"), &rv)) {
        absl::MutexLock lock(&window_mu_);
        window_start_.emplace(t.StoreKey(), rv);
      }
    }
  }
  // The CRD is established at once: its status says so (kubectl wait --for condition=Established).
  Json current = stored;
  Json status = Json::object();
  Json conditions = Json::array();
  const std::string now = kube::FormatKubeTime(clock_.Now());
  int i = 0;
  for (const char* type : {"NamesAccepted", "Established"}) {
    Json c = Json::object();
    c["type"] = Json::string(type);
    c["status"] = Json::string("True");
    c["reason"] =
        Json::string(std::string(type) == "Established" ? "InitialNamesAccepted" : "NoConflicts");
    c["message"] = Json::string("");
    c["lastTransitionTime"] = Json::string(now);
    conditions[i++] = c;
  }
  status["conditions"] = conditions;
  status["acceptedNames"] = stored.at("spec").at("names");
  Json stored_versions = Json::array();
  int j = 0;
  for (const Json& v : stored.at("spec").at("versions").as_array()) {
    if (v.has_field("storage") && v.at("storage").is_boolean() && v.at("storage").as_bool()) {
      stored_versions[j++] = v.at("name");
    }
  }
  status["storedVersions"] = stored_versions;
  if (current.has_field("status") && current.at("status") == status) return;
  current["status"] = status;
  store_.Update(target.type.StoreKey(), "", current, /*status_subresource=*/true).IgnoreError();
}

void ApiServer::Create(const HttpRequest& request, HttpResponse& response, const Target& target) {
  CreateWithWarnings(request, response, target, {});
}

void ApiServer::CreateWithWarnings(const HttpRequest& request, HttpResponse& response,
                                   const Target& target, std::vector<std::string> warnings) {
  absl::StatusOr<Json> parsed = ParseBody(request.body);
  if (!parsed.ok()) return RespondBodyError(response, parsed.status());
  Json object = *std::move(parsed);
  const ResourceType& type = target.type;
  if (object.has_field("kind") && object.at("kind").is_string() &&
      object.at("kind").as_string() != type.kind) {
    return RespondError(response, absl::InvalidArgumentError(
                                      absl::StrCat("kind ", object.at("kind").as_string(),
                                                   " does not match the resource ", type.plural)));
  }
  object["kind"] = Json::string(type.kind);
  object["apiVersion"] = Json::string(type.ApiVersion());
  if (!object.has_field("metadata") || !object.at("metadata").is_object()) {
    object["metadata"] = Json::object();
  }
  Json& meta = object["metadata"];
  std::string ns = target.ns;
  if (type.namespaced) {
    const std::string body_ns = kube::MetaString(object, "namespace");
    if (ns.empty()) ns = body_ns.empty() ? "default" : body_ns;
    if (!body_ns.empty() && body_ns != ns) {
      return RespondError(response, absl::InvalidArgumentError(
                                        "the namespace of the provided object does not match the "
                                        "namespace sent on the request"));
    }
    meta["namespace"] = Json::string(ns);
    if (!store_.Get("namespaces", "", ns).ok()) {
      return RespondError(response,
                          absl::NotFoundError(absl::StrCat("namespaces \"", ns, "\" not found")));
    }
  } else if (meta.has_field("namespace")) {
    meta.erase("namespace");
  }
  if (kube::MetaString(object, "name").empty() &&
      !kube::MetaString(object, "generateName").empty()) {
    meta["name"] = Json::string(kube::MetaString(object, "generateName") + RandomSuffix());
  }
  Target write = target;
  write.ns = ns;
  bool responded = false;
  WriteContext context = ContextOf(request);
  context.warnings = std::move(warnings);
  if (absl::Status s = Admit(write, object, /*create=*/true, context, response, &responded);
      !s.ok()) {
    return RespondError(response, s);
  }
  if (responded) return;
  if (request.Param("dryRun") == "All") return RespondJson(response, 201, object, context.warnings);
  // Pods and namespaces get their initial status from the server (Admit set it).
  const bool server_status = type.StoreKey() == "pods" || type.StoreKey() == "namespaces";
  absl::StatusOr<Json> stored =
      store_.Create(type.StoreKey(), type.namespaced ? ns : "", object, server_status);
  if (!stored.ok()) return RespondError(response, stored.status());
  AfterWrite(write, *stored, false);
  if (type.StoreKey() == "namespaces") {
    // kube-controller-manager gives every namespace a `default` ServiceAccount (pods use it).
    Json sa =
        Json::parse(R"({"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}})");
    sa["metadata"]["namespace"] = Json::string(kube::MetaString(*stored, "name"));
    store_.Create("serviceaccounts", kube::MetaString(*stored, "name"), sa, false).IgnoreError();
  }
  RespondJson(response, 201, *stored, context.warnings);
}

void ApiServer::Update(const HttpRequest& request, HttpResponse& response, const Target& target) {
  absl::StatusOr<Json> parsed = ParseBody(request.body);
  if (!parsed.ok()) return RespondBodyError(response, parsed.status());
  Json object = *std::move(parsed);
  if (kube::MetaString(object, "name") != target.name) {
    return RespondError(response, absl::InvalidArgumentError(
                                      "the name of the object does not match the name on the URL"));
  }
  if (target.type.namespaced) object["metadata"]["namespace"] = Json::string(target.ns);
  object["kind"] = Json::string(target.type.kind);
  object["apiVersion"] = Json::string(target.type.ApiVersion());
  bool responded = false;
  WriteContext context = ContextOf(request);
  absl::StatusOr<Json> current = store_.Get(target.type.StoreKey(), target.ns, target.name);
  if (current.ok()) context.current = &*current;
  if (absl::Status s = Admit(target, object, false, context, response, &responded); !s.ok()) {
    return RespondError(response, s);
  }
  if (responded) return;
  absl::StatusOr<Json> stored =
      store_.Update(target.type.StoreKey(), target.ns, object, target.subresource == "status");
  if (!stored.ok()) return RespondError(response, stored.status());
  AfterWrite(target, *stored, false);
  RespondJson(response, 200, *stored, context.warnings);
}

void ApiServer::Patch(const HttpRequest& request, HttpResponse& response, const Target& target) {
  std::string type = request.Header("content-type");
  type = type.substr(0, type.find(';'));
  const bool merge = type == "application/merge-patch+json";
  const bool strategic = type == "application/strategic-merge-patch+json";
  const bool apply = type == "application/apply-patch+yaml";
  if (!merge && !strategic && !apply) {
    return RespondError(response, absl::InvalidArgumentError(absl::StrCat(
                                      "unsupported patch type \"", type,
                                      "\" (merge, strategic-merge and apply patches are served)")));
  }
  absl::StatusOr<Json> patch = ParseBody(request.body);
  if (!patch.ok()) {
    return RespondError(response, absl::InvalidArgumentError(
                                      "patch body must be a JSON object (YAML apply bodies are not "
                                      "supported by the local cluster)"));
  }
  const bool pinned_version = !kube::MetaString(*patch, "resourceVersion").empty();
  std::vector<std::string> apply_warnings;
  if (apply) {
    apply_warnings.push_back(
        "server-side apply is not field-managed by phalanx-localcluster's built-in API server: "
        "the configuration is merged, no conflicts between field managers are detected and "
        "fields dropped from it stay (a real kube-apiserver tracks ownership; use --backend real)");
  }
  for (int attempt = 0; attempt < 5; ++attempt) {
    absl::StatusOr<Json> current = store_.Get(target.type.StoreKey(), target.ns, target.name);
    if (!current.ok() && absl::IsNotFound(current.status()) && apply &&
        target.subresource.empty()) {
      HttpRequest create = request;
      Json object = *patch;
      object["metadata"]["name"] = Json::string(target.name);
      create.body = object.serialize();
      Target collection = target;
      collection.name.clear();
      return CreateWithWarnings(create, response, collection, apply_warnings);
    }
    if (!current.ok()) return RespondError(response, current.status());
    Json merged = strategic ? StrategicMerge(*current, *patch) : kube::MergePatch(*current, *patch);
    if (!pinned_version) {
      merged["metadata"]["resourceVersion"] = current->at("metadata").at("resourceVersion");
    }
    merged["metadata"]["name"] = Json::string(target.name);
    if (target.type.namespaced) merged["metadata"]["namespace"] = Json::string(target.ns);
    bool responded = false;
    WriteContext context = ContextOf(request);
    context.patch = true;
    context.current = &*current;
    context.warnings = apply_warnings;
    if (absl::Status s = Admit(target, merged, false, context, response, &responded); !s.ok()) {
      return RespondError(response, s);
    }
    if (responded) return;
    absl::StatusOr<Json> stored =
        store_.Update(target.type.StoreKey(), target.ns, merged, target.subresource == "status");
    if (absl::IsAborted(stored.status()) && !pinned_version) continue;  // raced: re-apply
    if (!stored.ok()) return RespondError(response, stored.status());
    AfterWrite(target, *stored, false);
    return RespondJson(response, 200, *stored, context.warnings);
  }
  RespondError(response, absl::AbortedError("the object kept changing while being patched"));
}

void ApiServer::Delete(const HttpRequest& request, HttpResponse& response, const Target& target) {
  std::string propagation = request.Param("propagationPolicy");
  std::string uid, resource_version;
  std::optional<int64_t> grace;
  if (int64_t g; absl::SimpleAtoi(request.Param("gracePeriodSeconds"), &g)) grace = g;
  if (!request.body.empty()) {
    absl::StatusOr<Json> options = ParseBody(request.body);
    if (!options.ok()) return RespondError(response, options.status());
    propagation = kube::StringAt(*options, "propagationPolicy");
    uid = kube::StringAt(*options, "preconditions.uid");
    resource_version = kube::StringAt(*options, "preconditions.resourceVersion");
    if (options->has_field("gracePeriodSeconds") &&
        options->at("gracePeriodSeconds").is_integer()) {
      grace = options->at("gracePeriodSeconds").as_number().to_int64();
    }
  }
  ObjectStore::Propagation policy = ObjectStore::Propagation::kBackground;
  if (propagation == "Foreground") policy = ObjectStore::Propagation::kForeground;
  if (propagation == "Orphan") policy = ObjectStore::Propagation::kOrphan;
  const std::string key = target.type.StoreKey();
  if (!uid.empty()) {
    absl::StatusOr<Json> current = store_.Get(key, target.ns, target.name);
    if (!current.ok()) return RespondError(response, current.status());
    if (kube::MetaString(*current, "uid") != uid) {
      return RespondError(
          response, absl::AbortedError(absl::StrCat(
                        "Operation cannot be fulfilled on ", target.type.kind, " \"", target.name,
                        "\": the UID in the precondition (", uid,
                        ") does not match the UID in record (", kube::MetaString(*current, "uid"),
                        "). The object might have been deleted and then recreated")));
    }
  }
  if (!resource_version.empty()) {
    absl::StatusOr<Json> current = store_.Get(key, target.ns, target.name);
    if (!current.ok()) return RespondError(response, current.status());
    if (kube::MetaString(*current, "resourceVersion") != resource_version) {
      return RespondError(response, absl::AbortedError(absl::StrCat(
                                        "Precondition failed: ResourceVersion in precondition: ",
                                        resource_version, ", ResourceVersion in object meta: ",
                                        kube::MetaString(*current, "resourceVersion"))));
    }
  }
  if (key == "namespaces") {
    // Namespace deletion removes what is in it (a real namespace controller does this later).
    for (const ResourceType& t : registry_.All()) {
      if (t.namespaced) DeleteEvery(store_, t.StoreKey(), target.name, policy, 0);
    }
  }
  absl::StatusOr<Json> result = store_.Delete(key, target.ns, target.name, uid, policy, grace);
  if (!result.ok()) return RespondError(response, result.status());
  const bool gone = !store_.Get(key, target.ns, target.name).ok();
  AfterWrite(target, *result, gone);
  if (gone && key != "pods") {
    return RespondJson(response, 200, StatusSuccess(target.name, target.type.plural));
  }
  RespondJson(response, 200, *result);
}

void ApiServer::PodLog(HttpResponse& response, const Target& target) {
  if (!store_.Get("pods", target.ns, target.name).ok()) {
    return RespondError(response,
                        absl::NotFoundError(absl::StrCat("pods \"", target.name, "\" not found")));
  }
  std::ifstream in(absl::StrCat(options_.log_dir, "/", target.ns, "_", target.name, ".log"));
  std::stringstream text;
  if (in) text << in.rdbuf();
  response.Respond(200, "text/plain", text.str());
}

}  // namespace phalanx::localcluster
