#include "tests/localcluster/go_number.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace phalanx::localcluster {

std::string GoFloatString(double d) {
  if (!std::isfinite(d)) return absl::StrCat(d);
  if (d == std::trunc(d) && std::fabs(d) < 1e21) return absl::StrFormat("%.0f", d);
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  return buf;
}

}  // namespace phalanx::localcluster
