// Schema validation for custom resources: what kube-apiserver does with a CRD version's
// openAPIV3Schema when a custom resource is created or updated, so the local cluster rejects
// (HTTP 422) the same objects a real cluster would and fills in the same defaults.
//
// Per node, in the apiserver's order: non-nullable nulls are dropped, `default`s are applied to
// absent properties, unknown fields are pruned (structural schemas), then values are validated.
// Supported keywords: type, nullable, properties, required, additionalProperties (schema, true or
// false), items, minimum/maximum (+ boolean exclusiveMinimum/exclusiveMaximum), minLength/
// maxLength, minItems/maxItems, enum, pattern, default, x-kubernetes-preserve-unknown-fields,
// x-kubernetes-int-or-string and x-kubernetes-embedded-resource.
// `pattern` is matched with std::regex (ECMAScript) where the apiserver uses RE2; the common
// subset (anchors, classes, quantifiers, groups) behaves the same.
// Deliberately not supported: `format` (accepted, not checked), allOf/anyOf/oneOf/not, and
// x-kubernetes-validations (CEL rules are left to real API servers). At the top level
// apiVersion, kind and metadata are never pruned or validated here; the HTTP layer owns them.
//
// Used by the local cluster's HTTP layer. Pure functions; thread-safe. Never throws: a schema
// that is not a JSON object is "no constraints", and an invalid `pattern` is reported as a
// FieldError rather than failing the call.
#pragma once

#include <cpprest/json.h>

#include <string>
#include <vector>

#include "common/kube/json.h"

namespace phalanx::localcluster {

using kube::Json;

// One problem, shaped like a Kubernetes StatusCause.
struct FieldError {
  // "FieldValueRequired", "FieldValueInvalid", "FieldValueNotSupported",
  // "FieldValueTypeInvalid", and, as the apiserver uses them for maxLength/maxItems,
  // "FieldValueTooLong" and "FieldValueTooMany".
  std::string reason;
  // The JSON path as Kubernetes writes it: "spec.replicas", "spec.tasks[2].name",
  // "spec.labels[app]" (a map key). Empty for the object itself.
  std::string field;
  // The full human message as the apiserver words it, e.g.
  // "Invalid value: 0: spec.replicas in body should be greater than or equal to 1".
  std::string message;

  bool operator==(const FieldError&) const = default;
};

// Applies `default`s from `schema` (an openAPIV3Schema JSON object) into `object` in place
// (defaults apply to absent properties of objects that are present, recursively, including
// inside arrays' items and additionalProperties), prunes unknown fields, then validates and
// returns every problem found (empty = valid).
std::vector<FieldError> ValidateAndDefault(const Json& schema, Json& object);
// The same, also reporting the paths of the fields pruning removed ("spec.foo",
// "spec.tasks[0].bar"): what kube-apiserver's strict field validation calls unknown fields.
std::vector<FieldError> ValidateAndDefault(const Json& schema, Json& object,
                                           std::vector<std::string>* pruned);

// The Kubernetes Status object (HTTP 422) for an invalid object:
// {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
//  "message":"<Kind>.<group> \"<name>\" is invalid: [<field>: <message>, ...]",
//  "reason":"Invalid","details":{"name":..,"group":..,"kind":..,"causes":[{"reason":..,
//  "message":..,"field":..}]},"code":422}
// As the apiserver writes it: no brackets around exactly one error, identical messages are
// listed once, an empty group is omitted (core kinds read `Pod "p"`), and so are empty fields.
Json InvalidStatus(const std::string& kind, const std::string& group, const std::string& name,
                   const std::vector<FieldError>& errors);

}  // namespace phalanx::localcluster
