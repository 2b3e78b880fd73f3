#include "tests/localcluster/container_launch.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/kube/object_meta.h"

namespace phalanx::localcluster {
namespace {

using kube::MetaString;
using kube::StringAt;

constexpr char kLocalIp[] = "127.0.0.1";

using kube::FieldOrNull;

using kube::ArrayOrEmpty;

std::vector<std::string> Strings(const Json& array) {
  std::vector<std::string> out;
  if (!array.is_array()) return out;
  for (const Json& item : array.as_array()) {
    if (item.is_string()) out.push_back(item.as_string());
  }
  return out;
}

// The downward API's fieldRef paths (those pods use for identity).
absl::StatusOr<std::string> FieldRef(const Json& pod, const std::string& path,
                                     const std::string& host_ip) {
  if (path == "status.podIP" || path == "status.podIPs") return std::string(kLocalIp);
  if (path == "status.hostIP" || path == "status.hostIPs") return host_ip;
  for (const char* field : {"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
                            "spec.serviceAccountName"}) {
    if (path == field) return StringAt(pod, path);
  }
  for (const char* map : {"labels", "annotations"}) {
    const std::string prefix = absl::StrCat("metadata.", map, "['");
    if (path.rfind(prefix, 0) == 0 && path.size() > prefix.size() + 2 &&
        path.substr(path.size() - 2) == "']") {
      const Json& values = FieldOrNull(FieldOrNull(pod, "metadata"), map);
      const std::string key = path.substr(prefix.size(), path.size() - prefix.size() - 2);
      return values.is_object() && values.has_field(key) && values.at(key).is_string()
                 ? values.at(key).as_string()
                 : "";
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported fieldRef fieldPath \"", path, "\""));
}

// Finds a program as execvp would, so pods may name "python3" rather than a full path.
std::optional<std::string> LookPath(const std::string& program, const std::string& path_var) {
  if (program.find('/') != std::string::npos) return program;
  for (absl::string_view dir : absl::StrSplit(path_var, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", program);
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec) && access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string ExpandKubeVars(const std::string& text, const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$' || i + 1 == text.size()) {
      out += text[i];
    } else if (text[i + 1] == '$') {
      out += '$';
      ++i;
    } else if (size_t close = text.find(')', i); text[i + 1] == '(' && close != std::string::npos) {
      auto it = env.find(text.substr(i + 2, close - i - 2));
      out += it != env.end() ? it->second : text.substr(i, close - i + 1);
      i = close;
    } else {
      out += '$';
    }
  }
  return out;
}

namespace {

// `value` with a leading `mount_path` (the whole of it, or up to a '/') replaced by `dir`.
std::string UnderMount(const std::string& value, const std::string& mount_path,
                       const std::string& dir) {
  if (!absl::StartsWith(value, mount_path)) return value;
  if (value.size() > mount_path.size() && value[mount_path.size()] != '/') return value;
  return dir + value.substr(mount_path.size());
}

// Writes the Secret volumes `container` mounts under `volume_dir`; returns (mountPath, dir).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> WriteSecretVolumes(
    const Json& pod, const Json& container, const SecretLookup& secret_value,
    const std::string& volume_dir) {
  std::vector<std::pair<std::string, std::string>> mounts;
  const Json& volumes = ArrayOrEmpty(FieldOrNull(pod, "spec"), "volumes");
  for (const Json& mount : ArrayOrEmpty(container, "volumeMounts").as_array()) {
    const std::string volume_name = StringAt(mount, "name");
    const Json* volume = nullptr;
    for (const Json& v : volumes.as_array()) {
      if (StringAt(v, "name") == volume_name) volume = &v;
    }
    if (volume == nullptr || FieldOrNull(*volume, "secret").is_null()) continue;  // not modelled
    const std::string secret = StringAt(*volume, "secret.secretName");
    const Json& items = ArrayOrEmpty(FieldOrNull(*volume, "secret"), "items");
    if (volume_dir.empty() || items.size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "volume ", volume_name, ": the local cluster mounts a Secret only with items"));
    }
    const std::string dir = absl::StrCat(volume_dir, "/", volume_name);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", ec.message()));
    for (const Json& item : items.as_array()) {
      const std::string key = StringAt(item, "key");
      const std::string path = StringAt(item, "path");
      std::optional<std::string> value =
          secret_value ? secret_value(secret, key) : std::optional<std::string>();
      // An optional Secret volume leaves out the keys the Secret lacks, as the kubelet does.
      const Json& optional = FieldOrNull(FieldOrNull(*volume, "secret"), "optional");
      if (!value.has_value() && optional.is_boolean() && optional.as_bool()) continue;
      if (!value.has_value() || path.empty() || path.find("..") != std::string::npos) {
        // FailedPrecondition: the kubelet keeps the pod waiting and retries (FailedMount).
        return absl::FailedPreconditionError(absl::StrCat("volume ", volume_name, ": secret \"",
                                                          secret, "\" has no key \"", key, "\""));
      }
      const std::string file = absl::StrCat(dir, "/", path);
      std::ofstream out(file, std::ios::trunc);
      out << *value;
      out.close();
      if (!out) return absl::InternalError(absl::StrCat("cannot write ", file));
      std::filesystem::permissions(file, std::filesystem::perms::owner_read, ec);
    }
    mounts.emplace_back(StringAt(mount, "mountPath"), dir);
  }
  return mounts;
}

}  // namespace

