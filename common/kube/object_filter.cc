#include "common/kube/object_filter.h"

#include "common/base/status_macros.h"
#include "common/kube/object_meta.h"

namespace phalanx::kube {

absl::StatusOr<ObjectFilter> ObjectFilter::Parse(const std::string& label_selector,
                                                 const std::string& field_selector) {
  ObjectFilter filter;
  ASSIGN_OR_RETURN(filter.labels, LabelSelector::Parse(label_selector));
  ASSIGN_OR_RETURN(filter.fields, FieldSelector::Parse(field_selector));
  return filter;
}

bool ObjectFilter::Matches(const web::json::value& object) const {
  return fields.Matches(object) && labels.Matches(LabelsOf(object));
}

}  // namespace phalanx::kube
