// ObjectFilter: a label selector and a field selector together, as list and watch requests
// carry them. Immutable after Parse; thread-safe.
#pragma once

#include <cpprest/json.h>

#include <string>

#include "absl/status/statusor.h"
#include "common/kube/field_selector.h"
#include "common/kube/label_selector.h"

namespace phalanx::kube {

struct ObjectFilter {
  LabelSelector labels;
  FieldSelector fields;

  // InvalidArgument naming the bad selector term.
  static absl::StatusOr<ObjectFilter> Parse(const std::string& label_selector,
                                            const std::string& field_selector);
  bool Matches(const web::json::value& object) const;
};

}  // namespace phalanx::kube
