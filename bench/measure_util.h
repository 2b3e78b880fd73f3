// Measuring helpers every benchmark driver shares: medians of runs where a failed run is
// negative, whole-file reads, a process's resident memory and CPU time, `--only` subsets, and
// number cells for the JSON and the table. Header-only; no dependency beyond absl.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

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

// Whether `name` is in the comma-separated `--only` list (an empty list selects everything).
inline bool Wanted(const std::string& only, absl::string_view name) {
  if (only.empty()) return true;
  for (absl::string_view w : absl::StrSplit(only, ',')) {
    if (w == name) return true;
  }
  return false;
}

// `decimals` digits after the point; JSON null / "failed" for a measurement that failed.
inline std::string JsonNumber(double v, int decimals) {
  return v < 0 ? std::string("null") : absl::StrFormat("%.*f", decimals, v);
}
inline std::string TableCell(double v, int decimals) {
  return v < 0 ? std::string("failed") : absl::StrFormat("%.*f", decimals, v);
}

// Now, as the hosts' output lines carry it (t_us=).
inline int64_t NowMicros() { return absl::ToUnixMicros(absl::Now()); }

// User + system CPU seconds a process has used.
inline double CpuSeconds(pid_t pid) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t end = stat.rfind(')');
  if (end == std::string::npos) return kFailed;
  std::vector<std::string> f = absl::StrSplit(stat.substr(end + 2), ' ');
  int64_t utime = 0, stime = 0;
  // Fields after the command: state is field 3 of the file, utime 14 and stime 15.
  if (f.size() < 13 || !absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime)) {
    return kFailed;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace phalanx::bench
