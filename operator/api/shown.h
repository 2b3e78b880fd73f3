// How the TrainingJob codec and validation show a value in an error message. Internal to
// operator/api.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "operator/api/types.h"

namespace phalanx::op {

// A JSON value as an error message shows it: serialized, cut short when long.
inline std::string Shown(const Json& v) {
  std::string s = v.serialize();
  if (s.size() > 64) s = absl::StrCat(s.substr(0, 61), "...");
  return s;
}

inline std::string Quoted(const std::string& s) { return absl::StrCat("\"", s, "\""); }

}  // namespace phalanx::op
