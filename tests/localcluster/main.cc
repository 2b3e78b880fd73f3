// phalanx-localcluster: a Kubernetes-API-compatible local test cluster (see README.md here).
//   phalanx-localcluster --kubeconfig-out FILE [--backend auto|real|builtin] [--nodes N]
//       [--gpus-per-node G] [--simulated-nodes M] [--port P] [--work-dir DIR]
//       [--node-labels k=v,...] [--node-taints key=value:Effect,...]
//     serves in the foreground; prints `ready <url> backend=<real|builtin>` once it serves;
//     SIGTERM/SIGINT stop it and every pod process it started.
//   phalanx-localcluster admin --kubeconfig FILE COMMAND ...   fault injection (see Usage()).
//   phalanx-localcluster check --nodes-kind real   can this machine run real nodes? (exit 0, or 3
//     with what is missing)
//   phalanx-localcluster janitor --state-dir DIR --owner PID   (started by the real-node back
//     end: undoes its host changes once PID is gone without having undone them)
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/log.h"
#include "common/base/process_init.h"
#include "common/kube/cluster_config.h"
#include "common/kube/rest_client.h"
#include "tests/localcluster/local_cluster.h"
#include "tests/localcluster/real_nodes/host_changes.h"
#include "tests/localcluster/real_nodes/node_assets.h"

#ifndef PHALANX_IMAGES_DIR
#define PHALANX_IMAGES_DIR ""
#endif

namespace {

using phalanx::localcluster::Json;

constexpr char kUsage[] = R"(usage:
  phalanx-localcluster --kubeconfig-out FILE [--backend auto|real|builtin] [--nodes N]
      [--gpus-per-node G] [--simulated-nodes M] [--port P] [--work-dir DIR]
      [--node-labels k=v,...] [--node-taints key=value:Effect,...]
      [--nodes-kind process|real|auto] [--images FILE,...|DIR] [--node-lost-after S]
    --backend auto (default): a real control plane (etcd, kube-apiserver,
      kube-controller-manager) when KUBEBUILDER_ASSETS or the build tree's copy of
      ../shared/envtest has them, else the built-in API server; the environment
      variable PHALANX_LOCALCLUSTER_BACKEND sets the default. Prints
      `ready <url> backend=real|builtin nodes=process|real (Ns)` once it serves.
    Exits 3 when this machine lacks what was asked for (e.g. real nodes' prerequisites).
    --nodes-kind process (default): a pod's command runs as a local process (the image is
      ignored); real: real kubelets v1.28.7 with containerd, kube-scheduler, kube-proxy and
      CoreDNS (root, containerd, runc and the CNI plugins; ../shared/kubernetes-v1.28.7), pods
      run their images; auto: real when all of that is here, else process (the banner says
      why). PHALANX_LOCALCLUSTER_NODES_KIND sets the default. --images: OCI archives to
      import into every real node (default: the build tree's `make images` archives).
      --node-lost-after S: a real node whose kubelet stops (node-not-ready) is NotReady S
      seconds later and its pods are evicted S seconds after that (default: Kubernetes'
      40 s and 300 s). Every real node serves GCE-style metadata on http://<its address>:80
      (preempt-node sets instance/preempted to TRUE there first).
  phalanx-localcluster check --nodes-kind real
    says whether this machine can run real nodes (exit 0) or what is missing (exit 3)
  phalanx-localcluster admin --kubeconfig FILE COMMAND
    kill-pod NAMESPACE/POD [--signal N]     signal a pod's process (default SIGKILL)
    stop-pod NAMESPACE/POD                  SIGSTOP it (a hang)
    continue-pod NAMESPACE/POD              SIGCONT it
    fail-pod NAMESPACE/POD [--exit-code N]  fail a pod on a simulated node
    preempt-node NODE [--grace-seconds S]   metadata notice (real nodes), taint, evict after S (30)
    node-ready NODE | node-not-ready NODE   flip the node's Ready condition
    drop-watches                            end every open watch stream
    inject-errors --share X [--code 500|429]  answer a share X (0..1) of API requests with errors
)";

int Usage(const std::string& error) {
  std::cerr << "phalanx-localcluster: " << error << "\n" << kUsage;
  return 2;
}

// --flag VALUE pairs after the positional arguments; unknown flags are errors.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv, int from) {
  Args args;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      std::string value;
      const size_t eq = a.find('=');
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat(a, " needs a value"));
      }
      args.flags[a.substr(2)] = value;
    } else {
      args.positional.push_back(a);
    }
  }
  return args;
}

