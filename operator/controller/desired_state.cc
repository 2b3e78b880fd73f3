#include "operator/controller/desired_state.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/auth/clique_ticket.h"
#include "common/auth/credentials.h"
#include "common/kube/object_meta.h"
#include "operator/api/codec.h"
#include "operator/api/validation.h"
#include "operator/controller/placement.h"
#include "operator/controller/task_credentials.h"

namespace phalanx::op {
namespace {

using kube::MetaString;

Json Str(const std::string& s) { return Json::string(s); }

Json Labels(const std::string& job, const std::string& role) {
  Json labels = Json::object();
  labels[kJobLabel] = Str(job);
  labels[kRoleLabel] = Str(role);
  return labels;
}

// metadata for a child of `job` named `name`.
Json ChildMeta(const Json& job, const std::string& name, Json labels) {
  Json meta = Json::object();
  meta["name"] = Str(name);
  meta["namespace"] = Str(MetaString(job, "namespace"));
  meta["labels"] = std::move(labels);
  meta["ownerReferences"] = Json::array({OwnerReferenceTo(job)});
  return meta;
}

Json EnvVar(const std::string& name, const std::string& value) {
  Json v = Json::object();
  v["name"] = Str(name);
  v["value"] = Str(value);
  return v;
}
// A variable from the downward API (valueFrom.fieldRef), e.g. status.hostIP.
Json EnvFieldRef(const std::string& name, const std::string& field_path) {
  Json v = Json::object();
  v["name"] = Str(name);
  v["valueFrom"] = Json::object();
  v["valueFrom"]["fieldRef"] = Json::object();
  v["valueFrom"]["fieldRef"]["fieldPath"] = Str(field_path);
  return v;
}

// A Secret volume `volume` holding keys of Secret `secret` as files ({key, file name}); an
// optional one starts without the keys the Secret lacks.
Json SecretVolume(const std::string& secret, const char* volume,
                  const std::vector<std::pair<std::string, std::string>>& files, bool optional) {
  Json items = Json::array();
  for (const auto& [key, path] : files) {
    Json item = Json::object();
    item["key"] = Str(key);
    item["path"] = Str(path);
    items[items.size()] = std::move(item);
  }
  Json v = Json::object();
  v["name"] = Str(volume);
  v["secret"] = Json::object();
  v["secret"]["secretName"] = Str(secret);
  v["secret"]["items"] = std::move(items);
  v["secret"]["defaultMode"] = Json::number(0444);  // the pods run as non-root
  if (optional) v["secret"]["optional"] = Json::boolean(true);
  return v;
}
Json TokenVolume(const std::string& job,
                 const std::vector<std::pair<std::string, std::string>>& files) {
  return SecretVolume(SecretName(job), "phalanx-token", files, /*optional=*/false);
}
Json ReadOnlyMount(const char* volume, const char* path) {
  Json mount = Json::object();
  mount["name"] = Str(volume);
  mount["mountPath"] = Str(path);
  mount["readOnly"] = Json::boolean(true);
  return mount;
}
Json TokenMount() { return ReadOnlyMount("phalanx-token", kTokenMountPath); }
// The job's TLS files a pod may hold (the coordinator's certificate and key, or the CA's
// certificate), at kTlsMountPath.
constexpr char kTlsVolume[] = "phalanx-tls";
// Appends `item` to the array at obj[field], replacing an element with the same "name" (ours
// win, as for env).
void MergeNamed(Json& obj, const char* field, const Json& item) {
  Json merged = Json::array();
  size_t n = 0;
  if (obj.has_field(field) && obj.at(field).is_array()) {
    for (const Json& e : obj.at(field).as_array()) {
      if (e.is_object() && e.has_field("name") && e.at("name") == item.at("name")) continue;
      merged[n++] = e;
    }
  }
  merged[n++] = item;
  obj[field] = merged;
}

std::string Seconds(absl::Duration d) { return absl::StrCat(absl::ToInt64Seconds(d), "s"); }

// Appends `extra` (the operator's variables) to a container's env. The container's own entry
// wins over a default of ours (a user's MASTER_ADDR or RANK); a reserved name (PHALANX_TASK_ID:
// a task would act as another) is always ours, and validation refuses it before it gets here.
void MergeEnv(Json& container, const std::vector<Json>& extra) {
  Json merged = Json::array();
  size_t n = 0;
  std::set<std::string> own;  // names the container sets itself and keeps
  if (container.has_field("env") && container.at("env").is_array()) {
    for (const Json& e : container.at("env").as_array()) {
      const Json& name = kube::FieldOrNull(e, "name");
      // A reserved name never gets here past validation; if it does, ours replaces it.
      if (name.is_string() && IsReservedEnvName(name.as_string())) continue;
      if (name.is_string()) own.insert(name.as_string());
      merged[n++] = e;
    }
  }
  for (const Json& x : extra) {
    if (!own.contains(x.at("name").as_string())) merged[n++] = x;
  }
  container["env"] = merged;
}

// The user's affinity (a core/v1 Affinity or null) with the coordinator's own rules merged in:
// no node in `avoid_nodes` (added to every required node selector term, as the terms are ORed),
// and preferably no node that runs one of job `job`'s task pods.
Json CoordinatorAffinity(const std::string& job, const Json& user,
                         const std::vector<std::string>& avoid_nodes) {
  Json affinity = user.is_object() ? user : Json::object();
  if (!avoid_nodes.empty()) {
    Json values = Json::array();
    for (const std::string& node : avoid_nodes) values[values.size()] = Str(node);
    Json not_in = Json::object();
    not_in["key"] = Str("kubernetes.io/hostname");
    not_in["operator"] = Str("NotIn");
    not_in["values"] = values;
    Json& node_affinity = affinity["nodeAffinity"];
    if (!node_affinity.is_object()) node_affinity = Json::object();
    Json& required = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"];
    if (!required.is_object()) required = Json::object();
    Json& terms = required["nodeSelectorTerms"];
    if (!terms.is_array() || terms.size() == 0) terms = Json::array({Json::object()});
    for (Json& term : terms.as_array()) {
      if (!term.is_object()) continue;
      Json& expressions = term["matchExpressions"];
      if (!expressions.is_array()) expressions = Json::array();
      expressions[expressions.size()] = not_in;
    }
  }
  Json term = Json::object();
  term["weight"] = Json::number(100);
  term["podAffinityTerm"] = Json::object();
  term["podAffinityTerm"]["labelSelector"] = Json::object();
  term["podAffinityTerm"]["labelSelector"]["matchLabels"] = Labels(job, "task");
  term["podAffinityTerm"]["topologyKey"] = Str("kubernetes.io/hostname");
  Json& anti = affinity["podAntiAffinity"];
  if (!anti.is_object()) anti = Json::object();
  Json& preferred = anti["preferredDuringSchedulingIgnoredDuringExecution"];
  if (!preferred.is_array()) preferred = Json::array();
  preferred[preferred.size()] = term;
  return affinity;
}

}  // namespace

std::string SecretName(const std::string& job) { return job + "-token"; }
std::string TaskCredentialKey(int index) { return absl::StrCat("task-", index); }
std::string CliqueTicketKey(int index) { return absl::StrCat("task-", index, "-clique"); }
std::string CoordinatorName(const std::string& job) { return job + "-coordinator"; }
std::string TasksServiceName(const std::string& job) { return job + "-tasks"; }
std::string TaskHostname(const std::string& job, int index) {
  return absl::StrCat(job, "-task-", index);
}
std::string TaskPodName(const std::string& job, int index, Incarnation incarnation) {
  return absl::StrCat(job, "-task-", index, "-", incarnation);
}

Json OwnerReferenceTo(const Json& job) {
  kube::OwnerReference ref;
  ref.api_version = absl::StrCat(kGroup, "/", kVersion);
  ref.kind = kKind;
  ref.name = MetaString(job, "name");
  ref.uid = MetaString(job, "uid");
  ref.controller = true;
  ref.block_owner_deletion = true;
  return ref.ToJson();
}

std::string CoordinatorTlsServerName(const Json& job) {
  return absl::StrCat(CoordinatorName(MetaString(job, "name")), ".", MetaString(job, "namespace"),
                      ".svc");
}

std::vector<std::string> CoordinatorTlsDnsNames(const Json& job) {
  const std::string service = CoordinatorName(MetaString(job, "name"));
  const std::string in_namespace = absl::StrCat(service, ".", MetaString(job, "namespace"));
  return {in_namespace + ".svc", in_namespace + ".svc.cluster.local", in_namespace, service};
}

Json DesiredSecret(const Json& job, const TrainingJobSpec& spec, const std::string& token,
                   const std::string& agent_clique_key, const JobTlsFiles* tls,
                   bool bound_credentials) {
  const std::string name = MetaString(job, "name");
  Json secret = Json::object();
  secret["apiVersion"] = Str("v1");
  secret["kind"] = Str("Secret");
  secret["metadata"] = ChildMeta(job, SecretName(name), Labels(name, "token"));
  secret["type"] = Str("Opaque");
  secret["stringData"] = Json::object();
  secret["stringData"][kTokenKey] = Str(token);
  // One credential for every spare pod of the job, so spec.spares may change on a running job
  // (the Secret is written once: ADR 0003). It may only wait for a task (credentials.h).
  secret["stringData"][kSpareCredentialKey] = Str(auth::SpareCredential(token, 0));
  for (int i = 0; i < spec.NumTasks(); ++i) {
    // Bound: the first pod's (incarnation 0); replacements get a Secret of their own
    // (task_credentials.h).
    const auto [lo, hi] = CredentialIncarnations(spec, 0);
    secret["stringData"][TaskCredentialKey(i)] =
        Str(bound_credentials ? auth::TaskCredential(token, i, lo, hi)
                              : auth::TaskCredential(token, i));
    if (!agent_clique_key.empty()) {
      secret["stringData"][CliqueTicketKey(i)] = Str(auth::CliqueTicket(
          agent_clique_key, MetaString(job, "namespace"), name, MetaString(job, "uid"), i));
    }
  }
  if (tls != nullptr) {
    secret["stringData"][kTlsCaKey] = Str(tls->ca_cert_pem);
    secret["stringData"][kTlsCertKey] = Str(tls->coordinator.cert_pem);
    secret["stringData"][kTlsPrivateKeyKey] = Str(tls->coordinator.key_pem);
  }
  return secret;
}

Json DesiredCoordinatorPod(const Json& job, const TrainingJobSpec& spec,
                           const CoordinatorPlacement& placement, const std::string& token,
                           const std::vector<std::string>& avoid_nodes) {
  const std::string name = MetaString(job, "name");
  const CoordinationSpec& c = spec.coordination;
  Json container = Json::object();
  container["name"] = Str("coordinator");
  container["image"] = Str(placement.image);
  Json command = Json::array();
  for (size_t i = 0; i < placement.command.size(); ++i) command[i] = Str(placement.command[i]);
  container["command"] = command;
  std::vector<std::string> args = {absl::StrCat("--listen=0.0.0.0:", placement.port),
                                   absl::StrCat("--metrics_listen=0.0.0.0:", placement.port + 1),
                                   absl::StrCat("--job=", name),
                                   absl::StrCat("--num_tasks=", spec.NumTasks()),
                                   "--heartbeat_interval=" + Seconds(c.heartbeat_interval),
                                   "--heartbeat_timeout=" + Seconds(c.heartbeat_timeout),
                                   "--barrier_timeout=" + Seconds(c.barrier_timeout),
                                   "--shutdown_timeout=" + Seconds(c.shutdown_timeout),
                                   absl::StrCat("--token_file=", kTokenFile),
                                   "--token_sha256=" + auth::Sha256Hex(token)};
  if (placement.tls) {
    args.push_back(absl::StrCat("--tls_cert_file=", kTlsCertFile));
    args.push_back(absl::StrCat("--tls_key_file=", kTlsPrivateKeyFile));
  }
  Json args_json = Json::array();
  for (size_t i = 0; i < args.size(); ++i) args_json[i] = Str(args[i]);
  container["args"] = args_json;
  container["volumeMounts"] = Json::array({TokenMount()});
  if (placement.tls) container["volumeMounts"][1] = ReadOnlyMount(kTlsVolume, kTlsMountPath);
  // A start-up refusal (a squatted token Secret, bad flags) is one stderr line: make it the
  // pod's termination message, which the job's status.coordinator shows.
  container["terminationMessagePolicy"] = Str("FallbackToLogsOnError");
  Json ports = Json::array();
  for (const auto& [port_name, port] :
       {std::pair<const char*, int>{"grpc", placement.port}, {"metrics", placement.port + 1}}) {
    Json p = Json::object();
    p["name"] = Str(port_name);
    p["containerPort"] = Json::number(port);
    ports[ports.size()] = p;
  }
  container["ports"] = ports;
  // Pod Security "restricted" (the strictest standard; a namespace may enforce it): non-root,
  // no privilege escalation, every capability dropped, the runtime's default seccomp profile.
  // The API server refuses the pod in such a namespace if any of it is missing.
  container["securityContext"] = Json::parse(
      R"({"runAsNonRoot":true,"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,
          "capabilities":{"drop":["ALL"]},"seccompProfile":{"type":"RuntimeDefault"}})");
  // Liveness through the standard gRPC health protocol on the gRPC port: the coordinator
  // answers it through its real server, so one that stopped accepting connections (the fd
  // exhaustion wedge of issue 16) fails it and is killed; with restartPolicy Never its pod then
  // fails and the operator recreates it (after its back-off, children.h). 3 misses 10 s apart
  // (a 5 s answer each): a loaded coordinator is not killed for one slow answer, a wedged one
  // is gone within ~40 s. The first check waits 10 s for start-up.
  // Under TLS the kubelet's gRPC probe, which speaks cleartext, cannot reach the gRPC port: the
  // probe is then /healthz on the metrics port (the coordinator's own loopback check of its
  // server behind it).
  container["livenessProbe"] = Json::parse(absl::StrCat(
      placement.tls ? absl::StrCat(R"({"httpGet":{"path":"/healthz","port":)", placement.port + 1)
                    : absl::StrCat(R"({"grpc":{"port":)", placement.port),
      R"(},"initialDelaySeconds":10,"periodSeconds":10,"timeoutSeconds":5,"failureThreshold":3})"));
  // Small guaranteed resources (requests = limits: QoS Guaranteed), so a busy node still
  // schedules it and, under memory pressure, evicts it last. The coordinator's memory is bounded
  // by design (per-job KV quota 64 MiB by default, capped barrier and session state: 2000
  // sessions measured 53 MiB), so 256 MiB is about 2x its worst case, and a leak or a runaway is
  // OOM-killed and recreated rather than starving the node. The CPU limit can throttle a
  // coordinator of a very large job (late heartbeats fail healthy tasks): such a job sets
  // spec.coordinator.resources, which replaces all of this.
  Json resources = Json::object();
  if (spec.coordinator.resources.is_object()) {
    resources = spec.coordinator.resources;
  } else {
    for (const char* kind : {"requests", "limits"}) {
      resources[kind] = Json::object();
      resources[kind]["cpu"] = Str(placement.cpu);
      resources[kind]["memory"] = Str(placement.memory);
    }
  }
  container["resources"] = resources;

