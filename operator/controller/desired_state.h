// The children a TrainingJob should have, as pure functions of the job (CONVENTIONS.md "Operator
// shape": pure functions compute desired children; one reconciler talks to the client):
//   <job>-token          Secret with the job token (key "token", mounted only into the
//                        coordinator) and one credential per task ("task-<i>", mounted only
//                        into task i's pods); all derived from the operator key (ADR 0003).
//                        With TLS (CoordinatorPlacement::tls) also the operator CA's
//                        certificate ("ca.crt", mounted into every task and spare pod) and the
//                        coordinator's certificate and key ("tls.crt", "tls.key", mounted only
//                        into the coordinator): docs/security.md "TLS by default"
//   <job>-coordinator    NetworkPolicy: only the job's pods and the operator reach the
//                        coordinator's gRPC port (and Prometheus its metrics port, if allowed)
//   <job>-coordinator    Pod running phalanx-coordinator, and a Service in front of it
//   <job>-tasks          headless Service giving task pods stable DNS names
//   <job>-task-<i>-<n>   one Pod per task i at incarnation n (the incarnation is in the name so a
//                        replacement never waits for its predecessor's graceful deletion)
//   <job>-spare-<k>-<g>  spec.spares: slot k's spare pod of generation g (role=spare), waiting
//                        to take a task over; one that did is relabelled as the task's pod and
//                        keeps its name
// Every child carries a controller ownerReference to the job (deleting the job deletes them) and
// the labels below. Deterministic: the same inputs give byte-identical objects.
#pragma once

#include <cpprest/json.h>

#include <map>
#include <string>
#include <vector>

#include "common/auth/tls_issuer.h"
#include "operator/api/types.h"

