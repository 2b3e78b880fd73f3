#include "operator/api/validation.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/kube/object_meta.h"
#include "operator/api/shown.h"

namespace phalanx::op {
namespace {

using kube::FieldOrNull;

constexpr int kMaxReplicas = 10000;
constexpr int kMaxNprocPerNode = 64;
// Kept failed pods are API objects (and log files on the node) per task: a few are enough to
// read the last crashes, and the bound keeps a large job from piling up pods.
constexpr int kMaxKeepFailedPods = 20;
constexpr int kMaxExitCode = 255;

void CheckPositive(std::vector<std::string>& errors, const std::string& path, absl::Duration d) {
  if (d <= absl::ZeroDuration()) {
    errors.push_back(absl::StrCat(path, ": must be > 0, got ", absl::FormatDuration(d)));
  }
}

void CheckExitCodes(std::vector<std::string>& errors, const std::string& path,
                    const std::vector<int>& codes) {
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] < 0 || codes[i] > kMaxExitCode) {
      errors.push_back(absl::StrCat(path, "[", i, "]: must be between 0 and ", kMaxExitCode,
                                    ", got ", codes[i]));
    }
  }
}

// Every container needs a name and an image: the Pod API refuses a pod without an image
// ("spec.containers[0].image: Required value"), but only when each task pod is created.
void ValidateContainers(std::vector<std::string>& errors, const std::string& list_path,
                        const Json& containers) {
  for (size_t i = 0; i < containers.size(); ++i) {
    const std::string path = absl::StrCat(list_path, "[", i, "]");
    const Json& c = containers.at(i);
    if (!c.is_object()) {
      errors.push_back(absl::StrCat(path, ": must be an object, got ", Shown(c)));
      continue;
    }
    if (StringOr(c, "name").empty()) errors.push_back(absl::StrCat(path, ".name: required"));
    if (StringOr(c, "image").empty()) errors.push_back(absl::StrCat(path, ".image: required"));
  }
}

void ValidateReservedEnv(std::vector<std::string>& errors, const Json& containers) {
  for (size_t i = 0; i < containers.size(); ++i) {
    const Json& env = FieldOrNull(containers.at(i), "env");
    if (!env.is_array()) continue;
    for (size_t j = 0; j < env.size(); ++j) {
      const Json& name = FieldOrNull(env.at(j), "name");
      if (name.is_string() && IsReservedEnvName(name.as_string())) {
        errors.push_back(absl::StrCat("spec.template.spec.containers[", i, "].env[", j, "].name: ",
                                      name.as_string(), " is reserved: the operator sets it"));
      }
    }
  }
}

void ValidateTemplate(std::vector<std::string>& errors, const Json& tmpl) {
  if (tmpl.is_null()) {
    errors.push_back("spec.template: required");
    return;
  }
  if (!tmpl.is_object()) {
    errors.push_back(absl::StrCat("spec.template: must be an object, got ", Shown(tmpl)));
    return;
  }
  const Json& pod_spec = FieldOrNull(tmpl, "spec");
  if (!pod_spec.is_object()) {
    errors.push_back("spec.template.spec: required (a pod spec with containers)");
    return;
  }
  const Json& containers = FieldOrNull(pod_spec, "containers");
  if (!containers.is_array() || containers.size() == 0) {
    errors.push_back("spec.template.spec.containers: must list at least one container");
    return;
  }
  ValidateContainers(errors, "spec.template.spec.containers", containers);
  ValidateReservedEnv(errors, containers);
  const Json& init = FieldOrNull(pod_spec, "initContainers");
  if (init.is_array()) ValidateContainers(errors, "spec.template.spec.initContainers", init);
}

bool IsDns1035Label(const std::string& s) {
  if (s.empty() || s.size() > 63 || !absl::ascii_islower(s.front())) return false;
  if (s.back() == '-') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-';
  });
}

bool IsLabelName(absl::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!absl::ascii_isalnum(s.front()) || !absl::ascii_isalnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.';
  });
}