absl::StatusOr<process::SubprocessOptions> ContainerLaunchOptions(
    const Json& pod, const std::string& log_path,
    const std::map<std::string, std::string>& extra_env, const SecretLookup& secret_value,
    const std::string& volume_dir, const std::string& host_ip) {
  const Json& containers = FieldOrNull(FieldOrNull(pod, "spec"), "containers");
  if (!containers.is_array() || containers.size() == 0) {
    return absl::InvalidArgumentError("pod has no containers");
  }
  const Json& container = containers.at(0);
  std::map<std::string, std::string> env = extra_env;
  env["HOSTNAME"] = MetaString(pod, "name");
  for (const Json& var : ArrayOrEmpty(container, "env").as_array()) {
    const std::string name = StringAt(var, "name");
    if (name.empty()) continue;
    if (FieldOrNull(var, "value").is_string()) {
      env[name] = ExpandKubeVars(var.at("value").as_string(), env);
    } else if (const std::string path = StringAt(var, "valueFrom.fieldRef.fieldPath");
               !path.empty()) {
      absl::StatusOr<std::string> value = FieldRef(pod, path, host_ip);
      if (!value.ok()) return value.status();
      env[name] = *value;
    } else if (const std::string secret = StringAt(var, "valueFrom.secretKeyRef.name");
               !secret.empty()) {
      const std::string key = StringAt(var, "valueFrom.secretKeyRef.key");
      std::optional<std::string> value =
          secret_value ? secret_value(secret, key) : std::optional<std::string>();
      const Json& optional =
          FieldOrNull(FieldOrNull(FieldOrNull(var, "valueFrom"), "secretKeyRef"), "optional");
      if (value.has_value()) {
        env[name] = *value;
      } else if (!(optional.is_boolean() && optional.as_bool())) {
        // FailedPrecondition: the kubelet keeps the pod waiting (CreateContainerConfigError).
        return absl::FailedPreconditionError(
            absl::StrCat("env ", name, ": secret \"", secret, "\" has no key \"", key, "\""));
      }
    } else if (!FieldOrNull(var, "valueFrom").is_null()) {
      continue;  // config maps and resource fields are not modelled
    } else {
      env[name] = "";
    }
  }
  std::vector<std::string> argv = Strings(FieldOrNull(container, "command"));
  if (argv.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "container \"", StringAt(container, "name"),
        "\" has no command: the local cluster runs spec.containers[0].command and ignores the "
        "image"));
  }
  for (std::string& arg : Strings(FieldOrNull(container, "args"))) argv.push_back(std::move(arg));
  for (std::string& arg : argv) arg = ExpandKubeVars(arg, env);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> mounts =
      WriteSecretVolumes(pod, container, secret_value, volume_dir);
  if (!mounts.ok()) return mounts.status();
  for (const auto& [mount_path, dir] : *mounts) {
    for (auto& [name, value] : env) value = UnderMount(value, mount_path, dir);
    for (std::string& arg : argv) {
      // "--flag=/mount/path" as well as "/mount/path".
      const size_t eq = arg.find('=');
      if (eq != std::string::npos && absl::StartsWith(arg, "-")) {
        arg = arg.substr(0, eq + 1) + UnderMount(arg.substr(eq + 1), mount_path, dir);
      } else {
        arg = UnderMount(arg, mount_path, dir);
      }
    }
  }
  const char* parent_path = std::getenv("PATH");
  auto path_it = env.find("PATH");
  const std::optional<std::string> program =
      LookPath(argv[0], path_it != env.end() ? path_it->second : (parent_path ? parent_path : ""));
  if (!program.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("exec: \"", argv[0], "\": executable file not found in $PATH"));
  }
  argv[0] = *program;
  const std::string working_dir = StringAt(container, "workingDir");
  std::error_code ec;
  if (!working_dir.empty() && !std::filesystem::is_directory(working_dir, ec)) {
    return absl::NotFoundError(absl::StrCat("workingDir \"", working_dir, "\" is not a directory"));
  }
  process::SubprocessOptions options;
  options.argv = std::move(argv);
  options.env = std::move(env);
  options.stdout_path = log_path;
  options.working_dir = working_dir;
  options.kill_group_on_exit = true;  // a container's processes end with it
  return options;
}

absl::Status CheckImageReference(const std::string& image) {
  if (image.empty()) return absl::OkStatus();
  // github.com/distribution/reference's grammar (ReferenceRegexp), without IPv6 hosts.
  static const std::regex kReference(
      R"(^(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|)"
      R"([a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?/)?)"
      R"([a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
      R"((?::[\w][\w.-]{0,127})?)"
      R"((?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$)");
  const std::string name = image.substr(0, image.find_first_of(":@"));
  if (image.size() <= 4096 && name.size() <= 255 && std::regex_match(image, kReference)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("Failed to apply default image tag \"", image,
                                                 "\": couldn't parse image reference \"", image,
                                                 "\": invalid reference format"));
}

}  // namespace phalanx::localcluster