absl::StatusOr<int> IntFlag(const Args& args, const std::string& name, int fallback, int min) {
  auto it = args.flags.find(name);
  if (it == args.flags.end()) return fallback;
  int v = 0;
  if (!absl::SimpleAtoi(it->second, &v) || v < min) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be an integer >= ", min, ", got \"", it->second, "\""));
  }
  return v;
}

// "key=value:Effect" or "key:Effect".
absl::StatusOr<Json> ParseTaint(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("taint \"", text, "\" is not key=value:Effect"));
  }
  const std::string effect = text.substr(colon + 1);
  if (effect != "NoSchedule" && effect != "PreferNoSchedule" && effect != "NoExecute") {
    return absl::InvalidArgumentError(absl::StrCat("taint \"", text,
                                                   "\": effect must be NoSchedule, "
                                                   "PreferNoSchedule or NoExecute"));
  }
  const std::string kv = text.substr(0, colon);
  const size_t eq = kv.find('=');
  Json taint = Json::object();
  taint["key"] = Json::string(kv.substr(0, eq));
  if (eq != std::string::npos) taint["value"] = Json::string(kv.substr(eq + 1));
  taint["effect"] = Json::string(effect);
  return taint;
}

absl::StatusOr<std::vector<std::string>> ImageArchives(const Args& args);

