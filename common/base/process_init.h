// InitProcess: process-wide settings every Phalanx binary applies first thing in main(), before
// absl::ParseCommandLine (it sets what `--version` prints). Version/Revision: the release this
// binary is (CMake's PROJECT_VERSION) and the git revision it was configured from. All of it is
// called from one thread at start-up; the accessors are thread-safe (constants).
#pragma once

#include <string>
#include <string_view>

namespace phalanx::base {

// Names the log component, turns off absl::Mutex deadlock detection and makes absl's built-in
// `--version` flag print VersionLine(program). Deadlock detection: Debian's abseil is built with
// it on; it tracks every mutex in a global graph, which cost ~10% of the coordinator's CPU under
// load. Tests keep it on (they never call this). Must run before absl::ParseCommandLine, which
// handles `--version` (prints and exits 0).
void InitProcess(std::string_view log_component, std::string_view program = "phalanx");

// "0.1.0": the project version; images and the chart's appVersion use it as their tag.
std::string_view Version();
// The short git revision the build was configured from, or "unknown" outside a git checkout.
std::string_view Revision();
// "<program> <version> (<revision>)", e.g. "phalanx-operator 0.1.0 (2e32cff1a2b3)".
std::string VersionLine(std::string_view program);

}  // namespace phalanx::base
