// phalanx-operator: reconciles TrainingJobs into coordinated pods. In-cluster by default, or
// --kubeconfig FILE (a real cluster or phalanx-localcluster). Flags → options → wiring → run.
// Prints `ready metrics=HOST:PORT` once it serves; SIGTERM/SIGINT stop it (the lease is released
// so a standby replica takes over at once).
#include <unistd.h>

#include <iostream>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/auth/clique_ticket.h"
#include "common/base/backoff.h"
#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/base/periodic_runner.h"
#include "common/base/process_init.h"
#include "common/base/process_main.h"
#include "common/http/status_server.h"
#include "common/kube/api_status.h"
#include "common/kube/cluster_config.h"
#include "common/kube/controller.h"
#include "common/kube/event_recorder.h"
#include "common/kube/informer.h"
#include "common/kube/leader_election.h"
#include "common/kube/object_meta.h"
#include "common/kube/rest_client.h"
#include "operator/controller/job_sample.h"
#include "operator/controller/node_watch.h"
#include "operator/controller/operator_ca.h"
#include "operator/controller/operator_key.h"
#include "operator/controller/reconciler.h"
#include "prometheus/registry.h"

ABSL_FLAG(std::string, kubeconfig, "", "kubeconfig file (empty: in-cluster service account)");
ABSL_FLAG(std::string, context, "", "kubeconfig context (empty: current-context)");
ABSL_FLAG(std::string, namespace, "", "watch only this namespace (empty: all namespaces)");
// Tagged with this binary's version, as `make images` tags the images and the chart's appVersion.
ABSL_FLAG(std::string, coordinator_image,
          "ghcr.io/phalanx-dev/phalanx-coordinator:" + std::string(phalanx::base::Version()),
          "image of the per-job coordinator pod");
ABSL_FLAG(std::string, coordinator_command, "phalanx-coordinator",
          "command of the coordinator container (path or name)");
ABSL_FLAG(int, coordinator_port, 8470, "coordinator gRPC port (metrics on port + 1)");
ABSL_FLAG(int, coordinator_port_base, 0,
          "if > 0, give each job's coordinator its own port from [base, base + "
          "coordinator_port_span) (clusters where pods share one network namespace, such as the "
          "local cluster): a port no other job's coordinator pod holds");
ABSL_FLAG(
    int, coordinator_port_span, 2000,
    "how many ports from coordinator_port_base to hand out (even ports; metrics on port + 1)");
ABSL_FLAG(bool, task_pods_wait_for_coordinator, true,
          "create a job's task pods only once its coordinator has answered the operator with "
          "the job's token (so no task mounts the credentials of a Secret the operator did not "
          "write: docs/security.md); false only where coordinators are simulated and never "
          "answer (scale benchmarks on simulated nodes)");
ABSL_FLAG(int, agent_clique_port, 0,
          "the node agent's clique channel port on every node (its --clique_listen): task pods "
          "get PHALANX_CLIQUE_ADDRESS=<node IP>:<port> unless their TrainingJob sets "
          "nodeAgent.enabled=false (docs/adr/0004); 0: none");
ABSL_FLAG(std::string, coordinator_address, "service",
          "how tasks reach the coordinator: service (cluster DNS) or pod-ip");
ABSL_FLAG(double, qps, 50, "Kubernetes API requests per second (client-side limit)");
ABSL_FLAG(int, burst, 100, "Kubernetes API request burst");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:8080", "HTTP address for /metrics and /healthz");
ABSL_FLAG(int, workers, 4, "jobs reconciled in parallel");
ABSL_FLAG(bool, leader_elect, true, "use a Lease so only one replica acts");
ABSL_FLAG(std::string, lease_namespace, "default", "namespace of the leader-election Lease");
ABSL_FLAG(std::string, lease_name, "phalanx-operator", "name of the leader-election Lease");
ABSL_FLAG(std::string, identity, "", "leader-election identity (default: hostname-pid)");
ABSL_FLAG(std::string, key_namespace, "",
          "namespace of the operator-key Secret, the operator's own (default: --lease_namespace)");
ABSL_FLAG(std::string, agent_key_secret, "phalanx-agent-clique-key",
          "with --agent_clique_port: the Secret (in --key_namespace) the operator writes the node "
          "agents' clique-ticket key into, for the agent DaemonSet to mount (empty: task pods "
          "get no clique tickets)");
ABSL_FLAG(std::string, key_secret, "phalanx-operator-key",
          "Secret holding the key every job token is derived from; created on first start");