namespace phalanx::op {

inline constexpr char kJobLabel[] = "phalanx.dev/job";
inline constexpr char kTaskLabel[] = "phalanx.dev/task";
inline constexpr char kIncarnationLabel[] = "phalanx.dev/incarnation";
inline constexpr char kRoleLabel[] = "phalanx.dev/role";  // "task", "spare" or "coordinator"
// A spare pod's slot (0..spec.spares-1) and its generation in the slot; kept when it takes a
// task over (then role=task).
inline constexpr char kSpareLabel[] = "phalanx.dev/spare";
inline constexpr char kSpareGenerationLabel[] = "phalanx.dev/spare-generation";
// The job's Secret's key for the spare credential every spare pod mounts (auth::SpareCredential).
inline constexpr char kSpareCredentialKey[] = "spare";
inline constexpr char kTokenKey[] = "token";
// Where the coordinator and task pods find their credential (a Secret volume, never env).
inline constexpr char kTokenMountPath[] = "/var/run/phalanx/token";
inline constexpr char kTokenFile[] = "/var/run/phalanx/token/token";
// With nprocPerNode > 1 each local task's credential is its own file, token-<task>, in
// kTokenMountPath; PHALANX_TOKEN_FILE names the pod's first task's (the launcher derives the
// others' names from it).
inline std::string LocalTokenFileName(int task) { return "token-" + std::to_string(task); }
inline std::string LocalTokenFile(int task) {
  return std::string(kTokenMountPath) + "/" + LocalTokenFileName(task);
}
// The launcher (runtime/python/phalanx/launch.py LOCAL_INCARNATION_STRIDE) gives the r-th
// in-place restart of a local rank of a pod at incarnation I the coordinator incarnation
// I * kLocalIncarnationStride + r: always above the previous pod's, below the next one's.
inline constexpr int kLocalIncarnationStride = 1000;

// A coordinator task and incarnation as the operator counts them: the pod that runs the task and
// that pod's incarnation (the same numbers when nprocPerNode is 1).
struct PodTask {
  int index = 0;
  Incarnation incarnation = 0;
};
PodTask PodOfTask(const TrainingJobSpec& spec, int task, Incarnation incarnation);
std::string TaskCredentialKey(int index);  // "task-<i>"
std::string CliqueTicketKey(int index);    // "task-<i>-clique"
// Where a task pod that has the node agent's clique channel finds its clique ticket
// (common/auth/clique_ticket.h): an optional volume of the job's Secret, since a Secret written
// before the operator had an agent key holds none (the task then reports with a digest, which a
// verifying agent refuses). With nprocPerNode > 1 each local task's is ticket-<task>, and
// PHALANX_CLIQUE_TICKET_FILE names the first's (the launcher derives the others', as for tokens).
inline constexpr char kCliqueTicketMountPath[] = "/var/run/phalanx/clique";
inline std::string LocalCliqueTicketFileName(int task) { return "ticket-" + std::to_string(task); }
inline constexpr int kMasterPort = 29500;  // PyTorch rendezvous on task 0

// TLS between the job's pods and its coordinator (docs/security.md "TLS by default"): the
// keys of the job's Secret, and where pods find them (a Secret volume with only the keys each
// pod may hold: the coordinator its certificate and key, a task or spare the CA certificate).
inline constexpr char kTlsCaKey[] = "ca.crt";
inline constexpr char kTlsCertKey[] = "tls.crt";
inline constexpr char kTlsPrivateKeyKey[] = "tls.key";
inline constexpr char kTlsMountPath[] = "/var/run/phalanx/tls";
inline constexpr char kTlsCaFile[] = "/var/run/phalanx/tls/ca.crt";
inline constexpr char kTlsCertFile[] = "/var/run/phalanx/tls/tls.crt";
inline constexpr char kTlsPrivateKeyFile[] = "/var/run/phalanx/tls/tls.key";
// How long a coordinator's certificate is valid (never past the operator CA's notAfter): the
// Secret is written once per job, so it must outlive any job.
inline constexpr absl::Duration kCoordinatorCertificateValidity = absl::Hours(24 * 3650);

std::string SecretName(const std::string& job);
std::string CoordinatorName(const std::string& job);  // the pod and its Service
std::string TasksServiceName(const std::string& job);
std::string TaskHostname(const std::string& job, int index);
std::string TaskPodName(const std::string& job, int index, Incarnation incarnation);

// Where and how the coordinator runs.
struct CoordinatorPlacement {
  std::string image = "ghcr.io/phalanx-dev/phalanx-coordinator:0.1";
  std::vector<std::string> command = {"phalanx-coordinator"};
  int port = 8470;  // gRPC; metrics on port + 1
  // The coordinator container's CPU and memory, each both its request and its limit
  // (Guaranteed QoS) unless spec.coordinator.resources says otherwise; see DesiredCoordinatorPod
  // for why.
  std::string cpu = "100m";
  std::string memory = "256Mi";
  // Tasks reach the coordinator by its pod IP instead of its Service's DNS name (clusters
  // without DNS, such as the local cluster).
  bool address_by_pod_ip = false;
  // TLS between the job's pods and the coordinator (the operator's --coordinator_tls, on by
  // default there): the coordinator serves its certificate from the job's Secret, and tasks and
  // spares verify it with the operator CA's certificate and CoordinatorTlsServerName. Off here
  // so that a caller without a CA gets cleartext rather than pods whose Secret lacks the keys.
  bool tls = false;
};

// The name a job's coordinator certificate is verified as, whatever address a client dials
// (its Service's DNS name or its pod IP): `<job>-coordinator.<ns>.svc`, PHALANX_TLS_SERVER_NAME in
// task and spare pods and the operator's link's target name override.
std::string CoordinatorTlsServerName(const Json& job);
// The coordinator certificate's DNS names: CoordinatorTlsServerName first, then the Service's
// other names (`.svc.cluster.local`, `<svc>.<ns>`, `<svc>`).
std::vector<std::string> CoordinatorTlsDnsNames(const Json& job);

// What the job's Secret holds for TLS: the operator CA's certificate (public) and the
// coordinator's certificate and key (auth::IssueServerCertificate for CoordinatorTlsDnsNames).
struct JobTlsFiles {
  std::string ca_cert_pem;
  auth::TlsKeyPair coordinator;
};

// The controller ownerReference to `job`.
Json OwnerReferenceTo(const Json& job);

// `token` is the job token; the Secret also holds every task's credential derived from it.
// With `agent_clique_key`, also task i's clique ticket as "task-<i>-clique"
// (common/auth/clique_ticket.h), mounted beside its credential. With `tls`, also its three
// files as "ca.crt", "tls.crt" and "tls.key". With `bound_credentials` the task credentials are
// bound to incarnation 0, the first pods' (replacements have their own: task_credentials.h).
Json DesiredSecret(const Json& job, const TrainingJobSpec& spec, const std::string& token,
                   const std::string& agent_clique_key = "", const JobTlsFiles* tls = nullptr,
                   bool bound_credentials = false);
// `token` is only hashed: the coordinator refuses a mounted token with another SHA-256 (a
// Secret the operator did not write, which it cannot check itself since it never reads Secrets).
// spec.coordinator's settings apply, merged with the operator's scheduling rules: a required
// node affinity `kubernetes.io/hostname NotIn avoid_nodes` (the nodes under a preemption notice:
// a coordinator started there would have to move again; added to each of the user's required
// node selector terms, which are ORed) and a preferred pod anti-affinity to the job's task pods
// (a node's loss then takes the coordinator or tasks, less often both). With placement.tls it
// mounts only tls.crt and tls.key of the job's Secret (kTlsMountPath) and serves TLS with them
// (--tls_cert_file, --tls_key_file).
Json DesiredCoordinatorPod(const Json& job, const TrainingJobSpec& spec,
                           const CoordinatorPlacement& placement, const std::string& token,
                           const std::vector<std::string>& avoid_nodes = {});
// Who may reach the coordinator pod's ports: the job's own pods and pods matching
// `operator_pods` (label key=value pairs; in `operator_namespace` when it is set) on the gRPC
// port; the metrics port is open to `metrics_from` (a namespace's name; "" closes it, "*"
// opens it to every namespace).
struct NetworkPolicyOptions {
  std::map<std::string, std::string> operator_pods = {{"app.kubernetes.io/component", "operator"}};
  std::string operator_namespace{};
  std::string metrics_from = "*";
};
Json DesiredCoordinatorNetworkPolicy(const Json& job, const CoordinatorPlacement& placement,
                                     const NetworkPolicyOptions& options);
Json DesiredCoordinatorService(const Json& job, const CoordinatorPlacement& placement);
Json DesiredTasksService(const Json& job);

// host:port the tasks dial; "" while address_by_pod_ip and the coordinator pod has no IP yet.
std::string CoordinatorAddress(const Json& job, const CoordinatorPlacement& placement,
                               const std::string& coordinator_pod_ip);

// The pod for task `index` at `incarnation`: the job's template with restartPolicy Never (the
// operator, not the kubelet, restarts tasks so that every restart is a new incarnation), stable
// hostname/subdomain, scheduler and priority pass-through, and the environment of DESIGN.md in
// every container: PHALANX_*, MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK, JAX_* .
// With `agent_clique_port` > 0 (the operator's --agent_clique_port) and spec.nodeAgent.enabled,
// every container also gets PHALANX_NODE_IP (status.hostIP) and PHALANX_CLIQUE_ADDRESS, the node
// agent's clique channel on that address (docs/adr/0004).
// With `coordinator_tls` (CoordinatorPlacement::tls) every container mounts only ca.crt of the
// job's Secret (kTlsCaFile) and gets PHALANX_TLS_CA_FILE and PHALANX_TLS_SERVER_NAME
// (CoordinatorTlsServerName). With `bound_credentials` a replacement (incarnation > 0) finds its
// credentials in its own Secret (named as the pod: task_credentials.h), not in the job's.
Json DesiredTaskPod(const Json& job, const TrainingJobSpec& spec, int index,
                    Incarnation incarnation, const std::string& coordinator_address,
                    int agent_clique_port = 0, bool coordinator_tls = false,
                    bool bound_credentials = false);

// Spare slot `slot`'s pod of generation `generation` (ADR 0007): the task pod's template and
// environment, but labelled role=spare, phalanx.dev/spare=<slot> and
// phalanx.dev/spare-generation=<generation>, with PHALANX_SPARE and PHALANX_POD_NAME instead of
// a task's identity, the job's spare credential instead of a task's, no host name and no clique
// ticket. Its process waits in phalanx.init() until the coordinator gives it a failed task.
// `coordinator_tls` as for DesiredTaskPod.
Json DesiredSparePod(const Json& job, const TrainingJobSpec& spec, int slot, int generation,
                     const std::string& coordinator_address, bool coordinator_tls = false);
std::string SparePodName(const std::string& job, int slot, int generation);

}  // namespace phalanx::op
