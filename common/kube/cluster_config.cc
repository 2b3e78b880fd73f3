#include "common/kube/cluster_config.h"

#include <yaml-cpp/yaml.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/env_and_files.h"

namespace phalanx::kube {
namespace {

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("kubeconfig: ", what));
}

// The file's contents; NotFound naming the field that referenced it.
absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& field) {
  absl::StatusOr<std::string> text = base::ReadFileToString(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat(field, ": ", text.status().message()));
  return text;
}

std::string Resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || path.front() == '/' || base_dir.empty()) return path;
  return base_dir + "/" + path;
}

// A scalar string field, or empty when absent. InvalidArgument when present but not a scalar.
absl::StatusOr<std::string> Scalar(const YAML::Node& node, const std::string& key,
                                   const std::string& where) {
  const YAML::Node value = node[key];
  if (!value || value.IsNull()) return std::string();
  if (!value.IsScalar()) return Bad(absl::StrCat(where, ".", key, " must be a string"));
  return value.as<std::string>();
}

// Finds the entry of a named list (clusters, users, contexts) and returns its inner map.
absl::StatusOr<YAML::Node> Named(const YAML::Node& root, const std::string& list,
                                 const std::string& inner, const std::string& name) {
  const YAML::Node entries = root[list];
  if (!entries || !entries.IsSequence())
    return Bad(absl::StrCat("'", list, "' is missing or not a list"));
  for (const YAML::Node& entry : entries) {
    if (!entry.IsMap()) return Bad(absl::StrCat("an entry of '", list, "' is not a map"));
    const YAML::Node n = entry["name"];
    if (n && n.IsScalar() && n.as<std::string>() == name) {
      const YAML::Node body = entry[inner];
      if (!body || !body.IsMap()) {
        return Bad(absl::StrCat(list, "[name=", name, "].", inner, " is missing or not a map"));
      }
      return body;
    }
  }
  return Bad(absl::StrCat("no entry named '", name, "' in '", list, "'"));
}

// Inline base64 data (`field-data`) or a file (`field`), as PEM/bytes.
absl::StatusOr<std::string> DataOrFile(const YAML::Node& node, const std::string& field,
                                       const std::string& where, const std::string& base_dir) {
  absl::StatusOr<std::string> data = Scalar(node, field + "-data", where);
  if (!data.ok()) return data.status();
  if (!data->empty()) {
    std::string decoded;
    if (!absl::Base64Unescape(*data, &decoded)) {
      return Bad(absl::StrCat(where, ".", field, "-data is not base64"));
    }
    return decoded;
  }
  absl::StatusOr<std::string> path = Scalar(node, field, where);
  if (!path.ok()) return path.status();
  if (path->empty()) return std::string();
  return ReadFile(Resolve(*path, base_dir), absl::StrCat(where, ".", field));
}