ABSL_FLAG(bool, coordinator_tls, true,
          "TLS between every new job's pods and its coordinator, with a certificate per job signed "
          "by the operator's CA (--ca_secret); false: cleartext, only where the pod network is "
          "encrypted already (a service mesh, an encrypting CNI): docs/security.md");
ABSL_FLAG(std::string, ca_secret, "phalanx-operator-ca",
          "Secret (in --key_namespace) holding the operator's CA (ca.crt, ca.key) that signs "
          "coordinator certificates; created on first start. Read whatever --coordinator_tls "
          "says: the operator's link verifies coordinators that serve TLS with it");
ABSL_FLAG(std::string, owner_service_account, "",
          "the operator's ServiceAccount (in --key_namespace): the Lease, key and CA Secrets the "
          "operator creates are owned by it, so deleting it (helm uninstall) removes them too");
ABSL_FLAG(bool, network_policy, true,
          "create a NetworkPolicy per job: only its pods and the operator reach the coordinator");
ABSL_FLAG(std::string, operator_namespace, "",
          "namespace of the operator's pods, for the NetworkPolicy (default: --key_namespace)");
ABSL_FLAG(std::string, metrics_from_namespace, "*",
          "namespace whose pods may scrape coordinator metrics (\"*\": any, \"\": none)");

