// YAML → JSON for manifests: the CRD in crds/ and TrainingJob files in examples/ and
// tests/testdata/ are YAML, while the Kubernetes client and the codecs speak JSON. Used by tests
// and tools that load manifests. Pure; thread-safe; never throws (yaml-cpp's exceptions are
// caught).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "operator/api/types.h"

namespace phalanx::op {

// Converts the first YAML document in `yaml` to JSON. Mappings become objects (keys are the
// keys' text; a duplicate key is an error), sequences arrays, and plain scalars are typed as the
// YAML 1.2 core schema says: null/Null/NULL/~/empty → null, true/false (in the case forms the
// schema lists) → boolean, decimal/0o octal/0x hex integers → integers (a decimal beyond 64 bits
// becomes a float), decimals with a fraction or exponent → floats, anything else a string.
// Quoted and block scalars stay strings, as do scalars tagged !!str; !!int, !!float, !!bool and
// !!null are honoured.
// Aliases are expanded. An empty document is JSON null.
// Errors: InvalidArgument for a YAML syntax error (with line and column), a non-scalar mapping key,
// a duplicate key, .inf/.nan (JSON has no such numbers), a value that does not match its explicit
// tag, or nesting deeper than 512 levels.
absl::StatusOr<Json> YamlToJson(const std::string& yaml);

}  // namespace phalanx::op