  Json pod = Json::object();
  pod["apiVersion"] = Str("v1");
  pod["kind"] = Str("Pod");
  pod["metadata"] = ChildMeta(job, CoordinatorName(name), Labels(name, "coordinator"));
  pod["spec"] = Json::object();
  pod["spec"]["containers"] = Json::array({container});
  // The operator recreates a failed coordinator; the tasks reconnect and re-register.
  pod["spec"]["restartPolicy"] = Str("Never");
  pod["spec"]["automountServiceAccountToken"] = Json::boolean(false);
  pod["spec"]["volumes"] = Json::array({TokenVolume(name, {{kTokenKey, "token"}})});
  if (placement.tls) {
    pod["spec"]["volumes"][1] =
        SecretVolume(SecretName(name), kTlsVolume,
                     {{kTlsCertKey, kTlsCertKey}, {kTlsPrivateKeyKey, kTlsPrivateKeyKey}},
                     /*optional=*/false);
  }
  // The same at pod level, with a fixed non-root uid (the images' user, as in the chart): an
  // image whose user is a name, not a number, would otherwise fail runAsNonRoot at start.
  pod["spec"]["securityContext"] = Json::parse(
      R"({"runAsNonRoot":true,"runAsUser":65532,"runAsGroup":65532,
          "seccompProfile":{"type":"RuntimeDefault"}})");
  if (!spec.scheduler_name.empty()) pod["spec"]["schedulerName"] = Str(spec.scheduler_name);
  const CoordinatorSpec& user = spec.coordinator;
  const std::string& priority =
      user.priority_class_name.empty() ? spec.priority_class_name : user.priority_class_name;
  if (!priority.empty()) pod["spec"]["priorityClassName"] = Str(priority);
  if (user.node_selector.is_object()) pod["spec"]["nodeSelector"] = user.node_selector;
  if (user.tolerations.is_array()) pod["spec"]["tolerations"] = user.tolerations;
  if (!user.service_account_name.empty()) {
    pod["spec"]["serviceAccountName"] = Str(user.service_account_name);
  }
  if (!user.image_pull_secrets.empty()) {
    Json secrets = Json::array();
    for (const std::string& secret : user.image_pull_secrets) {
      Json ref = Json::object();
      ref["name"] = Str(secret);
      secrets[secrets.size()] = ref;
    }
    pod["spec"]["imagePullSecrets"] = secrets;
  }
  if (user.annotations.is_object() && user.annotations.size() > 0) {
    pod["metadata"]["annotations"] = user.annotations;
  }
  pod["spec"]["affinity"] = CoordinatorAffinity(name, user.affinity, avoid_nodes);
  return pod;
}

