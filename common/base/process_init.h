// InitProcess: process-wide settings every Phalanx binary applies first thing in main().
#pragma once

#include <string_view>

namespace phalanx::base {

// Names the log component and turns off absl::Mutex deadlock detection. Debian's abseil is
// built with detection on; it tracks every mutex in a global graph, which cost ~10% of the
// coordinator's CPU under load. Tests keep it on (they never call this).
void InitProcess(std::string_view log_component);

}  // namespace phalanx::base