namespace {

using namespace phalanx;

absl::StatusOr<std::unique_ptr<kube::RestClient>> ConnectToKube(op::OperatorMetrics& metrics) {
  absl::StatusOr<kube::ClusterConfig> config =
      absl::GetFlag(FLAGS_kubeconfig).empty()
          ? kube::InClusterConfig()
          : kube::LoadKubeconfig(absl::GetFlag(FLAGS_kubeconfig), absl::GetFlag(FLAGS_context));
  if (!config.ok()) return config.status();
  kube::RestClientOptions client_options;
  client_options.qps = absl::GetFlag(FLAGS_qps);
  client_options.burst = absl::GetFlag(FLAGS_burst);
  client_options.user_agent = "phalanx-operator/0.1";
  client_options.on_response = [&metrics](const std::string& verb, int code) {
    metrics.ApiRequest(verb, code);
  };
  return kube::RestClient::Create(*config, client_options);
}

// Runs `attempt` until it succeeds or fails for good. A transient failure (429, 5xx, no
// connection: kube::IsRetryable) is logged and retried with back-off, never fatal: at start-up
// under API throttling an exit would only become a crash loop adding to the load. nullopt when
// a stop signal came while waiting.
template <typename T>
std::optional<absl::StatusOr<T>> RetryWhileTransient(
    const base::ProcessMain& process, const std::string& what,
    absl::FunctionRef<absl::StatusOr<T>()> attempt) {
  base::ExponentialBackoff backoff(absl::Milliseconds(200), absl::Seconds(30), 2.0, getpid());
  while (true) {
    absl::StatusOr<T> result = attempt();
    if (result.ok() || !kube::IsRetryable(result.status())) return result;
    const absl::Duration delay = backoff.NextDelay();
    PHX_LOG(WARNING) << what << ": " << result.status() << " (attempt " << backoff.attempts()
                     << "; retrying in " << delay << ")";
    if (process.WaitForStopSignal(delay) != 0) return std::nullopt;
  }
}

// What the operator creates for itself (its Lease, its key) belongs to its ServiceAccount,
// which the chart installs: `helm uninstall` then leaves none of it behind. Empty without
// --owner_service_account.
absl::StatusOr<std::vector<kube::OwnerReference>> OwnObjectsOwner(const base::ProcessMain& process,
                                                                  kube::Client& client,
                                                                  const std::string& ns) {
  const std::string account = absl::GetFlag(FLAGS_owner_service_account);
  if (account.empty()) return std::vector<kube::OwnerReference>{};
  std::optional<absl::StatusOr<kube::Json>> read = RetryWhileTransient<kube::Json>(
      process, absl::StrCat("ServiceAccount ", ns, "/", account),
      [&] { return client.Get(kube::kServiceAccounts, ns, account); });
  if (!read.has_value()) return absl::CancelledError("stopped while reading the ServiceAccount");
  absl::StatusOr<kube::Json>& sa = *read;
  if (!sa.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--owner_service_account: ServiceAccount ", ns, "/", account, ": ", sa.status().message()));
  }
  return std::vector<kube::OwnerReference>{{.api_version = "v1",
                                            .kind = "ServiceAccount",
                                            .name = account,
                                            .uid = kube::MetaString(*sa, "uid")}};
}

// The reconciler's options from the flags, with the operator's key and CA (read, or made on
// first start, in `key_namespace`).
absl::StatusOr<op::ReconcilerOptions> ReconcilerOptionsFromFlags(
    const base::ProcessMain& process, kube::Client& client, const std::string& key_namespace,
    const std::vector<kube::OwnerReference>& own_objects_owner) {
  op::ReconcilerOptions options;
  options.placement.image = absl::GetFlag(FLAGS_coordinator_image);
  options.placement.command =
      absl::StrSplit(absl::GetFlag(FLAGS_coordinator_command), ' ', absl::SkipEmpty());
  options.placement.port = absl::GetFlag(FLAGS_coordinator_port);
  options.placement.address_by_pod_ip = absl::GetFlag(FLAGS_coordinator_address) == "pod-ip";
  options.agent_clique_port = absl::GetFlag(FLAGS_agent_clique_port);
  options.task_pods_wait_for_coordinator = absl::GetFlag(FLAGS_task_pods_wait_for_coordinator);
  if (options.agent_clique_port < 0 || options.agent_clique_port > 65535) {
    return absl::InvalidArgumentError("--agent_clique_port must be 0..65535");
  }
  options.coordinator_port_base = absl::GetFlag(FLAGS_coordinator_port_base);
  options.coordinator_port_span = absl::GetFlag(FLAGS_coordinator_port_span);
  const std::string what = absl::StrCat("the operator key (Secret ", key_namespace, "/",
                                        absl::GetFlag(FLAGS_key_secret), ")");
  std::optional<absl::StatusOr<std::string>> loaded =
      RetryWhileTransient<std::string>(process, what, [&] {
        return op::LoadOrCreateOperatorKey(client, key_namespace, absl::GetFlag(FLAGS_key_secret),
                                           own_objects_owner);
      });
  if (!loaded.has_value()) return absl::CancelledError("stopped while loading the operator key");
  absl::StatusOr<std::string>& operator_key = *loaded;
  if (!operator_key.ok()) {
    return absl::UnavailableError(absl::StrCat("the operator key (Secret ", key_namespace, "/",
                                               absl::GetFlag(FLAGS_key_secret),
                                               "): ", operator_key.status().message()));
  }
  options.operator_key = *operator_key;
  // The CA even with --coordinator_tls=false: coordinators started while it was on still serve
  // TLS, and the link must verify them until their jobs are re-created.
  const std::string ca_secret = absl::GetFlag(FLAGS_ca_secret);
  const std::string ca_what =
      absl::StrCat("the operator's CA (Secret ", key_namespace, "/", ca_secret, ")");
  if (ca_secret.empty()) {
    if (absl::GetFlag(FLAGS_coordinator_tls)) {
      return absl::InvalidArgumentError(
          "--coordinator_tls needs --ca_secret (or --coordinator_tls=false for cleartext)");
    }
  } else {
    std::optional<absl::StatusOr<auth::TlsKeyPair>> ca =
        RetryWhileTransient<auth::TlsKeyPair>(process, ca_what, [&] {
          return op::LoadOrCreateOperatorCa(client, key_namespace, ca_secret, own_objects_owner);
        });
    if (!ca.has_value()) return absl::CancelledError("stopped while loading the operator's CA");
    if (!ca->ok()) {
      return absl::UnavailableError(absl::StrCat(ca_what, ": ", ca->status().message()));
    }
    options.coordinator_ca = **ca;
  }
  options.placement.tls = absl::GetFlag(FLAGS_coordinator_tls);
  if (!options.placement.tls) {
    PHX_LOG(WARNING) << "--coordinator_tls=false: new jobs' pods reach their coordinator in "
                        "cleartext (job credentials readable on the pod network)";
  }
  if (const std::string agent_secret = absl::GetFlag(FLAGS_agent_key_secret);
      options.agent_clique_port > 0 && !agent_secret.empty()) {
    const std::string agent_what =
        absl::StrCat("the node agents' clique key (Secret ", key_namespace, "/", agent_secret, ")");
    std::optional<absl::StatusOr<bool>> written =
        RetryWhileTransient<bool>(process, agent_what, [&]() -> absl::StatusOr<bool> {
          absl::Status s = op::EnsureAgentCliqueKeySecret(client, key_namespace, agent_secret,
                                                          auth::AgentCliqueKey(*operator_key),
                                                          own_objects_owner);
          if (absl::IsAborted(s)) return absl::UnavailableError(s.message());  // 409: again
          if (!s.ok()) return s;
          return true;
        });
    if (!written.has_value()) return absl::CancelledError("stopped while writing the agent key");
    if (!written->ok()) {
      return absl::UnavailableError(absl::StrCat(agent_what, ": ", written->status().message()));
    }
  } else if (options.agent_clique_port > 0) {
    PHX_LOG(WARNING) << "--agent_key_secret is empty: task pods get no clique tickets";
  }
  if (absl::GetFlag(FLAGS_network_policy)) {
    op::NetworkPolicyOptions policy;
    policy.operator_namespace = absl::GetFlag(FLAGS_operator_namespace).empty()
                                    ? key_namespace
                                    : absl::GetFlag(FLAGS_operator_namespace);
    policy.metrics_from = absl::GetFlag(FLAGS_metrics_from_namespace);
    options.network_policy = policy;
  } else {
    options.network_policy.reset();
  }
  return options;
}

kube::LeaderElector::Options LeaderElectionFromFlags(
    const std::string& key_namespace, const std::vector<kube::OwnerReference>& own_objects_owner) {
  kube::LeaderElector::Options le;
  le.lease_name = absl::GetFlag(FLAGS_lease_name);
  le.lease_namespace = absl::GetFlag(FLAGS_lease_namespace);
  // The ServiceAccount lives in the key's namespace; an owner must share the Lease's.
  if (le.lease_namespace == key_namespace) le.owner_references = own_objects_owner;
  le.identity = absl::GetFlag(FLAGS_identity);
  if (le.identity.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    le.identity = absl::StrCat(host, "-", getpid());
  }
  return le;
}

}  // namespace

