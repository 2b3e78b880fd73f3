// LabelSelector: Kubernetes label selector strings ("app=x,tier!=db,env in (a,b),!legacy,track")
// parsed once and matched against label maps. Used for list/watch filtering in the local
// cluster and client-side in informers. Immutable after Parse; thread-safe.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace phalanx::kube {

class LabelSelector {
 public:
  // The empty string selects everything. InvalidArgument naming the bad term otherwise.
  static absl::StatusOr<LabelSelector> Parse(const std::string& text);

  bool Matches(const std::map<std::string, std::string>& labels) const;
  bool empty() const { return requirements_.empty(); }

 private:
  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kNotExists };
  struct Requirement {
    std::string key;
    Op op;
    std::set<std::string> values;
  };
  std::vector<Requirement> requirements_;
};

}  // namespace phalanx::kube
