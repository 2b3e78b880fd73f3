// Small helpers the whole-workload benchmark drivers that run the operator share: starting a
// Phalanx binary until its `ready` line and stopping it, and applying the TrainingJob CRD (the
// measuring helpers are measure_util.h's). Header-only.
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
#include "bench/measure_util.h"
#include "common/kube/client.h"
#include "common/kube/crd_established.h"
#include "common/kube/object_meta.h"
#include "common/process/subprocess.h"
#include "operator/api/yaml_json.h"

namespace phalanx::bench {

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