int Serve(const Args& args) {
  static const std::vector<std::string> kKnown = {
      "kubeconfig-out",  "backend",    "nodes",    "gpus-per-node",
      "simulated-nodes", "port",       "work-dir", "node-labels",
      "node-taints",     "nodes-kind", "images",   "node-lost-after"};
  for (const auto& [flag, value] : args.flags) {
    if (std::find(kKnown.begin(), kKnown.end(), flag) == kKnown.end()) {
      return Usage(absl::StrCat("unknown flag --", flag));
    }
  }
  if (!args.positional.empty()) return Usage("unexpected argument " + args.positional[0]);
  phalanx::localcluster::LocalClusterOptions options;
  auto out = args.flags.find("kubeconfig-out");
  if (out == args.flags.end()) return Usage("--kubeconfig-out FILE is required");
  options.kubeconfig_out = out->second;
  // --backend, else PHALANX_LOCALCLUSTER_BACKEND (so a whole test run can pick one), else auto.
  std::string backend = "auto";
  if (const char* env = getenv("PHALANX_LOCALCLUSTER_BACKEND"); env != nullptr && *env != '\0') {
    backend = env;
  }
  if (auto flag = args.flags.find("backend"); flag != args.flags.end()) backend = flag->second;
  std::optional<phalanx::localcluster::Backend> parsed =
      phalanx::localcluster::ParseBackend(backend);
  if (!parsed.has_value()) {
    return Usage(
        "--backend (or PHALANX_LOCALCLUSTER_BACKEND) must be auto, real or builtin, got \"" +
        backend + "\"");
  }
  options.backend = *parsed;
  std::string nodes_kind = "process";
  if (const char* env = getenv("PHALANX_LOCALCLUSTER_NODES_KIND"); env != nullptr && *env != '\0') {
    nodes_kind = env;
  }
  if (auto flag = args.flags.find("nodes-kind"); flag != args.flags.end())
    nodes_kind = flag->second;
  std::optional<phalanx::localcluster::NodesKind> kind =
      phalanx::localcluster::ParseNodesKind(nodes_kind);
  if (!kind.has_value()) {
    return Usage(
        "--nodes-kind (or PHALANX_LOCALCLUSTER_NODES_KIND) must be process, real or auto, got \"" +
        nodes_kind + "\"");
  }
  options.nodes_kind = *kind;
  absl::StatusOr<std::vector<std::string>> images = ImageArchives(args);
  if (!images.ok()) return Usage(std::string(images.status().message()));
  options.image_archives = *images;
  options.janitor_program = "/proc/self/exe";
  absl::StatusOr<int> nodes = IntFlag(args, "nodes", 2, 0);
  absl::StatusOr<int> gpus = IntFlag(args, "gpus-per-node", 0, 0);
  absl::StatusOr<int> simulated = IntFlag(args, "simulated-nodes", 0, 0);
  absl::StatusOr<int> port = IntFlag(args, "port", 0, 0);
  absl::StatusOr<int> node_lost_after = IntFlag(args, "node-lost-after", 0, 0);
  for (const auto* s : {&nodes, &gpus, &simulated, &port, &node_lost_after}) {
    if (!s->ok()) return Usage(std::string(s->status().message()));
  }
  options.nodes = *nodes;
  options.gpus_per_node = *gpus;
  options.simulated_nodes = *simulated;
  options.port = *port;
  options.node_lost_after = absl::Seconds(*node_lost_after);
  if (auto labels = args.flags.find("node-labels"); labels != args.flags.end()) {
    for (absl::string_view kv : absl::StrSplit(labels->second, ',', absl::SkipEmpty())) {
      const size_t eq = kv.find('=');
      if (eq == absl::string_view::npos)
        return Usage(absl::StrCat("label \"", kv, "\" is not k=v"));
      options.node_labels[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
    }
  }
  if (auto taints = args.flags.find("node-taints"); taints != args.flags.end()) {
    for (absl::string_view t : absl::StrSplit(taints->second, ',', absl::SkipEmpty())) {
      absl::StatusOr<Json> taint = ParseTaint(std::string(t));
      if (!taint.ok()) return Usage(std::string(taint.status().message()));
      options.node_taints.push_back(*taint);
    }
  }
  if (auto dir = args.flags.find("work-dir"); dir != args.flags.end()) {
    options.work_dir = dir->second;
  } else {
    char tmpl[] = "/tmp/phalanx-localcluster-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return Usage("cannot create a work directory in /tmp");
    options.work_dir = tmpl;
  }

  // Block the stop signals before any thread starts so only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const absl::Time started = absl::Now();
  absl::StatusOr<std::unique_ptr<phalanx::localcluster::LocalCluster>> cluster =
      phalanx::localcluster::LocalCluster::Start(options);
  if (!cluster.ok()) {
    std::cerr << "phalanx-localcluster: " << cluster.status().message() << "\n";
    // 3: this machine lacks what was asked for (real nodes' assets, root, containerd; another
    // real-node cluster runs): test harnesses skip on it.
    return absl::IsFailedPrecondition(cluster.status()) ? 3 : 1;
  }
  std::cerr << "phalanx-localcluster: serving " << (*cluster)->url() << " with "
            << (*cluster)->nodes_description() << ", " << options.simulated_nodes
            << " simulated node(s), " << options.gpus_per_node << " GPU(s) per node\n"
            << "  control plane: " << (*cluster)->backend_description() << "\n"
            << "  export KUBECONFIG=" << (*cluster)->kubeconfig_path() << "\n"
            << "  pod logs: " << options.work_dir << "/logs\n";
  if ((*cluster)->control_plane() != nullptr) {
    std::cerr << "  control-plane logs (etcd, kube-apiserver, kube-controller-manager, audit): "
              << options.work_dir << "/control-plane\n";
  }
  if ((*cluster)->real_nodes() != nullptr) {
    std::cerr << "  real nodes (containerd, kubelet and kube-proxy logs, configs): "
              << options.work_dir << "/nodes\n";
  }
  std::cout << "ready " << (*cluster)->url() << " backend=" << (*cluster)->backend_name()
            << " nodes=" << (*cluster)->nodes_kind_name() << " ("
            << absl::StrFormat("%.1f", absl::ToDoubleSeconds(absl::Now() - started)) << "s)"
            << std::endl;
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::cerr << "phalanx-localcluster: signal " << sig << ", stopping pods and the server\n";
  (*cluster)->Stop();
  return 0;
}

// --images FILE,... or a folder (its *.oci.tar); default: the build tree's `make images`.
absl::StatusOr<std::vector<std::string>> ImageArchives(const Args& args) {
  std::string spec = PHALANX_IMAGES_DIR;
  auto flag = args.flags.find("images");
  if (flag != args.flags.end()) spec = flag->second;
  std::vector<std::string> out;
  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(spec, ec)) {
      if (absl::EndsWith(entry.path().string(), ".oci.tar")) out.push_back(entry.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  if (flag == args.flags.end()) return out;  // no `make images` yet: none
  for (absl::string_view file : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    if (!std::filesystem::exists(std::string(file), ec)) {
      return absl::InvalidArgumentError(absl::StrCat("--images: no ", file));
    }
    out.push_back(std::string(file));
  }
  return out;
}

int Check(const Args& args) {
  auto kind = args.flags.find("nodes-kind");
  if (kind == args.flags.end() || kind->second != "real") return Usage("check: --nodes-kind real");
  absl::StatusOr<phalanx::localcluster::NodeAssets> assets =
      phalanx::localcluster::FindNodeAssets();
  if (!assets.ok()) {
    std::cout << "real nodes: no: " << assets.status().message() << "\n";
    return 3;
  }
  std::cout << "real nodes: yes (" << assets->control_plane.dir << ")\n";
  return 0;
}

int Janitor(const Args& args) {
  auto dir = args.flags.find("state-dir");
  auto owner = args.flags.find("owner");
  int pid = 0;
  if (dir == args.flags.end() || owner == args.flags.end() ||
      !absl::SimpleAtoi(owner->second, &pid)) {
    return Usage("janitor: --state-dir DIR --owner PID");
  }
  // Its own session: a signal to the harness's process group must not take it along.
  setsid();
  return phalanx::localcluster::RunJanitor(dir->second, pid);
}

int Admin(const Args& args) {
  auto kubeconfig = args.flags.find("kubeconfig");
  std::string path = kubeconfig != args.flags.end() ? kubeconfig->second : "";
  if (path.empty()) {
    if (const char* env = getenv("KUBECONFIG"); env != nullptr) path = env;
  }
  if (path.empty()) return Usage("admin: --kubeconfig FILE (or KUBECONFIG) is required");
  if (args.positional.empty()) return Usage("admin: a command is required");
  absl::StatusOr<phalanx::kube::ClusterConfig> config = phalanx::kube::LoadKubeconfig(path);
  if (!config.ok()) return Usage(std::string(config.status().message()));
  absl::StatusOr<std::unique_ptr<phalanx::kube::RestClient>> client =
      phalanx::kube::RestClient::Create(*config);
  if (!client.ok()) return Usage(std::string(client.status().message()));

  const std::string& command = args.positional[0];
  const std::string target = args.positional.size() > 1 ? args.positional[1] : "";
  auto flag = [&](const std::string& name, const std::string& fallback) {
    auto it = args.flags.find(name);
    return it == args.flags.end() ? fallback : it->second;
  };
  std::string path_and_query;
  auto pod_path = [&](const std::string& verb) -> bool {
    const size_t slash = target.find('/');
    if (slash == std::string::npos) return false;
    path_and_query = absl::StrCat("/admin/pods/", target.substr(0, slash), "/",
                                  target.substr(slash + 1), "/", verb);
    return true;
  };
  bool ok = true;
  if (command == "kill-pod") {
    ok = pod_path("kill");
    path_and_query += "?signal=" + flag("signal", "9");
  } else if (command == "stop-pod") {
    ok = pod_path("stop");
  } else if (command == "continue-pod") {
    ok = pod_path("continue");
  } else if (command == "fail-pod") {
    ok = pod_path("fail");
    path_and_query += "?exitCode=" + flag("exit-code", "1");
  } else if (command == "preempt-node" && !target.empty()) {
    path_and_query = absl::StrCat("/admin/nodes/", target,
                                  "/preempt?graceSeconds=", flag("grace-seconds", "30"));
  } else if (command == "node-ready" && !target.empty()) {
    path_and_query = absl::StrCat("/admin/nodes/", target, "/ready");
  } else if (command == "node-not-ready" && !target.empty()) {
    path_and_query = absl::StrCat("/admin/nodes/", target, "/notready");
  } else if (command == "drop-watches") {
    path_and_query = "/admin/watches/drop";
  } else if (command == "inject-errors") {
    path_and_query =
        absl::StrCat("/admin/errors?share=", flag("share", ""), "&code=", flag("code", "500"));
  } else {
    ok = false;
  }
  if (!ok) return Usage(absl::StrCat("admin: bad command or target: ", command, " ", target));
  absl::StatusOr<std::string> result = (*client)->Raw("POST", path_and_query);
  // Never destroyed: the process ends with _Exit (main), not through cpprestsdk's teardown.
  (void)client->release();
  if (!result.ok()) {
    std::cerr << "phalanx-localcluster admin: " << result.status().message() << "\n";
    return 1;
  }
  std::cout << *result;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  phalanx::base::InitProcess("localcluster");
  const bool admin = argc > 1 && std::string(argv[1]) == "admin";
  const bool janitor = argc > 1 && std::string(argv[1]) == "janitor";
  const bool check = argc > 1 && std::string(argv[1]) == "check";
  const bool help = argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h");
  if (help) {
    std::cout << kUsage;
    return 0;
  }
  absl::StatusOr<Args> args = ParseArgs(argc, argv, admin || janitor || check ? 2 : 1);
  if (!args.ok()) return Usage(std::string(args.status().message()));
  if (janitor) return Janitor(*args);
  if (check) return Check(*args);
  if (admin) {
    // Out without static destructors: cpprestsdk's HTTPS connection pool, torn down at exit
    // while its asio threads still run, corrupts the heap now and then (microsoft/cpprestsdk
    // #1480, #1482: "malloc_consolidate(): unaligned fastbin chunk detected" at exit), which
    // turned a kill-pod that had worked into a failed command (deploy_helm_install, once).
    const int code = Admin(*args);
    std::cout.flush();
    std::cerr.flush();
    std::_Exit(code);
  }
  return Serve(*args);
}
