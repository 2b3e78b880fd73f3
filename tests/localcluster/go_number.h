// Numbers printed the way the Go API server prints them (its 422 messages and Table cells),
// so kubectl users see the same text as against a real cluster. Pure.
#pragma once

#include <string>

namespace phalanx::localcluster {

// Go's %v for a float64: the shortest digits that read back as the same number, without an
// exponent for whole numbers ("10", not "1e+01").
std::string GoFloatString(double d);

}  // namespace phalanx::localcluster
