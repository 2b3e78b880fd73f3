// Small helpers the whole-workload benchmark drivers share: medians of runs where a failed run
// is negative, whole-file reads, a process's resident memory. Header-only; not thread-safe
// concerns (pure functions).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace phalanx::bench {

// A measurement with no successful run.
inline constexpr double kFailed = -1;

// Median of the successful runs (negative values mark failed runs); kFailed if none succeeded.
inline double Median(std::vector<double> v) {
  std::erase_if(v, [](double x) { return x < 0; });
  std::sort(v.begin(), v.end());
  return v.empty() ? kFailed : v[v.size() / 2];
}

inline std::string ReadFile(const std::string& path) {
  std::stringstream s;
  s << std::ifstream(path).rdbuf();
  return s.str();
}

// Resident memory of a process, MiB (kFailed if unreadable).
inline double RssMib(pid_t pid) {
  std::istringstream status(ReadFile(absl::StrCat("/proc/", pid, "/status")));
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    if (absl::StartsWith(line, "VmRSS:") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(6), "kB")),
                         &kib)) {
      return static_cast<double>(kib) / 1024.0;
    }
  }
  return kFailed;
}

}  // namespace phalanx::bench
