#include "common/kube/object_meta.h"

#include "absl/strings/str_split.h"

namespace phalanx::kube {
namespace {

const Json* Field(const Json& object, const std::string& key) {
  if (!object.is_object() || !object.has_field(key)) return nullptr;
  return &object.at(key);
}

std::string StringField(const Json& object, const std::string& key) {
  const Json* v = Field(object, key);
  return v != nullptr && v->is_string() ? v->as_string() : "";
}

bool BoolField(const Json& object, const std::string& key) {
  const Json* v = Field(object, key);
  return v != nullptr && v->is_boolean() && v->as_bool();
}

std::map<std::string, std::string> StringMap(const Json* v) {
  std::map<std::string, std::string> out;
  if (v == nullptr || !v->is_object()) return out;
  for (const auto& [key, value] : v->as_object()) {
    if (value.is_string()) out[key] = value.as_string();
  }
  return out;
}

Json StringMapJson(const std::map<std::string, std::string>& m) {
  Json out = Json::object();
  for (const auto& [k, v] : m) out[k] = Json::string(v);
  return out;
}

const Json* Metadata(const Json& object) { return Field(object, "metadata"); }

// Sets or removes one metadata field: empty values are removed, not written as "".
template <typename T, typename Empty, typename ToJson>
void Put(Json& meta, const char* key, const T& value, Empty is_empty, ToJson to_json) {
  if (is_empty(value)) {
    if (meta.has_field(key)) meta.erase(key);
  } else {
    meta[key] = to_json(value);
  }
}

}  // namespace

Json OwnerReference::ToJson() const {
  Json ref = Json::object();
  ref["apiVersion"] = Json::string(api_version);
  ref["kind"] = Json::string(kind);
  ref["name"] = Json::string(name);
  ref["uid"] = Json::string(uid);
  if (controller) ref["controller"] = Json::boolean(true);
  if (block_owner_deletion) ref["blockOwnerDeletion"] = Json::boolean(true);
  return ref;
}

std::string MetaString(const Json& object, const char* field) {
  const Json* meta = Metadata(object);
  return meta == nullptr ? "" : StringField(*meta, field);
}

std::map<std::string, std::string> LabelsOf(const Json& object) {
  const Json* meta = Metadata(object);
  return StringMap(meta == nullptr ? nullptr : Field(*meta, "labels"));
}

std::vector<OwnerReference> OwnerReferencesOf(const Json& object) {
  std::vector<OwnerReference> refs;
  const Json* meta = Metadata(object);
  const Json* list = meta == nullptr ? nullptr : Field(*meta, "ownerReferences");
  if (list == nullptr || !list->is_array()) return refs;
  for (const Json& r : list->as_array()) {
    if (!r.is_object()) continue;
    refs.push_back({StringField(r, "apiVersion"), StringField(r, "kind"), StringField(r, "name"),
                    StringField(r, "uid"), BoolField(r, "controller"),
                    BoolField(r, "blockOwnerDeletion")});
  }
  return refs;
}

std::optional<OwnerReference> ControllerOf(const Json& object) {
  for (OwnerReference& ref : OwnerReferencesOf(object)) {
    if (ref.controller) return ref;
  }
  return std::nullopt;
}

bool IsBeingDeleted(const Json& object) { return !MetaString(object, "deletionTimestamp").empty(); }

const Json& FieldOrNull(const Json& object, const std::string& key) {
  static const Json kNull = Json::null();
  const Json* v = Field(object, key);
  return v != nullptr ? *v : kNull;
}

const Json& ArrayOrEmpty(const Json& object, const std::string& key) {
  static const Json kEmpty = Json::array();
  const Json& v = FieldOrNull(object, key);
  return v.is_array() ? v : kEmpty;
}

std::string StringAt(const Json& object, const std::string& path) {
  const Json* node = &object;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    node = Field(*node, std::string(part));
    if (node == nullptr) return "";
  }
  return node->is_string() ? node->as_string() : "";
}

std::string FormatKubeTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::optional<absl::Time> ParseKubeTime(const std::string& text) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &err)) return std::nullopt;
  return t;
}

ObjectMeta ObjectMeta::Decode(const Json& object) {
  ObjectMeta m;
  const Json empty = Json::object();
  const Json* meta_ptr = Metadata(object);
  const Json& meta = meta_ptr != nullptr && meta_ptr->is_object() ? *meta_ptr : empty;
  m.name = StringField(meta, "name");
  m.generate_name = StringField(meta, "generateName");
  m.namespace_ = StringField(meta, "namespace");
  m.uid = StringField(meta, "uid");
  m.resource_version = StringField(meta, "resourceVersion");
  if (const Json* g = Field(meta, "generation"); g != nullptr && g->is_integer()) {
    m.generation = g->as_number().to_int64();
  }
  m.labels = StringMap(Field(meta, "labels"));
  m.annotations = StringMap(Field(meta, "annotations"));
  m.owner_references = OwnerReferencesOf(object);
  if (const Json* f = Field(meta, "finalizers"); f != nullptr && f->is_array()) {
    for (const Json& v : f->as_array()) {
      if (v.is_string()) m.finalizers.push_back(v.as_string());
    }
  }
  m.creation_timestamp = ParseKubeTime(StringField(meta, "creationTimestamp"));
  m.deletion_timestamp = ParseKubeTime(StringField(meta, "deletionTimestamp"));
  return m;
}

void ObjectMeta::EncodeInto(Json& object) const {
  if (!object.is_object()) object = Json::object();
  if (!object.has_field("metadata") || !object.at("metadata").is_object()) {
    object["metadata"] = Json::object();
  }
  Json& meta = object["metadata"];
  auto empty_string = [](const std::string& s) { return s.empty(); };
  auto string_json = [](const std::string& s) { return Json::string(s); };
  Put(meta, "name", name, empty_string, string_json);
  Put(meta, "generateName", generate_name, empty_string, string_json);
  Put(meta, "namespace", namespace_, empty_string, string_json);
  Put(meta, "uid", uid, empty_string, string_json);
  Put(meta, "resourceVersion", resource_version, empty_string, string_json);
  Put(
      meta, "generation", generation, [](int64_t g) { return g == 0; },
      [](int64_t g) { return Json::number(g); });
  auto empty_map = [](const std::map<std::string, std::string>& m) { return m.empty(); };
  Put(meta, "labels", labels, empty_map, StringMapJson);
  Put(meta, "annotations", annotations, empty_map, StringMapJson);
  Put(
      meta, "ownerReferences", owner_references,
      [](const std::vector<OwnerReference>& v) { return v.empty(); },
      [](const std::vector<OwnerReference>& v) {
        Json out = Json::array();
        for (size_t i = 0; i < v.size(); ++i) out[i] = v[i].ToJson();
        return out;
      });
  Put(
      meta, "finalizers", finalizers, [](const std::vector<std::string>& v) { return v.empty(); },
      [](const std::vector<std::string>& v) {
        Json out = Json::array();
        for (size_t i = 0; i < v.size(); ++i) out[i] = Json::string(v[i]);
        return out;
      });
  auto no_time = [](const std::optional<absl::Time>& t) { return !t.has_value(); };
  auto time_json = [](const std::optional<absl::Time>& t) {
    return Json::string(FormatKubeTime(*t));
  };
  Put(meta, "creationTimestamp", creation_timestamp, no_time, time_json);
  Put(meta, "deletionTimestamp", deletion_timestamp, no_time, time_json);
}

}  // namespace phalanx::kube