bool IsDns1123Subdomain(absl::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (absl::string_view part : absl::StrSplit(s, '.')) {
    if (part.empty() || part.front() == '-' || part.back() == '-') return false;
    if (!std::all_of(part.begin(), part.end(), [](char c) {
          return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-';
        })) {
      return false;
    }
  }
  return true;
}

// A label key as Kubernetes takes one: [prefix/]name, the prefix a DNS subdomain, the name at
// most 63 characters of letters, digits, '-', '_', '.', beginning and ending alphanumeric.
bool IsLabelKey(absl::string_view key) {
  const size_t slash = key.find('/');
  if (slash == absl::string_view::npos) return IsLabelName(key);
  return IsDns1123Subdomain(key.substr(0, slash)) && IsLabelName(key.substr(slash + 1));
}

}  // namespace

std::vector<std::string> ValidateName(const std::string& name) {
  std::vector<std::string> errors;
  if (name.size() > static_cast<size_t>(kMaxJobNameLength)) {
    errors.push_back(absl::StrCat("metadata.name: must be at most ", kMaxJobNameLength,
                                  " characters (the Service ", name,
                                  "-coordinator must fit in 63), got ", name.size()));
  }
  if (!IsDns1035Label(name.substr(0, 63))) {
    errors.push_back(absl::StrCat(
        "metadata.name: must start with a lowercase letter and contain only lowercase letters, "
        "digits and '-' (it names Services and host names), got ",
        Quoted(name)));
  }
  return errors;
}

bool IsReservedEnvName(const std::string& name) {
  return std::find_if(std::begin(kReservedEnvNames), std::end(kReservedEnvNames),
                      [&](const char* reserved) { return name == reserved; }) !=
         std::end(kReservedEnvNames);
}

