// phalanx-agent: the per-node agent (a DaemonSet on GPU nodes). Flags → objects → a tick every
// --poll_interval (see agent.h for what a tick does). Prints `ready metrics=HOST:PORT` once it
// serves /metrics and /healthz (and ` clique_port=PORT` with --clique_listen). With the `sigterm`
// source, SIGTERM (a graceful node shutdown) is itself a notice: the agent delivers it (taints
// its node) before it exits, unless its own pod is being deleted ($POD_NAME/$POD_NAMESPACE: a
// rollout); SIGINT just stops it.
//   phalanx-agent [--kubeconfig FILE] --node_name NODE [flags]
//   phalanx-agent preflight      checks this node's GPUs ("skipped: no GPU" where there are none)
//   phalanx-agent prepare-socket-dir DIR UID:GID
//                                the DaemonSet's init container: hands the host's socket folder
//                                to the agent's user (the image has no shell to do it)

#include <signal.h>

#include <algorithm>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/base/env_and_files.h"
#include "common/base/log.h"
#include "common/base/periodic_runner.h"
#include "common/base/process_main.h"
#include "common/http/status_server.h"
#include "common/kube/cluster_config.h"
#include "common/kube/event_recorder.h"
#include "common/kube/object_meta.h"
#include "common/kube/rest_client.h"
#include "node_agent/agent.h"
#include "node_agent/agent_env.h"
#include "node_agent/cliques/clique_socket.h"
#include "node_agent/gpu/fake_nvml.h"
#include "node_agent/gpu/fake_xid_script.h"
#include "node_agent/gpu/nvml_loader.h"
#include "node_agent/preemption/aws_spot_source.h"
#include "node_agent/preemption/background_source.h"
#include "node_agent/preemption/gce_metadata_source.h"
#include "node_agent/preemption/node_taint_source.h"
#include "node_agent/preemption/sigterm_source.h"
#include "node_agent/preflight.h"
#include "node_agent/socket_dir.h"
#include "prometheus/registry.h"

ABSL_FLAG(std::string, kubeconfig, "", "kubeconfig file (empty: in-cluster service account)");
ABSL_FLAG(bool, kube, true, "talk to the Kubernetes API (false: check, count and log only)");
ABSL_FLAG(std::string, node_name, "", "this node's name (default: $NODE_NAME)");
ABSL_FLAG(absl::Duration, poll_interval, absl::Seconds(1),
          "how often notices and GPUs are checked");
ABSL_FLAG(std::string, notice_sources, "node-taint",
          "comma-separated: node-taint, sigterm (graceful node shutdown), gce, aws");
ABSL_FLAG(std::string, gce_metadata_url, "http://metadata.google.internal", "GCE metadata server");
ABSL_FLAG(std::string, aws_metadata_url, "http://169.254.169.254", "AWS instance metadata server");
ABSL_FLAG(std::string, fake_gpus, "", "use N fake GPUs instead of NVML: \"8\" or \"8:H100\"");
ABSL_FLAG(std::string, fake_xid_file, "",
          "with --fake_gpus: a file of lines \"<gpu index> <xid>\"; each line appended is "
          "injected once, as if the driver had raised it (scripted GPU failures for tests)");
ABSL_FLAG(std::string, gpu_failure_policy, "node",
          "when a GPU fails: \"node\" taints the node (every task there moves) and asks the "
          "tasks using the GPU to abort; \"task\" only asks those tasks (the others stay)");
ABSL_FLAG(std::string, nvml_path, "libnvidia-ml.so.1", "the NVML library to load");
ABSL_FLAG(std::string, required_cuda, "", "flag a driver that cannot run this CUDA version");
ABSL_FLAG(std::string, clique_socket, "/var/run/phalanx/cliques.sock",
          "Unix socket of the local clique registry (empty: off)");
ABSL_FLAG(std::string, clique_listen, "",
          "also serve the clique registry on TCP at this host:port (e.g. 0.0.0.0:8479): task "
          "pods that may not mount a host path reach it on their node's address "
          "(docs/adr/0004; empty: off)");