Json DesiredCoordinatorService(const Json& job, const CoordinatorPlacement& placement) {
  const std::string name = MetaString(job, "name");
  Json svc = Json::object();
  svc["apiVersion"] = Str("v1");
  svc["kind"] = Str("Service");
  svc["metadata"] = ChildMeta(job, CoordinatorName(name), Labels(name, "coordinator"));
  svc["spec"] = Json::object();
  svc["spec"]["selector"] = Labels(name, "coordinator");
  Json grpc = Json::object();
  grpc["name"] = Str("grpc");
  grpc["port"] = Json::number(placement.port);
  grpc["targetPort"] = Json::number(placement.port);
  Json metrics = Json::object();
  metrics["name"] = Str("metrics");
  metrics["port"] = Json::number(placement.port + 1);
  metrics["targetPort"] = Json::number(placement.port + 1);
  svc["spec"]["ports"] = Json::array({grpc, metrics});
  return svc;
}

Json DesiredTasksService(const Json& job) {
  const std::string name = MetaString(job, "name");
  Json svc = Json::object();
  svc["apiVersion"] = Str("v1");
  svc["kind"] = Str("Service");
  svc["metadata"] = ChildMeta(job, TasksServiceName(name), Labels(name, "task"));
  svc["spec"] = Json::object();
  svc["spec"]["clusterIP"] = Str("None");
  svc["spec"]["selector"] = Labels(name, "task");
  // Peers must resolve each other before they are Ready (rendezvous happens first).
  svc["spec"]["publishNotReadyAddresses"] = Json::boolean(true);
  return svc;
}