int main(int argc, char** argv) {
  const base::ProcessMain process(
      argc, argv, {"operator", "phalanx-operator", "phalanx-operator [--kubeconfig FILE] [flags]"});
  if (!process.args().empty()) return process.Fail("unexpected argument " + process.args()[0]);
  const std::string address_mode = absl::GetFlag(FLAGS_coordinator_address);
  if (address_mode != "service" && address_mode != "pod-ip") {
    return process.Fail("--coordinator_address must be service or pod-ip");
  }
  if (absl::GetFlag(FLAGS_workers) < 1) return process.Fail("--workers must be at least 1");

  prometheus::Registry registry;
  op::OperatorMetrics metrics(registry);
  absl::StatusOr<std::unique_ptr<kube::RestClient>> client = ConnectToKube(metrics);
  if (!client.ok()) return process.Fail(std::string(client.status().message()));

  base::Clock& clock = base::RealClock::Get();
  const std::string ns = absl::GetFlag(FLAGS_namespace);
  auto informer = [&](const kube::Resource& r, const std::string& selector,
                      std::function<void(kube::Json&)> transform = nullptr) {
    kube::Informer::Options o;
    o.namespace_ = r.namespaced ? ns : "";
    o.label_selector = selector;
    o.transform = std::move(transform);
    return std::make_unique<kube::Informer>(**client, clock, r, o);
  };
  // The jobs are cached whole: their status is written back from the cached object.
  auto jobs = informer(op::kTrainingJobs, "");
  // A task pod's spec is most of what caching it costs and is never read (observe.h): 14 KiB a
  // pod whole, 1,000 jobs × 9 pods (issue 33).
  auto pods = informer(op::kPods, op::kJobLabel, op::TrimCachedPod);
  pods->AddIndex(op::kPodsByNodeIndex, op::PodNodeName);
  auto services = informer(op::kServices, op::kJobLabel, op::DropManagedFields);
  auto nodes = informer(op::kNodes, "");
  kube::EventRecorder events(**client, clock, "phalanx-operator");

  const std::string key_namespace = absl::GetFlag(FLAGS_key_namespace).empty()
                                        ? absl::GetFlag(FLAGS_lease_namespace)
                                        : absl::GetFlag(FLAGS_key_namespace);
  absl::StatusOr<std::vector<kube::OwnerReference>> own_objects_owner =
      OwnObjectsOwner(process, **client, key_namespace);
  if (absl::IsCancelled(own_objects_owner.status())) return 0;  // a stop signal while retrying
  if (!own_objects_owner.ok()) {
    return process.Fail(std::string(own_objects_owner.status().message()));
  }
  absl::StatusOr<op::ReconcilerOptions> options =
      ReconcilerOptionsFromFlags(process, **client, key_namespace, *own_objects_owner);
  if (absl::IsCancelled(options.status())) return 0;  // a stop signal while retrying
  if (!options.ok()) return process.Fail(std::string(options.status().message()));

  std::atomic<bool> leading{false};
  absl::StatusOr<std::unique_ptr<http::StatusHttpServer>> status_server =
      http::StatusHttpServer::Start(
          absl::GetFlag(FLAGS_metrics_listen), registry, [] { return absl::OkStatus(); },
          [&]() {
            // Ready once leading with synced caches; a standby replica is ready too (it has
            // nothing to do until it leads).
            return jobs->HasSynced() || !leading.load()
                       ? absl::OkStatus()
                       : absl::UnavailableError("informers not synced");
          });
  if (!status_server.ok()) return process.Fail(std::string(status_server.status().message()));

  kube::Controller::Options controller_options;
  controller_options.workers = absl::GetFlag(FLAGS_workers);
  controller_options.observe_pass = [&metrics](kube::ReconcileResult result, absl::Duration took) {
    metrics.Reconciled(result, took);
  };
  kube::Controller controller("trainingjob", clock, controller_options);
  op::CoordinatorLink link(
      clock, [&controller](const std::string& key) { controller.Enqueue(key); },
      options->coordinator_ca.cert_pem);
  op::Reconciler reconciler(**client, {*jobs, *pods, *services, *nodes}, events, clock, &metrics,
                            *options, &link);
  controller.Watch(*jobs, kube::KeysForSelf());
  controller.Watch(*pods, kube::KeysForControllerOwner(op::kKind));
  controller.Watch(*services, kube::KeysForControllerOwner(op::kKind));
  // Only a node's preemption state matters to jobs, not its routine status updates.
  op::NodePreemptionFilter node_filter;
  controller.Watch(*nodes, [&pods, &node_filter](const kube::Json& node) {
    return node_filter.Changed(node) ? op::JobKeysOnNode(*pods, node) : std::vector<std::string>{};
  });

  absl::Notification failed;
  std::once_flag finish_once;
  auto finish = [&] { std::call_once(finish_once, [&] { failed.Notify(); }); };
  auto start = [&] {
    leading = true;
    PHX_LOG(INFO) << "leading: starting informers and " << controller_options.workers << " workers";
    for (auto* i : {jobs.get(), pods.get(), services.get(), nodes.get()}) i->Start();
    absl::Status run =
        controller.Run([&](const std::string& key) { return reconciler.Reconcile(key); });
    if (!run.ok()) {
      PHX_LOG(ERROR) << "controller: " << run;
      finish();
    }
  };
  auto stop = [&] {
    if (!leading.exchange(false)) return;
    PHX_LOG(WARNING) << "lost leadership: stopping";
    finish();  // a former leader exits; its restart becomes a candidate again
  };
  std::unique_ptr<kube::LeaderElector> elector;
  if (absl::GetFlag(FLAGS_leader_elect)) {
    absl::StatusOr<std::unique_ptr<kube::LeaderElector>> created = kube::LeaderElector::Create(
        **client, clock, LeaderElectionFromFlags(key_namespace, *own_objects_owner));
    if (!created.ok()) return process.Fail(std::string(created.status().message()));
    elector = *std::move(created);
    elector->Run(start, stop);
  } else {
    start();
  }
  // Gauges that are states, not events: sampled, so no reconcile pays for them.
  op::JobSampleCache samples;               // the gauges' runner only
  std::optional<uint64_t> sampled_changes;  // the job cache's change count at the last sample
  base::PeriodicRunner gauges(clock, absl::Seconds(5), [&](absl::Time) {
    metrics.SetQueueDepth(controller.queue_depth());
    // The per-job gauges mirror the jobs' status: while the job cache stands still there is
    // nothing to sample (a walk over 1,000 jobs every 5 s was an eighth of an idle operator's
    // CPU, and most of it once the cache kept text). Not the cache's resourceVersion: bookmarks
    // move it with every change in the cluster, a Lease renewal included. Read before the walk,
    // so a change during it is sampled next time.
    const uint64_t changes = jobs->changes();
    if (sampled_changes == changes) return;
    jobs->ForEach([&](const kube::Json& job) { samples.Add(job); });
    metrics.SetJobs(samples.Take());
    sampled_changes = changes;
  });
  std::cout << "ready metrics=127.0.0.1:" << (*status_server)->port() << std::endl;

  // Wait for a stop signal or a fatal controller error, polling so both are noticed.
  while (!failed.HasBeenNotified()) {
    if (const int sig = process.WaitForStopSignal(absl::Milliseconds(200)); sig != 0) {
      PHX_LOG(INFO) << "signal " << sig << ": stopping";
      break;
    }
  }
  gauges.Stop();
  controller.Stop();
  for (auto* i : {jobs.get(), pods.get(), services.get(), nodes.get()}) i->Stop();
  if (elector) elector->Stop();
  return 0;
}