ABSL_FLAG(int, clique_socket_max_connections, 64,
          "clique socket connections open at once; more are refused (and counted)");
ABSL_FLAG(absl::Duration, clique_request_deadline, absl::Seconds(2),
          "a clique socket request must arrive whole (and its answer be read) within this");
ABSL_FLAG(absl::Duration, clique_report_ttl, absl::Seconds(30),
          "a clique report not refreshed within this is dropped (clients refresh every 10 s)");
ABSL_FLAG(std::string, clique_ticket_key_file, "",
          "the agent key (a file of the Secret the operator writes, mounted by the chart) that "
          "clique tickets are verified with: a task may then claim only the (job, task) its "
          "ticket names, and no claim is accepted while the file is missing (empty: keys are "
          "credential digests, compared but not verified; see docs/security.md)");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9400", "HTTP address for /metrics and /healthz");

namespace {

using namespace phalanx;
using phalanx::base::Clock;

absl::StatusOr<std::unique_ptr<kube::RestClient>> ConnectToKube() {
  absl::StatusOr<kube::ClusterConfig> config =
      absl::GetFlag(FLAGS_kubeconfig).empty()
          ? kube::InClusterConfig()
          : kube::LoadKubeconfig(absl::GetFlag(FLAGS_kubeconfig));
  if (!config.ok()) return config.status();
  kube::RestClientOptions options;
  options.user_agent = "phalanx-agent/0.1";
  options.qps = 5;
  options.burst = 10;
  return kube::RestClient::Create(*config, options);
}

struct NoticeSources {
  std::vector<std::unique_ptr<agent::NoticeSource>> all;
  agent::SigtermSource* sigterm = nullptr;  // in `all`, when --notice_sources names it
};

// --notice_sources. Those that do I/O poll on threads of their own (BackgroundSource), each
// bounded by its own request timeout, so a hanging metadata or API server never stretches the
// tick; one that has not answered for `stale_after` is reported as failing.
absl::StatusOr<NoticeSources> MakeNoticeSources(kube::RestClient* client,
                                                const std::string& node_name, Clock& clock) {
  const absl::Duration poll_interval = absl::GetFlag(FLAGS_poll_interval);
  const absl::Duration stale_after = std::max(absl::Seconds(10), 10 * poll_interval);
  auto in_background = [&](std::unique_ptr<agent::NoticeSource> source) {
    return std::make_unique<agent::BackgroundSource>(std::move(source), clock, poll_interval,
                                                     stale_after);
  };
  NoticeSources sources;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_notice_sources), ',', absl::SkipEmpty())) {
    if (name == "sigterm") {
      auto source = std::make_unique<agent::SigtermSource>();
      sources.sigterm = source.get();
      sources.all.push_back(std::move(source));
    } else if (name == "node-taint") {
      if (client == nullptr) {
        return absl::InvalidArgumentError("the node-taint notice source needs --kube");
      }
      // The values this agent writes into its own phalanx.dev/preempting taint (the names of
      // its sources) are its own marker, not a notice.
      sources.all.push_back(in_background(std::make_unique<agent::NodeTaintSource>(
          *client, node_name,
          std::vector<std::string>{"node-taint", "gce-metadata", "aws-spot", "sigterm"})));
    } else if (name == "gce") {
      agent::GceMetadataOptions o;
      o.base_url = absl::GetFlag(FLAGS_gce_metadata_url);
      auto source = agent::GceMetadataSource::Create(o);
      if (!source.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--gce_metadata_url: ", source.status().message()));
      }
      sources.all.push_back(in_background(*std::move(source)));
    } else if (name == "aws") {
      agent::AwsSpotOptions o;
      o.base_url = absl::GetFlag(FLAGS_aws_metadata_url);
      auto source = agent::AwsSpotSource::Create(o);
      if (!source.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--aws_metadata_url: ", source.status().message()));
      }
      sources.all.push_back(in_background(*std::move(source)));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown notice source '", name, "' (node-taint, sigterm, gce, aws)"));
    }
  }
  return sources;
}