std::vector<std::string> ValidateSpec(const TrainingJobSpec& spec) {
  std::vector<std::string> errors;
  if (spec.replicas < 1 || spec.replicas > kMaxReplicas) {
    errors.push_back(absl::StrCat("spec.replicas: must be between 1 and ", kMaxReplicas, ", got ",
                                  spec.replicas));
  }
  if (spec.nproc_per_node < 1 || spec.nproc_per_node > kMaxNprocPerNode) {
    errors.push_back(absl::StrCat("spec.nprocPerNode: must be between 1 and ", kMaxNprocPerNode,
                                  ", got ", spec.nproc_per_node));
  }
  ValidateTemplate(errors, spec.pod_template);
  if (spec.spares < 0 || spec.spares > spec.replicas) {
    errors.push_back(absl::StrCat("spec.spares: must be between 0 and spec.replicas (",
                                  spec.replicas, "), got ", spec.spares));
  } else if (spec.spares > 0 && spec.failure_policy.restart_scope == RestartScope::kJob) {
    // A spare takes one task over; a job-scope restart replaces every task.
    errors.push_back("spec.spares: needs spec.failurePolicy.restartScope Task");
  } else if (spec.spares > 0 && spec.nproc_per_node > 1) {
    // A spare is one process taking over one task; with several ranks per pod a pod's failure
    // is several tasks', and phalanx-launch's warm standby covers a rank's.
    errors.push_back(
        "spec.spares: needs spec.nprocPerNode 1 (phalanx-launch's warm standby "
        "replaces a rank within a pod)");
  }

  const FailurePolicy& fp = spec.failure_policy;
  if (fp.max_restarts < 0) {
    errors.push_back(
        absl::StrCat("spec.failurePolicy.maxRestarts: must be >= 0, got ", fp.max_restarts));
  }
  if (fp.keep_failed_pods < 0 || fp.keep_failed_pods > kMaxKeepFailedPods) {
    errors.push_back(absl::StrCat("spec.failurePolicy.keepFailedPods: must be between 0 and ",
                                  kMaxKeepFailedPods, ", got ", fp.keep_failed_pods));
  }
  CheckPositive(errors, "spec.failurePolicy.backoff.baseSeconds", fp.backoff.base);
  CheckPositive(errors, "spec.failurePolicy.backoff.maxSeconds", fp.backoff.max);
  if (fp.backoff.base > fp.backoff.max) {
    errors.push_back(absl::StrCat(
        "spec.failurePolicy.backoff.baseSeconds: must not exceed maxSeconds (",
        absl::FormatDuration(fp.backoff.max), "), got ", absl::FormatDuration(fp.backoff.base)));
  }
  CheckExitCodes(errors, "spec.failurePolicy.fatalExitCodes", fp.fatal_exit_codes);
  CheckExitCodes(errors, "spec.failurePolicy.retryableExitCodes", fp.retryable_exit_codes);
  for (int code : fp.fatal_exit_codes) {
    if (std::find(fp.retryable_exit_codes.begin(), fp.retryable_exit_codes.end(), code) !=
        fp.retryable_exit_codes.end()) {
      errors.push_back(absl::StrCat("spec.failurePolicy.fatalExitCodes: exit code ", code,
                                    " is also listed in retryableExitCodes"));
    }
  }

  CheckPositive(errors, "spec.preemption.checkpointGraceSeconds", spec.preemption.checkpoint_grace);
  if (spec.active_deadline.has_value()) {
    CheckPositive(errors, "spec.activeDeadlineSeconds", *spec.active_deadline);
  }
  if (spec.gang_timeout.has_value()) {
    CheckPositive(errors, "spec.gang.timeoutSeconds", *spec.gang_timeout);
  }
  const PlacementSpec& placement = spec.placement;
  if (!placement.topology_key.empty() && !IsLabelKey(placement.topology_key)) {
    errors.push_back(
        absl::StrCat("spec.placement.topologyKey: must be a node label key ([prefix/]name, e.g. "
                     "topology.kubernetes.io/zone), got ",
                     Quoted(placement.topology_key)));
  }
  const Json& template_pod_affinity =
      FieldOrNull(FieldOrNull(FieldOrNull(spec.pod_template, "spec"), "affinity"), "podAffinity");
  if (!placement.topology_key.empty() &&
      kube::ArrayOrEmpty(template_pod_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
              .size() > 0) {
    errors.push_back(
        "spec.placement: cannot be combined with required pod affinity in "
        "spec.template.spec.affinity.podAffinity (Kubernetes counts a pod toward a pod's "
        "required affinity only if it matches every term, so the job's own term and the "
        "template's would never be met together); use preferred pod affinity there, or drop "
        "spec.placement");
  }
  if (placement.exclusive && placement.topology_key.empty()) {
    errors.push_back(
        "spec.placement.exclusive: needs spec.placement.topologyKey (exclusive of "
        "what domain?)");
  }
  // batch/v1 Job's bound: an int32 of seconds (about 68 years).
  if (spec.ttl_after_finished.has_value() &&
      (*spec.ttl_after_finished < absl::ZeroDuration() ||
       *spec.ttl_after_finished > absl::Seconds(std::numeric_limits<int32_t>::max()))) {
    errors.push_back(absl::StrCat("spec.ttlSecondsAfterFinished: must be between 0 and ",
                                  std::numeric_limits<int32_t>::max(), ", got ",
                                  absl::ToInt64Seconds(*spec.ttl_after_finished)));
  }
  const CoordinationSpec& c = spec.coordination;
  CheckPositive(errors, "spec.coordination.heartbeatIntervalSeconds", c.heartbeat_interval);
  CheckPositive(errors, "spec.coordination.heartbeatTimeoutSeconds", c.heartbeat_timeout);
  CheckPositive(errors, "spec.coordination.barrierTimeoutSeconds", c.barrier_timeout);
  CheckPositive(errors, "spec.coordination.shutdownTimeoutSeconds", c.shutdown_timeout);
  if (c.heartbeat_timeout <= c.heartbeat_interval) {
    errors.push_back(
        absl::StrCat("spec.coordination.heartbeatTimeoutSeconds: must be greater than "
                     "heartbeatIntervalSeconds (",
                     absl::FormatDuration(c.heartbeat_interval), "), got ",
                     absl::FormatDuration(c.heartbeat_timeout)));
  }
  return errors;
}

}  // namespace phalanx::op