Json DesiredCoordinatorNetworkPolicy(const Json& job, const CoordinatorPlacement& placement,
                                     const NetworkPolicyOptions& options) {
  const std::string name = MetaString(job, "name");
  auto port = [](int number) {
    Json p = Json::object();
    p["protocol"] = Str("TCP");
    p["port"] = Json::number(number);
    return p;
  };
  Json job_pods = Json::object();
  job_pods["podSelector"] = Json::object();
  job_pods["podSelector"]["matchLabels"] = Json::object();
  job_pods["podSelector"]["matchLabels"][kJobLabel] = Str(name);
  Json operator_pods = Json::object();
  operator_pods["podSelector"] = Json::object();
  operator_pods["podSelector"]["matchLabels"] = Json::object();
  for (const auto& [k, v] : options.operator_pods) {
    operator_pods["podSelector"]["matchLabels"][k] = Str(v);
  }
  // Without a namespaceSelector a peer is looked for in the policy's own namespace only.
  operator_pods["namespaceSelector"] = Json::object();
  if (!options.operator_namespace.empty()) {
    operator_pods["namespaceSelector"]["matchLabels"] = Json::object();
    operator_pods["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] =
        Str(options.operator_namespace);
  }
  Json grpc = Json::object();
  grpc["from"] = Json::array({job_pods, operator_pods});
  grpc["ports"] = Json::array({port(placement.port)});
  Json ingress = Json::array({grpc});
  if (!options.metrics_from.empty()) {
    Json metrics = Json::object();
    metrics["ports"] = Json::array({port(placement.port + 1)});
    Json from = Json::object();
    from["namespaceSelector"] = Json::object();
    if (options.metrics_from != "*") {
      from["namespaceSelector"]["matchLabels"] = Json::object();
      from["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] =
          Str(options.metrics_from);
    }
    metrics["from"] = Json::array({from});
    ingress[1] = metrics;
  }
  Json policy = Json::object();
  policy["apiVersion"] = Str("networking.k8s.io/v1");
  policy["kind"] = Str("NetworkPolicy");
  policy["metadata"] = ChildMeta(job, CoordinatorName(name), Labels(name, "coordinator"));
  policy["spec"] = Json::object();
  policy["spec"]["podSelector"] = Json::object();
  policy["spec"]["podSelector"]["matchLabels"] = Labels(name, "coordinator");
  policy["spec"]["policyTypes"] = Json::array({Str("Ingress")});
  policy["spec"]["ingress"] = ingress;
  return policy;
}

std::string CoordinatorAddress(const Json& job, const CoordinatorPlacement& placement,
                               const std::string& coordinator_pod_ip) {
  if (placement.address_by_pod_ip) {
    return coordinator_pod_ip.empty() ? "" : absl::StrCat(coordinator_pod_ip, ":", placement.port);
  }
  return absl::StrCat(CoordinatorName(MetaString(job, "name")), ".", MetaString(job, "namespace"),
                      ".svc:", placement.port);
}

PodTask PodOfTask(const TrainingJobSpec& spec, int task, Incarnation incarnation) {
  if (spec.nproc_per_node <= 1) return {task, incarnation};
  return {task / spec.nproc_per_node, incarnation / kLocalIncarnationStride};
}

namespace {

// Who a worker pod is: task `index` at `incarnation`, or spare slot `index`'s pod of
// generation `generation` (no task yet).
struct WorkerIdentity {
  bool spare = false;
  int index = 0;
  Incarnation incarnation = 0;
  int generation = 0;
};

Json WorkerPod(const Json& job, const TrainingJobSpec& spec, const WorkerIdentity& id,
               const std::string& coordinator_address, int agent_clique_port, bool tls);

}  // namespace

Json DesiredTaskPod(const Json& job, const TrainingJobSpec& spec, int index,
                    Incarnation incarnation, const std::string& coordinator_address,
                    int agent_clique_port, bool coordinator_tls, bool bound_credentials) {
  Json pod = WorkerPod(job, spec, {false, index, incarnation, 0}, coordinator_address,
                       agent_clique_port, coordinator_tls);
  if (bound_credentials && HasOwnCredentialSecret(incarnation)) {
    // A replacement: the same volume, from the pod's own Secret (task_credentials.h).
    Json volume =
        SecretVolume(TaskPodName(MetaString(job, "name"), index, incarnation), "phalanx-token",
                     TaskCredentialFiles(spec, index), /*optional=*/false);
    MergeNamed(pod["spec"], "volumes", volume);
  }
  return pod;
}

Json DesiredSparePod(const Json& job, const TrainingJobSpec& spec, int slot, int generation,
                     const std::string& coordinator_address, bool coordinator_tls) {
  return WorkerPod(job, spec, {true, slot, 0, generation}, coordinator_address, 0, coordinator_tls);
}

std::string SparePodName(const std::string& job, int slot, int generation) {
  return absl::StrCat(job, "-spare-", slot, "-", generation);
}

namespace {

Json WorkerPod(const Json& job, const TrainingJobSpec& spec, const WorkerIdentity& id,
               const std::string& coordinator_address, int agent_clique_port, bool tls) {
  const int index = id.spare ? 0 : id.index;
  const Incarnation incarnation = id.incarnation;
  const std::string name = MetaString(job, "name");
  const std::string ns = MetaString(job, "namespace");
  const Json& tmpl = spec.pod_template;
  Json pod = Json::object();
  pod["apiVersion"] = Str("v1");
  pod["kind"] = Str("Pod");
  Json labels = Labels(name, "task");
  Json annotations = Json::object();
  if (tmpl.is_object() && tmpl.has_field("metadata") && tmpl.at("metadata").is_object()) {
    const Json& tm = tmpl.at("metadata");
    if (tm.has_field("labels") && tm.at("labels").is_object()) {
      for (const auto& [k, v] : tm.at("labels").as_object()) labels[k] = v;
    }
    if (tm.has_field("annotations") && tm.at("annotations").is_object()) {
      annotations = tm.at("annotations");
    }
  }
  // Ours last: a template label cannot hide a pod from the operator.
  labels[kJobLabel] = Str(name);
  if (id.spare) {
    labels[kRoleLabel] = Str("spare");
    labels[kSpareLabel] = Str(absl::StrCat(id.index));
    labels[kSpareGenerationLabel] = Str(absl::StrCat(id.generation));
    if (labels.has_field(kTaskLabel)) labels.erase(kTaskLabel);
    if (labels.has_field(kIncarnationLabel)) labels.erase(kIncarnationLabel);
  } else {
    labels[kRoleLabel] = Str("task");
    labels[kTaskLabel] = Str(absl::StrCat(index));
    labels[kIncarnationLabel] = Str(absl::StrCat(incarnation));
  }
  pod["metadata"] = ChildMeta(job,
                              id.spare ? SparePodName(name, id.index, id.generation)
                                       : TaskPodName(name, index, incarnation),
                              labels);
  if (annotations.size() > 0) pod["metadata"]["annotations"] = annotations;

  Json pod_spec = kube::FieldOrNull(tmpl, "spec");
  if (!pod_spec.is_object()) pod_spec = Json::object();
  pod_spec["restartPolicy"] = Str("Never");
  // A spare has no task's host name: the name is the task's, and it serves none yet.
  if (!id.spare) pod_spec["hostname"] = Str(TaskHostname(name, index));
  pod_spec["subdomain"] = Str(TasksServiceName(name));
  if (!spec.scheduler_name.empty()) pod_spec["schedulerName"] = Str(spec.scheduler_name);
  if (!spec.priority_class_name.empty()) {
    pod_spec["priorityClassName"] = Str(spec.priority_class_name);
  }
  if (!spec.placement.topology_key.empty()) {
    pod_spec["affinity"] =
        TaskPlacementAffinity(ns, name, spec.placement, kube::FieldOrNull(pod_spec, "affinity"));
  }
  const std::string master =
      absl::StrCat(TaskHostname(name, 0), ".", TasksServiceName(name), ".", ns, ".svc");
  // With nprocPerNode n > 1 the pod runs tasks first .. first+n-1 through the in-pod launcher
  // (runtime/python/phalanx/launch.py), which gives each local rank its own PHALANX_TASK_ID,
  // RANK, LOCAL_RANK, JAX_PROCESS_ID, token file and incarnation (kLocalIncarnationStride); the
  // values here are the pod's first task's.
  const int n = spec.nproc_per_node;
  const int first = index * n;
  const int num_tasks = spec.NumTasks();
  std::vector<Json> env = {
      EnvVar("PHALANX_COORDINATOR", coordinator_address),
      EnvVar("PHALANX_JOB", name),
      EnvVar("PHALANX_NUM_TASKS", absl::StrCat(num_tasks)),
      EnvVar("PHALANX_TOKEN_FILE", n > 1 ? LocalTokenFile(first) : std::string(kTokenFile)),
      EnvVar("MASTER_ADDR", master),
      EnvVar("MASTER_PORT", absl::StrCat(kMasterPort)),
      EnvVar("WORLD_SIZE", absl::StrCat(num_tasks)),
      EnvVar("JAX_COORDINATOR_ADDRESS", absl::StrCat(master, ":", kMasterPort)),
      EnvVar("JAX_NUM_PROCESSES", absl::StrCat(num_tasks))};
  if (id.spare) {
    // The task's identity (PHALANX_TASK_ID, PHALANX_INCARNATION, RANK, JAX_PROCESS_ID) comes
    // from the coordinator when it takes one over (phalanx.init() sets them then).
    env.push_back(EnvVar("PHALANX_SPARE", absl::StrCat(id.index)));
    env.push_back(EnvFieldRef("PHALANX_POD_NAME", "metadata.name"));
  } else {
    env.push_back(EnvVar("PHALANX_TASK_ID", absl::StrCat(first)));
    env.push_back(EnvVar("PHALANX_INCARNATION", absl::StrCat(incarnation)));
    env.push_back(EnvVar("RANK", absl::StrCat(first)));
    env.push_back(EnvVar("JAX_PROCESS_ID", absl::StrCat(first)));
  }
  if (agent_clique_port > 0 && spec.node_agent) {
    // The node agent on this pod's node, over TCP: no host path, so the pod stays within Pod
    // Security "restricted" (docs/adr/0004). Kubernetes expands $(PHALANX_NODE_IP) because the
    // variable comes first.
    env.push_back(EnvFieldRef("PHALANX_NODE_IP", "status.hostIP"));
    env.push_back(
        EnvVar("PHALANX_CLIQUE_ADDRESS", absl::StrCat("$(PHALANX_NODE_IP):", agent_clique_port)));
  }
  // A spare has no task's clique ticket: the agent's clique channel is for the tasks a pod
  // was created for (a spare that took a task over reports through the coordinator only).
  const bool clique_channel = agent_clique_port > 0 && spec.node_agent && !id.spare;
  std::vector<std::pair<std::string, std::string>> credentials, tickets;
  if (id.spare) credentials.emplace_back(kSpareCredentialKey, "token");
  for (int task = first; task < first + n && !id.spare; ++task) {
    credentials.emplace_back(TaskCredentialKey(task), n > 1 ? LocalTokenFileName(task) : "token");
    tickets.emplace_back(CliqueTicketKey(task), LocalCliqueTicketFileName(task));
  }
  if (n > 1) {
    env.push_back(EnvVar("PHALANX_NPROC_PER_NODE", absl::StrCat(n)));
    env.push_back(EnvVar("LOCAL_WORLD_SIZE", absl::StrCat(n)));
    env.push_back(EnvVar("GROUP_RANK", absl::StrCat(index)));
  }
  if (tls) {
    env.push_back(EnvVar("PHALANX_TLS_CA_FILE", kTlsCaFile));
    env.push_back(EnvVar("PHALANX_TLS_SERVER_NAME", CoordinatorTlsServerName(job)));
  }
  if (clique_channel) {
    env.push_back(EnvVar("PHALANX_CLIQUE_TICKET_FILE",
                         absl::StrCat(kCliqueTicketMountPath, "/", tickets.front().second)));
  }
  // Only this pod's tasks' credentials and tickets are mounted: a task cannot act as another
  // pod's task (docs/security.md).
  MergeNamed(pod_spec, "volumes", TokenVolume(name, credentials));
  if (clique_channel) {
    MergeNamed(pod_spec, "volumes",
               SecretVolume(SecretName(name), "phalanx-clique-ticket", tickets, /*optional=*/true));
  }
  // Only the CA's certificate: never the coordinator's key, which would let a task pose as it.
  if (tls) {
    MergeNamed(pod_spec, "volumes",
               SecretVolume(SecretName(name), kTlsVolume, {{kTlsCaKey, kTlsCaKey}},
                            /*optional=*/false));
  }
  if (pod_spec.has_field("containers") && pod_spec.at("containers").is_array()) {
    for (Json& container : pod_spec["containers"].as_array()) {
      if (!container.is_object()) continue;
      MergeEnv(container, env);
      MergeNamed(container, "volumeMounts", TokenMount());
      if (clique_channel) {
        MergeNamed(container, "volumeMounts",
                   ReadOnlyMount("phalanx-clique-ticket", kCliqueTicketMountPath));
      }
      if (tls) MergeNamed(container, "volumeMounts", ReadOnlyMount(kTlsVolume, kTlsMountPath));
      // A failed task's log tail becomes its termination message, which the operator copies to
      // status.tasks[].lastFailureMessage and the TaskRestarted Event (the user's own policy,
      // if set, stands).
      if (!container.has_field("terminationMessagePolicy")) {
        container["terminationMessagePolicy"] = Str("FallbackToLogsOnError");
      }
    }
  }
  pod["spec"] = pod_spec;
  return pod;
}

}  // namespace

}  // namespace phalanx::op