// The node's GPUs: NVML, or a fake inventory (the local cluster's virtual nodes). Without NVML
// the agent still runs (`status` says why there are no GPUs).
struct Gpus {
  std::unique_ptr<agent::NvmlApi> nvml;  // first: the members below point into it
  absl::Status status;
  std::unique_ptr<agent::FakeXidScript> xid_script;
  std::unique_ptr<agent::GpuHealthTracker> health;
};

absl::StatusOr<Gpus> OpenGpus() {
  Gpus gpus;
  if (!absl::GetFlag(FLAGS_fake_xid_file).empty() && absl::GetFlag(FLAGS_fake_gpus).empty()) {
    return absl::InvalidArgumentError("--fake_xid_file scripts fake GPUs: it needs --fake_gpus");
  }
  if (!absl::GetFlag(FLAGS_fake_gpus).empty()) {
    absl::StatusOr<std::unique_ptr<agent::FakeNvml>> fake =
        agent::FakeNvml::FromSpec(absl::GetFlag(FLAGS_fake_gpus));
    if (!fake.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--fake_gpus: ", fake.status().message()));
    }
    if (!absl::GetFlag(FLAGS_fake_xid_file).empty()) {
      gpus.xid_script =
          std::make_unique<agent::FakeXidScript>(absl::GetFlag(FLAGS_fake_xid_file), **fake);
    }
    gpus.nvml = *std::move(fake);
  } else {
    absl::StatusOr<std::unique_ptr<agent::NvmlApi>> loaded =
        agent::NvmlLoader::Load(absl::GetFlag(FLAGS_nvml_path));
    if (loaded.ok()) {
      gpus.nvml = *std::move(loaded);
    } else {
      gpus.status = loaded.status();
      PHX_LOG(WARNING) << "running without GPUs: " << gpus.status;
    }
  }
  if (gpus.nvml != nullptr) {
    absl::StatusOr<std::unique_ptr<agent::GpuHealthTracker>> tracker =
        agent::GpuHealthTracker::Create(*gpus.nvml);
    if (tracker.ok()) {
      gpus.health = *std::move(tracker);
      PHX_LOG(INFO) << gpus.health->inventory().gpus.size() << " GPU(s), driver "
                    << gpus.health->inventory().driver_version << ", CUDA "
                    << gpus.health->inventory().cuda_version;
    } else {
      gpus.status = tracker.status();
      PHX_LOG(WARNING) << "running without GPU health: " << gpus.status;
    }
  }
  return gpus;
}

// The Kubernetes side of the node: its preemption marker and Events about it (none without
// --kube).
struct NodeSide {
  std::unique_ptr<agent::NodeMarker> marker;
  std::unique_ptr<kube::EventRecorder> recorder;
  agent::NodeEventSink events;
};

NodeSide MakeNodeSide(kube::RestClient* client, const std::string& node_name, Clock& clock) {
  NodeSide side;
  if (client == nullptr) return side;
  side.marker = std::make_unique<agent::NodeMarker>(*client, node_name);
  side.recorder = std::make_unique<kube::EventRecorder>(*client, clock, "phalanx-agent", node_name);
  kube::Json node_ref = kube::Json::parse(absl::StrCat(
      R"({"apiVersion":"v1","kind":"Node","metadata":{"name":")", node_name, R"("}})"));
  if (absl::StatusOr<kube::Json> node = client->Get({"", "v1", "nodes", false}, "", node_name);
      node.ok()) {
    node_ref = *node;
  } else {
    PHX_LOG(WARNING) << "node " << node_name << " not readable yet: " << node.status();
  }
  side.events = [recorder = side.recorder.get(), node_ref](bool warning, const std::string& reason,
                                                           const std::string& message) {
    recorder->Record(node_ref, warning ? kube::EventType::kWarning : kube::EventType::kNormal,
                     reason, message);
  };
  return side;
}

