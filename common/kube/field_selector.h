// FieldSelector: Kubernetes field selector strings ("metadata.name=p1,spec.nodeName!=n2",
// "involvedObject.uid==u") matched against a JSON object by dotted path. A missing field reads
// as "" (as kube-apiserver does); numbers and booleans compare by their JSON text. Real API
// servers accept only a per-kind list of fields; this matcher accepts any path, so the local
// cluster is more permissive than a real one there. Immutable after Parse; thread-safe.
#pragma once

#include <cpprest/json.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace phalanx::kube {

class FieldSelector {
 public:
  // The empty string selects everything. InvalidArgument naming the bad term otherwise.
  static absl::StatusOr<FieldSelector> Parse(const std::string& text);

  bool Matches(const web::json::value& object) const;
  bool empty() const { return terms_.empty(); }

  // The value at a dotted path ("" when absent), as the selector compares it.
  static std::string FieldValue(const web::json::value& object, const std::string& path);

 private:
  struct Term {
    std::string path;
    bool equals;
    std::string value;
  };
  std::vector<Term> terms_;
};

}  // namespace phalanx::kube
