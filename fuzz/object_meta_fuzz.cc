// Fuzz target: the metadata codecs every Kubernetes object goes through (ObjectMeta::Decode,
// EncodeInto, the field readers, the timestamp parser). The input is an object as JSON. Readers
// must never throw on mistyped fields, and what Decode reads must survive EncodeInto unchanged
// (for objects without duplicate keys; fuzz_json.h says why).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/kube/object_meta.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/fuzz_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace phalanx::kube;
  // The timestamp parser takes the raw text too (creationTimestamp is any string on the wire).
  const std::string text(reinterpret_cast<const char*>(data), std::min<size_t>(size, 64));
  if (std::optional<absl::Time> t = ParseKubeTime(text)) ParseKubeTime(FormatKubeTime(*t));

  std::optional<Json> object = phalanx::fuzz::ParseJson(data, size);
  if (!object) return 0;
  const ObjectMeta meta = ObjectMeta::Decode(*object);
  MetaString(*object, "name");
  LabelsOf(*object);
  OwnerReferencesOf(*object);
  ControllerOf(*object);
  IsBeingDeleted(*object);
  StringAt(*object, "status.phase");
  StringAt(*object, "metadata.name");
  FieldOrNull(*object, "spec");
  ArrayOrEmpty(*object, "items");

  // EncodeInto writes into an object; Decode of the result reads back what was written.
  using phalanx::fuzz::HasDuplicateKeys;
  if (HasDuplicateKeys(*object) || HasDuplicateKeys(FieldOrNull(*object, "metadata"))) return 0;
  Json copy = object->is_object() ? *object : Json::object();
  meta.EncodeInto(copy);
  const ObjectMeta again = ObjectMeta::Decode(copy);
  PHALANX_FUZZ_CHECK(again.name == meta.name);
  PHALANX_FUZZ_CHECK(again.namespace_ == meta.namespace_);
  PHALANX_FUZZ_CHECK(again.uid == meta.uid);
  PHALANX_FUZZ_CHECK(again.resource_version == meta.resource_version);
  PHALANX_FUZZ_CHECK(again.generation == meta.generation);
  PHALANX_FUZZ_CHECK(again.labels == meta.labels);
  PHALANX_FUZZ_CHECK(again.annotations == meta.annotations);
  PHALANX_FUZZ_CHECK(again.finalizers == meta.finalizers);
  PHALANX_FUZZ_CHECK(again.owner_references.size() == meta.owner_references.size());
  return 0;
}