// The same clique registry on the Unix socket and on TCP (each server its own loop).
absl::StatusOr<std::vector<std::unique_ptr<agent::CliqueSocketServer>>> StartCliqueServers(
    agent::CliqueRegistry& cliques, Clock& clock, agent::AgentMetrics& metrics) {
  std::vector<std::unique_ptr<agent::CliqueSocketServer>> servers;
  for (const std::string& endpoint :
       {absl::GetFlag(FLAGS_clique_socket), absl::GetFlag(FLAGS_clique_listen)}) {
    if (endpoint.empty()) continue;
    agent::CliqueSocketOptions socket_options;
    socket_options.path = endpoint;
    socket_options.max_connections = absl::GetFlag(FLAGS_clique_socket_max_connections);
    socket_options.request_deadline = absl::GetFlag(FLAGS_clique_request_deadline);
    absl::StatusOr<std::unique_ptr<agent::CliqueSocketServer>> started =
        agent::CliqueSocketServer::Start(socket_options, cliques, clock, &metrics);
    if (!started.ok()) return started.status();
    PHX_LOG(INFO) << "clique registry on " << endpoint;
    servers.push_back(*std::move(started));
  }
  return servers;
}

}  // namespace

int main(int argc, char** argv) {
  const base::ProcessMain process(argc, argv,
                                  {"agent", "phalanx-agent",
                                   "phalanx-agent [--kubeconfig FILE] --node_name NODE [flags]\n"
                                   "phalanx-agent preflight\n"
                                   "phalanx-agent prepare-socket-dir DIR UID:GID"});
  const std::vector<std::string>& args = process.args();
  if (args.size() == 1 && args[0] == "preflight") {
    return agent::RunPreflight(absl::GetFlag(FLAGS_nvml_path), std::cout);
  }
  if (!args.empty() && args[0] == "prepare-socket-dir") {
    if (args.size() != 3)
      return process.Fail("usage: phalanx-agent prepare-socket-dir DIR UID:GID");
    absl::StatusOr<agent::SocketDirOwner> owner = agent::ParseSocketDirOwner(args[2]);
    if (!owner.ok()) return process.Fail(std::string(owner.status().message()));
    if (absl::Status s = agent::PrepareSocketDir(args[1], *owner); !s.ok()) {
      return process.Fail(std::string(s.message()));
    }
    std::cout << "prepare-socket-dir: " << args[1] << " is mode 0750, owned by " << args[2] << "\n";
    return 0;
  }
  if (!args.empty()) return process.Fail("unexpected argument " + args[0]);

  // The downward API's variables; an empty one counts as unset (agent_env.h says why).
  const agent::AgentEnv env = agent::ReadAgentEnv(base::ProcessGetenv);
  std::string node_name = absl::GetFlag(FLAGS_node_name);
  if (node_name.empty()) node_name = env.node_name.value_or("");
  const bool use_kube = absl::GetFlag(FLAGS_kube);
  if (use_kube && node_name.empty()) {
    return process.Fail("--node_name (or $NODE_NAME, from the downward API) is required");
  }
  if (absl::GetFlag(FLAGS_poll_interval) <= absl::ZeroDuration()) {
    return process.Fail("--poll_interval must be positive");
  }
  if (absl::GetFlag(FLAGS_clique_report_ttl) <= absl::ZeroDuration()) {
    return process.Fail("--clique_report_ttl must be positive");
  }
  absl::StatusOr<agent::GpuFailurePolicy> policy =
      agent::ParseGpuFailurePolicy(absl::GetFlag(FLAGS_gpu_failure_policy));
  if (!policy.ok())
    return process.Fail(absl::StrCat("--gpu_failure_policy: ", policy.status().message()));

  prometheus::Registry registry;
  agent::AgentMetrics metrics(registry);
  base::Clock& clock = base::RealClock::Get();

  std::unique_ptr<kube::RestClient> client;
  if (use_kube) {
    absl::StatusOr<std::unique_ptr<kube::RestClient>> connected = ConnectToKube();
    if (!connected.ok()) return process.Fail(std::string(connected.status().message()));
    client = *std::move(connected);
  }
  absl::StatusOr<NoticeSources> sources = MakeNoticeSources(client.get(), node_name, clock);
  if (!sources.ok()) return process.Fail(std::string(sources.status().message()));
  agent::SigtermSource* const sigterm = sources->sigterm;
  absl::StatusOr<Gpus> gpus = OpenGpus();
  if (!gpus.ok()) return process.Fail(std::string(gpus.status().message()));
  NodeSide node = MakeNodeSide(client.get(), node_name, clock);

  agent::CliqueRegistryOptions registry_options;
  registry_options.ttl = absl::GetFlag(FLAGS_clique_report_ttl);
  if (const std::string key_file = absl::GetFlag(FLAGS_clique_ticket_key_file); !key_file.empty()) {
    // Read on every check: the kubelet writes the Secret's file after the agent starts when the
    // operator creates it later, and rewrites it on a rotation.
    registry_options.ticket_key = [key_file]() -> absl::StatusOr<std::string> {
      absl::StatusOr<std::string> key = base::ReadFileToString(key_file);
      if (!key.ok()) return key.status();
      return std::string(absl::StripAsciiWhitespace(*key));
    };
    PHX_LOG(INFO) << "clique channel: tickets verified with the key in " << key_file;
  } else {
    PHX_LOG(WARNING) << "clique channel: no --clique_ticket_key_file, so claims are not verified "
                        "(a local process can claim a task before it reports; docs/security.md)";
  }
  agent::CliqueRegistry cliques(registry_options);
  absl::StatusOr<std::vector<std::unique_ptr<agent::CliqueSocketServer>>> clique_servers =
      StartCliqueServers(cliques, clock, metrics);
  if (!clique_servers.ok()) return process.Fail(std::string(clique_servers.status().message()));

  agent::AgentOptions options;
  options.required_cuda = absl::GetFlag(FLAGS_required_cuda);
  options.gpu_failure_policy = *policy;
  agent::Agent node_agent(options, metrics, node.marker.get(), node.events, std::move(sources->all),
                          gpus->health.get(), gpus->status, cliques);

  absl::StatusOr<std::unique_ptr<http::StatusHttpServer>> status_server =
      http::StatusHttpServer::Start(absl::GetFlag(FLAGS_metrics_listen), registry,
                                    [] { return absl::OkStatus(); });
  if (!status_server.ok()) return process.Fail(std::string(status_server.status().message()));

  node_agent.Tick(clock.Now());  // a first check before saying ready
  base::PeriodicRunner ticker(clock, absl::GetFlag(FLAGS_poll_interval), [&](absl::Time now) {
    if (gpus->xid_script != nullptr) gpus->xid_script->Poll();
    node_agent.Tick(now);
  });
  std::string ready = absl::StrCat("ready metrics=127.0.0.1:", (*status_server)->port());
  // The TCP clique registry's port (it may have been asked for port 0), for tests and scripts.
  for (const auto& server : *clique_servers) {
    if (server->port() > 0) absl::StrAppend(&ready, " clique_port=", server->port());
  }
  std::cout << ready << std::endl;

  int sig = 0;
  while ((sig = process.WaitForStopSignal(absl::Hours(1))) == 0) {
  }
  ticker.Stop();
  if (sig == SIGTERM && sigterm != nullptr) {
    if (agent::AgentPodIsBeingDeleted(client.get(), env)) {
      // A DaemonSet rollout, `kubectl delete pod` or `helm uninstall`, not a node going away.
      PHX_LOG(INFO)
          << "SIGTERM while this agent's pod is being deleted or gone: not a node shutdown";
    } else {
      PHX_LOG(WARNING) << "SIGTERM: telling the cluster this node is going away";
      sigterm->Trigger();
      node_agent.Tick(clock.Now());
    }
  }
  for (auto& server : *clique_servers) server->Stop();
  return 0;
}