absl::StatusOr<ClusterConfig> Parse(const YAML::Node& root, const std::string& base_dir,
                                    const std::string& context_override) {
  if (!root.IsMap()) return Bad("the document is not a YAML map");
  ClusterConfig config;
  config.context = context_override;
  if (config.context.empty()) {
    absl::StatusOr<std::string> current = Scalar(root, "current-context", "");
    if (!current.ok()) return current.status();
    config.context = *current;
  }
  if (config.context.empty()) return Bad("no current-context set and no context given");

  absl::StatusOr<YAML::Node> context = Named(root, "contexts", "context", config.context);
  if (!context.ok()) return context.status();
  const std::string context_where = absl::StrCat("contexts[name=", config.context, "].context");
  absl::StatusOr<std::string> cluster_name = Scalar(*context, "cluster", context_where);
  if (!cluster_name.ok()) return cluster_name.status();
  if (cluster_name->empty()) return Bad(context_where + ".cluster is missing");
  absl::StatusOr<std::string> user_name = Scalar(*context, "user", context_where);
  if (!user_name.ok()) return user_name.status();
  absl::StatusOr<std::string> ns = Scalar(*context, "namespace", context_where);
  if (!ns.ok()) return ns.status();
  config.namespace_ = ns->empty() ? "default" : *ns;

  absl::StatusOr<YAML::Node> cluster = Named(root, "clusters", "cluster", *cluster_name);
  if (!cluster.ok()) return cluster.status();
  const std::string cluster_where = absl::StrCat("clusters[name=", *cluster_name, "].cluster");
  absl::StatusOr<std::string> server = Scalar(*cluster, "server", cluster_where);
  if (!server.ok()) return server.status();
  if (server->empty()) return Bad(cluster_where + ".server is missing");
  if (server->rfind("https://", 0) != 0 && server->rfind("http://", 0) != 0) {
    return Bad(absl::StrCat(cluster_where, ".server '", *server, "' is not an http(s) URL"));
  }
  config.server = std::string(absl::StripSuffix(*server, "/"));
  absl::StatusOr<std::string> ca =
      DataOrFile(*cluster, "certificate-authority", cluster_where, base_dir);
  if (!ca.ok()) return ca.status();
  config.ca_pem = *ca;
  absl::StatusOr<std::string> insecure =
      Scalar(*cluster, "insecure-skip-tls-verify", cluster_where);
  if (!insecure.ok()) return insecure.status();
  if (!insecure->empty() && *insecure != "true" && *insecure != "false") {
    return Bad(cluster_where + ".insecure-skip-tls-verify must be true or false");
  }
  config.insecure_skip_tls_verify = *insecure == "true";

  if (!user_name->empty()) {
    absl::StatusOr<YAML::Node> user = Named(root, "users", "user", *user_name);
    if (!user.ok()) return user.status();
    const std::string user_where = absl::StrCat("users[name=", *user_name, "].user");
    absl::StatusOr<std::string> token = Scalar(*user, "token", user_where);
    if (!token.ok()) return token.status();
    config.token = *token;
    absl::StatusOr<std::string> token_file = Scalar(*user, "tokenFile", user_where);
    if (!token_file.ok()) return token_file.status();
    config.token_file = Resolve(*token_file, base_dir);
    absl::StatusOr<std::string> cert =
        DataOrFile(*user, "client-certificate", user_where, base_dir);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = DataOrFile(*user, "client-key", user_where, base_dir);
    if (!key.ok()) return key.status();
    if (cert->empty() != key->empty()) {
      return Bad(user_where + " needs both a client certificate and a client key, or neither");
    }
    config.client_cert_pem = *cert;
    config.client_key_pem = *key;
  }
  return config;
}

}  // namespace

absl::StatusOr<ClusterConfig> ParseKubeconfig(const std::string& yaml, const std::string& base_dir,
                                              const std::string& context) {
  // yaml-cpp reports malformed input (and some type errors) with exceptions: convert here.
  try {
    return Parse(YAML::Load(yaml), base_dir, context);
  } catch (const YAML::Exception& e) {
    return Bad(absl::StrCat("not valid YAML: ", e.what()));
  }
}

absl::StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  absl::StatusOr<std::string> text = ReadFile(path, "kubeconfig");
  if (!text.ok()) return text.status();
  const size_t slash = path.rfind('/');
  return ParseKubeconfig(*text, slash == std::string::npos ? "." : path.substr(0, slash), context);
}

absl::StatusOr<ClusterConfig> InClusterConfig(const base::GetenvFn& getenv_in,
                                              const std::string& account_dir) {
  const base::GetenvFn getenv = getenv_in ? getenv_in : base::ProcessGetenv;
  std::optional<std::string> host = getenv("KUBERNETES_SERVICE_HOST");
  std::optional<std::string> port = getenv("KUBERNETES_SERVICE_PORT");
  if (!host || host->empty() || !port || port->empty()) {
    return absl::FailedPreconditionError(
        "not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST/PORT unset); pass --kubeconfig");
  }
  ClusterConfig config;
  // An IPv6 service address needs brackets in a URL.
  const std::string h = host->find(':') != std::string::npos ? "[" + *host + "]" : *host;
  config.server = absl::StrCat("https://", h, ":", *port);
  config.token_file = account_dir + "/token";
  absl::StatusOr<std::string> token = ReadFile(config.token_file, "service account token");
  if (!token.ok()) return token.status();
  absl::StatusOr<std::string> ca = ReadFile(account_dir + "/ca.crt", "service account CA");
  if (!ca.ok()) return ca.status();
  config.ca_pem = *ca;
  absl::StatusOr<std::string> ns =
      ReadFile(account_dir + "/namespace", "service account namespace");
  config.namespace_ = ns.ok() ? std::string(absl::StripAsciiWhitespace(*ns)) : "default";
  return config;
}

}  // namespace phalanx::kube
