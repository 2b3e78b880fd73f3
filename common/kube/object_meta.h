// Object codecs for the metadata every Kubernetes object carries. Objects stay JSON end to end so
// fields this project does not know survive a read-modify-write (a newer API server's additions
// are not dropped by an Update); these helpers read and write the parts Phalanx uses.
// Readers never throw: a missing or mistyped field reads as empty. Pure; thread-safe.
#pragma once

#include <cpprest/json.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/kube/json.h"

namespace phalanx::kube {

struct OwnerReference {
  std::string api_version;
  std::string kind;
  std::string name;
  std::string uid;
  bool controller = false;
  bool block_owner_deletion = false;

  Json ToJson() const;
};

// The typed view of metadata. Decode reads what is there; EncodeInto writes these fields into
// `object`'s metadata and leaves every other field of it as it was.
struct ObjectMeta {
  std::string name;
  std::string generate_name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::vector<OwnerReference> owner_references;
  std::vector<std::string> finalizers;
  std::optional<absl::Time> creation_timestamp;
  std::optional<absl::Time> deletion_timestamp;

  static ObjectMeta Decode(const Json& object);
  void EncodeInto(Json& object) const;
};

// A metadata string field ("name", "namespace", "uid", "resourceVersion", ...), "" if absent.
std::string MetaString(const Json& object, const char* field);
std::map<std::string, std::string> LabelsOf(const Json& object);
std::vector<OwnerReference> OwnerReferencesOf(const Json& object);
// The owner reference with controller: true, if any.
std::optional<OwnerReference> ControllerOf(const Json& object);
bool IsBeingDeleted(const Json& object);

// The field `key` of `object`: a JSON null when absent or when `object` is not an object.
const Json& FieldOrNull(const Json& object, const std::string& key);
// The array field `key` of `object`, or an empty array.
const Json& ArrayOrEmpty(const Json& object, const std::string& key);

// A string field at a dotted path ("status.phase"), "" if absent or not a string.
std::string StringAt(const Json& object, const std::string& path);

// RFC 3339 in UTC with second precision, as Kubernetes writes timestamps.
std::string FormatKubeTime(absl::Time t);
std::optional<absl::Time> ParseKubeTime(const std::string& text);

}  // namespace phalanx::kube
