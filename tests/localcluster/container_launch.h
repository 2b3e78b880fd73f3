// How the local cluster's kubelet (kubelet.h) runs a pod's container as a process, as a
// container runtime would from the pod spec: argv is spec.containers[0].command + args (the
// image is ignored, so a pod must name its command), found on PATH as execvp would; the env is
// the kubelet's extra env, HOSTNAME (the pod name), then the container's env in order, with
// downward-API fieldRefs resolved and $(VAR) references expanded as Kubernetes does; the
// workingDir is kept; stdout and stderr go to one log file. The child leads its own process
// group and takes its group with it when it exits, like a container's processes.
// Pure apart from looking at the filesystem (PATH, workingDir); thread-safe.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/process/subprocess.h"
#include "tests/localcluster/store_types.h"

namespace phalanx::localcluster {

// Kubernetes' $(VAR) references in env values, command and args: a defined name expands,
// "$$" is a literal "$", anything else stays as written.
std::string ExpandKubeVars(const std::string& text, const std::map<std::string, std::string>& env);

// The process for `pod`'s first container, logging to `log_path`. InvalidArgument: no
// container, no command, or an unsupported fieldRef; NotFound: the program is not on PATH or
// workingDir is not a directory. The kubelet reports these as ContainerCannotRun.
// Env valueFrom.secretKeyRef is read through `secret_value` (secret name, key → value; nullopt
// when absent: InvalidArgument naming it, unless the ref is optional); config maps and resource
// fields are skipped.
// Secret volumes (with `items`) mounted by the container are written under `volume_dir` (one
// directory per volume, files mode 0400), and since a process cannot see the mountPath, every
// env value and argument that names a path under a mountPath is rewritten to the written
// directory: as close to a container's view as a plain process gets. Without `volume_dir`, or
// for a Secret volume without items, a Secret volume is InvalidArgument.
using SecretLookup =
    std::function<std::optional<std::string>(const std::string& secret, const std::string& key)>;
absl::StatusOr<process::SubprocessOptions> ContainerLaunchOptions(
    const Json& pod, const std::string& log_path,
    const std::map<std::string, std::string>& extra_env, const SecretLookup& secret_value = nullptr,
    const std::string& volume_dir = "", const std::string& host_ip = "127.0.0.1");

// Whether `image` parses as an image reference ([domain[:port]/]path[:tag][@digest], the
// grammar container runtimes use: lower-case path components, a tag of at most 128 word
// characters, dots and dashes). InvalidArgument, worded as a kubelet words InvalidImageName's
// message, when it does not. The image is never pulled here, so this is all a pod's image is
// checked for; an empty image (which the API server refuses) is not judged.
absl::Status CheckImageReference(const std::string& image);

}  // namespace phalanx::localcluster
