// Small helpers the whole-workload benchmark drivers share: medians of runs where a failed run
// is negative, whole-file reads, a process's resident memory, `--only` subsets, number cells
// for the JSON and the table, starting a Phalanx binary until its `ready` line and stopping it,
// and applying the TrainingJob CRD. Header-only.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/kube/client.h"
#include "common/kube/crd_established.h"
#include "common/kube/object_meta.h"
#include "common/process/subprocess.h"
#include "operator/api/yaml_json.h"

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

// Starts `argv` (stderr to `log`) and waits up to 60 s for its `ready ...` line, which goes to
// `ready_line` if given; nullptr (with a message naming the log) if it never comes.
inline std::unique_ptr<process::Subprocess> StartUntilReady(std::vector<std::string> argv,
                                                            const std::string& log,
                                                            std::string* ready_line = nullptr) {
  process::SubprocessOptions options;
  options.argv = std::move(argv);
  options.stderr_path = log;
  absl::StatusOr<std::unique_ptr<process::Subprocess>> p = process::Subprocess::Start(options);
  std::optional<std::string> ready;
  if (p.ok()) {
    ready = (*p)->WaitForLine([](const std::string& l) { return absl::StartsWith(l, "ready "); },
                              absl::Seconds(60));
  }
  if (!ready.has_value()) {
    std::fprintf(stderr, "bench: %s did not start (log: %s)\n", options.argv[0].c_str(),
                 log.c_str());
    return nullptr;
  }
  if (ready_line != nullptr) *ready_line = *ready;
  return *std::move(p);
}

// SIGINT (SIGTERM works too for every Phalanx binary), then SIGKILL if it lingers.
inline void StopProcess(std::unique_ptr<process::Subprocess>& p) {
  if (p == nullptr) return;
  p->Signal(SIGINT);
  if (!p->Wait(absl::Seconds(20)).has_value()) {
    p->Signal(SIGKILL);
    p->Wait(absl::Seconds(5));
  }
  p.reset();
}

// Applies crds/trainingjobs.phalanx.dev.yaml from `source_dir`; false (with a message) if not.
inline bool ApplyTrainingJobCrd(kube::Client& client, const std::string& source_dir) {
  absl::StatusOr<kube::Json> crd =
      op::YamlToJson(ReadFile(source_dir + "/crds/trainingjobs.phalanx.dev.yaml"));
  if (!crd.ok() ||
      !client.Create({"apiextensions.k8s.io", "v1", "customresourcedefinitions", false}, "", *crd)
           .ok()) {
    std::fprintf(stderr,
                 "bench: could not apply the CRD (run from the source directory or pass "
                 "--source_dir)\n");
    return false;
  }
  // A real API server serves the resource once the CRD is Established (the built-in one at once).
  if (absl::Status s =
          kube::WaitForCrdEstablished(client, "trainingjobs.phalanx.dev", absl::Seconds(60));
      !s.ok()) {
    std::fprintf(stderr, "bench: %s\n", std::string(s.message()).c_str());
    return false;
  }
  return true;
}

}  // namespace phalanx::bench
