#include "tests/localcluster/real_nodes/real_nodes.h"

#include <openssl/rand.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/log.h"
#include "common/kube/cluster_config.h"
#include "tests/localcluster/free_port.h"
#include "tests/localcluster/real_nodes/oci_archive.h"
#include "tests/localcluster/text_files.h"

namespace phalanx::localcluster {
namespace {

namespace fs = std::filesystem;

constexpr char kPauseImage[] = "localhost/phalanx-pause:1";
constexpr char kTestboxImage[] = "localhost/phalanx-testbox:1";
constexpr char kGpuResource[] = "nvidia.com/gpu";

std::string RandomToken() {
  unsigned char bytes[24];
  RAND_bytes(bytes, sizeof(bytes));
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

// The first line a program prints for `args` ("" when it fails).
std::string FirstLineOf(const std::vector<std::string>& argv) {
  process::SubprocessOptions o;
  o.argv = argv;
  o.stderr_path = "/dev/null";
  absl::StatusOr<std::unique_ptr<process::Subprocess>> p = process::Subprocess::Start(o);
  if (!p.ok() || !(*p)->Wait(absl::Seconds(10)).has_value()) return "";
  std::vector<std::string> lines = (*p)->Lines();
  return lines.empty() ? "" : lines.front();
}

absl::Status Mkdirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status RunIp(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  if (!RunSystemTool(argv, absl::Seconds(10)).has_value()) {
    return absl::InternalError(absl::StrCat("`", absl::StrJoin(argv, " "), "` failed"));
  }
  return absl::OkStatus();
}

std::string TaintFlag(const kube::Json& taint) {
  auto field = [&](const char* name) {
    return taint.has_field(name) && taint.at(name).is_string() ? taint.at(name).as_string() : "";
  };
  const std::string value = field("value");
  return absl::StrCat(field("key"), value.empty() ? "" : "=" + value, ":", field("effect"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RealNodes>> RealNodes::Prepare(RealNodesOptions options) {
  if (options.nodes < 1 || options.nodes > 200) {
    return absl::InvalidArgumentError(
        absl::StrCat("real nodes: 1 to 200 nodes, not ", options.nodes));
  }
  std::unique_ptr<RealNodes> nodes(new RealNodes(std::move(options)));
  if (absl::Status s = nodes->PrepareHost(); !s.ok()) {
    nodes->Stop();
    return s;
  }
  return nodes;
}

absl::Status RealNodes::PrepareHost() {
  // A cluster that just stopped (or its janitor, which checks its record) may hold it a moment.
  absl::StatusOr<std::unique_ptr<HostLock>> lock =
      HostLock::Acquire(options_.state_dir, absl::Seconds(15));
  if (!lock.ok()) return lock.status();
  if (absl::StatusOr<HostRecord> leftover = (*lock)->Leftover(); leftover.ok()) {
    PHX_LOG(WARNING) << "real nodes: undoing what a real-node cluster (pid " << leftover->owner
                     << ", " << leftover->work_dir << ") left on this machine";
    for (const std::string& problem : UndoHostChanges(*leftover)) {
      PHX_LOG(WARNING) << "real nodes: " << problem;
    }
    (*lock)->Forget();
  }
  lock_ = *std::move(lock);

  for (int i = 0; i < options_.nodes; ++i) {
    NodeLayout node = LayOutNode(options_.work_dir, i);
    absl::StatusOr<int> port = FreeTcpPort();
    absl::StatusOr<int> healthz = FreeTcpPort();
    if (!port.ok()) return port.status();
    if (!healthz.ok()) return healthz.status();
    node.kubelet_port = *port;
    node.kubelet_healthz_port = *healthz;
    nodes_.push_back(std::move(node));
  }
  tokens_["system:kube-scheduler"] = RandomToken();
  tokens_["system:kube-proxy"] = RandomToken();
  tokens_["phalanx:coredns"] = RandomToken();
  for (const NodeLayout& node : nodes_) tokens_["system:node:" + node.name] = RandomToken();

  // The record first, so that whatever follows can be undone by whoever finds it.
  record_.owner = getpid();
  record_.work_dir = options_.work_dir;
  for (const std::string& key : SysctlsNodesChange()) {
    record_.sysctls[key] =
        std::string(absl::StripAsciiWhitespace(ReadTextFile("/proc/sys/" + key)));
  }
  // The folders Mkdirs will create, parents included, deepest first (the janitor removes them
  // in this order, each only if empty).
  for (const std::string& path : PerNodeHostPaths()) {
    std::error_code ec;
    for (fs::path dir = path; !dir.empty() && dir != dir.root_path() && !fs::exists(dir, ec);
         dir = dir.parent_path()) {
      record_.created_dirs.push_back(dir.string());
    }
  }
  if (absl::Status s = lock_->Save(record_); !s.ok()) return s;
  if (absl::Status s = StartJanitor(); !s.ok()) return s;

  for (const std::string& path : PerNodeHostPaths()) {
    if (absl::Status s = Mkdirs(path); !s.ok()) return s;
  }
  const std::vector<std::string> hierarchies = CgroupHierarchies();
  for (const NodeLayout& node : nodes_) {
    for (const std::string& dir :
         {node.dir + "/logs", node.cni_conf_dir(), node.dir + "/cni-data", node.kubelet_root()}) {
      if (absl::Status s = Mkdirs(dir); !s.ok()) return s;
    }
    for (const std::string& path : PerNodeHostPaths()) {
      if (absl::Status s = Mkdirs(node.host_path(path)); !s.ok()) return s;
    }
    // The bridge the CNI plugin would make with the first pod, made now: the node's address
    // must exist before the kubelet binds it (and, for node-0, before the API server does).
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"link", "add", node.bridge, "type", "bridge"},
          std::vector<std::string>{"addr", "add", node.address + "/24", "dev", node.bridge},
          std::vector<std::string>{"link", "set", node.bridge, "up"}}) {
      if (absl::Status s = RunIp(args); !s.ok()) return s;
    }
    // The kubelet's cgroup root must exist in every hierarchy before it starts.
    for (const std::string& h : hierarchies) {
      const std::string dir = h + "/" + node.cgroup_root;
      if (absl::Status s = Mkdirs(dir); !s.ok()) return s;
      for (const char* file : {"cpuset.cpus", "cpuset.mems"}) {
        if (fs::exists(h + "/" + file)) {
          if (absl::Status s = WriteTextFile(dir + "/" + file, ReadTextFile(h + "/" + file), 0644);
              !s.ok()) {
            return s;
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RealNodes::StartJanitor() {
  if (options_.janitor_program.empty()) return absl::OkStatus();
  process::SubprocessOptions o;
  o.argv = {options_.janitor_program, "janitor", "--state-dir",
            options_.state_dir,       "--owner", absl::StrCat(getpid())};
  // Never a pipe to us: it must outlive this process (no SIGPIPE once we are gone).
  o.stdout_path = options_.state_dir + "/janitor.log";
  absl::StatusOr<std::unique_ptr<process::Subprocess>> janitor = process::Subprocess::Start(o);
  if (!janitor.ok()) return janitor.status();
  janitor_ = *std::move(janitor);
  return absl::OkStatus();
}

std::vector<std::string> RealNodes::ApiServerFlags() const {
  if (options_.node_lost_after <= absl::ZeroDuration()) return {};
  const int64_t seconds = absl::ToInt64Seconds(options_.node_lost_after);
  return {absl::StrCat("--default-not-ready-toleration-seconds=", seconds),
          absl::StrCat("--default-unreachable-toleration-seconds=", seconds)};
}

std::vector<std::string> RealNodes::ControllerManagerFlags() const {
  if (options_.node_lost_after <= absl::ZeroDuration()) return {};
  return {absl::StrCat(
              "--node-monitor-grace-period=", absl::ToInt64Seconds(options_.node_lost_after), "s"),
          "--node-monitor-period=1s"};
}

std::vector<std::string> RealNodes::TokenLines() const {
  std::vector<std::string> lines;
  for (const auto& [user, token] : tokens_) {
    std::string groups;
    if (absl::StartsWith(user, "system:node:")) groups = "system:nodes";
    if (user == "phalanx:coredns") groups = "system:masters";  // a harness-only reader
    lines.push_back(absl::StrCat(token, ",", user, ",", user, ",\"", groups, "\""));
  }
  return lines;
}

absl::Status RealNodes::StartDaemon(const std::string& name, const std::string& log,
                                    std::vector<std::string> argv, Daemon** out) {
  process::SubprocessOptions o;
  o.argv = std::move(argv);
  o.stdout_path = log;
  o.die_with_parent = true;  // the janitor undoes the rest after a SIGKILL
  absl::StatusOr<std::unique_ptr<process::Subprocess>> p = process::Subprocess::Start(o);
  if (!p.ok()) return p.status();
  daemons_.push_back(Daemon{name, log, *std::move(p)});
  if (out != nullptr) *out = &daemons_.back();
  return absl::OkStatus();
}

absl::Status RealNodes::Start(const std::string& api_url, const std::string& ca_file,
                              const std::string& admin_token) {
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  const NodeAssets& a = options_.assets;
  daemons_.reserve(3 + 2 * nodes_.size());  // Daemon* stay valid
  kube::ClusterConfig config;
  config.server = api_url;
  config.ca_pem = ReadTextFile(ca_file);
  config.token = admin_token;
  absl::StatusOr<std::unique_ptr<kube::RestClient>> client = kube::RestClient::Create(config);
  if (!client.ok()) return client.status();
  client_ = *std::move(client);
  // "Kubernetes v1.28.7"; "containerd github.com/containerd/containerd 1.6.20~ds1 ..."
  if (std::vector<std::string> f = absl::StrSplit(FirstLineOf({a.kubelet, "--version"}), ' ');
      f.size() >= 2) {
    kubelet_version_ = f[1];
  }
  if (std::vector<std::string> f = absl::StrSplit(FirstLineOf({a.containerd, "--version"}), ' ');
      f.size() >= 3) {
    containerd_version_ = std::string(f[2].substr(0, f[2].find('~')));
  }

  const std::string shared = options_.work_dir + "/nodes";
  // Two images of one static program each, packed here so nodes need no builder or registry:
  // the pod sandbox, and the node tests' misbehaving program.
  struct OneBinaryImage {
    const char* name;
    std::string binary;
    const char* user;
  };
  for (const OneBinaryImage& one : {OneBinaryImage{kPauseImage, a.pause, ""},
                                    OneBinaryImage{kTestboxImage, a.testbox, "65532:65532"}}) {
    const std::string file = one.binary.substr(one.binary.rfind('/') + 1);
    ImageSpec image{.name = one.name,
                    .files = {{file, ReadTextFile(one.binary), 0755}},
                    .entrypoint = {"/" + file},
                    .user = one.user};
    if (image.files.front().content.empty()) {
      return absl::InternalError("cannot read " + one.binary);
    }
    if (absl::Status s =
            WriteTextFile(absl::StrCat(shared, "/", file, ".oci.tar"), OciArchive(image), 0644);
        !s.ok()) {
      return s;
    }
  }
  auto kubeconfig = [&](const std::string& file, const std::string& user) -> absl::Status {
    return WriteTextFile(file, TokenKubeconfig(api_url, ca_file, tokens_.at(user)));
  };
  if (absl::Status s = kubeconfig(shared + "/scheduler.kubeconfig", "system:kube-scheduler");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = StartDaemon(
          "kube-scheduler", shared + "/kube-scheduler.log",
          {a.kube_scheduler, "--kubeconfig=" + shared + "/scheduler.kubeconfig",
           "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--v=1"});
      !s.ok()) {
    return s;
  }

  // Every node's containerd, then the images into all of them at once, then the kubelets.
  for (NodeLayout& node : nodes_) {
    if (absl::Status s = StartNode(node, api_url, ca_file); !s.ok()) return s;
  }
  std::vector<absl::Status> imported(nodes_.size());
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      threads.emplace_back([&, i] { imported[i] = ImportImages(nodes_[i]); });
    }
    for (std::thread& t : threads) t.join();
  }
  for (const absl::Status& s : imported) {
    if (!s.ok()) return s;
  }
  for (NodeLayout& node : nodes_) {
    Daemon* containerd = FindDaemon("containerd " + node.name);
    std::vector<std::string> argv = {
        a.nsenter,
        absl::StrCat("--mount=/proc/", containerd->process->pid(), "/ns/mnt"),
        "--",
        a.kubelet,
        "--config=" + node.kubelet_config(),
        "--kubeconfig=" + node.kubeconfig(),
        "--root-dir=" + node.kubelet_root(),
        "--cert-dir=" + node.kubelet_root() + "/pki",
        "--hostname-override=" + node.name,
        "--node-ip=" + node.address,
        "--v=1"};
    if (!options_.node_labels.empty()) {
      std::vector<std::string> labels;
      for (const auto& [k, v] : options_.node_labels) labels.push_back(k + "=" + v);
      argv.push_back("--node-labels=" + absl::StrJoin(labels, ","));
    }
    if (!options_.node_taints.empty()) {
      std::vector<std::string> taints;
      for (const kube::Json& t : options_.node_taints) taints.push_back(TaintFlag(t));
      argv.push_back("--register-with-taints=" + absl::StrJoin(taints, ","));
    }
    if (absl::Status s =
            StartDaemon("kubelet " + node.name, node.dir + "/logs/kubelet.log", std::move(argv));
        !s.ok()) {
      return s;
    }
  }

  absl::StatusOr<int> proxy_metrics = FreeTcpPort();
  absl::StatusOr<int> proxy_healthz = FreeTcpPort();
  if (!proxy_metrics.ok()) return proxy_metrics.status();
  if (!proxy_healthz.ok()) return proxy_healthz.status();
  for (const auto& [file, text] : std::vector<std::pair<std::string, std::string>>{
           {shared + "/kube-proxy.yaml",
            KubeProxyConfig(shared + "/kube-proxy.kubeconfig", *proxy_metrics, *proxy_healthz)},
           {shared + "/Corefile", Corefile(nodes_, shared + "/coredns.kubeconfig")}}) {
    if (absl::Status s = WriteTextFile(file, text); !s.ok()) return s;
  }
  for (const auto& [file, user] : std::vector<std::pair<std::string, std::string>>{
           {shared + "/kube-proxy.kubeconfig", "system:kube-proxy"},
           {shared + "/coredns.kubeconfig", "phalanx:coredns"}}) {
    if (absl::Status s = kubeconfig(file, user); !s.ok()) return s;
  }
  // One kube-proxy serves every node: they all share the host's network namespace.
  if (absl::Status s = StartDaemon("kube-proxy", shared + "/kube-proxy.log",
                                   {a.kube_proxy, "--config=" + shared + "/kube-proxy.yaml",
                                    "--hostname-override=" + nodes_.front().name});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = StartDaemon("coredns", shared + "/coredns.log",
                                   {a.coredns, "-conf", shared + "/Corefile"});
      !s.ok()) {
    return s;
  }
  for (const NodeLayout& node : nodes_) {
    absl::StatusOr<std::unique_ptr<NodeMetadataServer>> server =
        NodeMetadataServer::Start(node.address);
    if (server.ok()) {
      metadata_[node.name] = *std::move(server);
    } else {  // preempt-node still taints and evicts; only the metadata notice is missing
      PHX_LOG(WARNING) << "real nodes: " << node.name
                       << " has no metadata server: " << server.status();
    }
  }
  if (absl::Status s = WaitUntilReady(deadline); !s.ok()) return s;
  return AdvertiseGpus();
}

absl::Status RealNodes::StartNode(NodeLayout& node, const std::string& api_url,
                                  const std::string& ca_file) {
  for (const auto& [file, text] : std::vector<std::pair<std::string, std::string>>{
           {node.containerd_config(), ContainerdConfig(node, kPauseImage)},
           {node.cni_conf_dir() + "/10-phalanx.conflist", CniNetwork(node)},
           {node.kubelet_config(), KubeletConfig(node, ca_file, options_.node_lost_after)},
           {node.kubeconfig(),
            TokenKubeconfig(api_url, ca_file, tokens_.at("system:node:" + node.name))}}) {
    if (absl::Status s = WriteTextFile(file, text); !s.ok()) return s;
  }
  // containerd (and the kubelet, which joins it) in a mount namespace of their own, where the
  // host folders nodes must not share are this node's copies. Mounts made there (pod volumes,
  // network namespaces, root file systems) vanish with it.
  std::string script = "set -e; ";
  for (const std::string& path : PerNodeHostPaths()) {
    absl::StrAppend(&script, "mount --bind '", node.host_path(path), "' '", path, "'; ");
  }
  absl::StrAppend(&script, "exec '", options_.assets.containerd, "' --config '",
                  node.containerd_config(), "'");
  Daemon* daemon = nullptr;
  if (absl::Status s = StartDaemon("containerd " + node.name, node.dir + "/logs/containerd.log",
                                   {options_.assets.unshare, "--mount", "--propagation", "slave",
                                    "--", "/bin/sh", "-c", script},
                                   &daemon);
      !s.ok()) {
    return s;
  }
  const absl::Time until = absl::Now() + absl::Seconds(30);
  while (!Ctr(node, {"version"}, absl::Seconds(5)).ok()) {
    if (absl::Status s = CheckDaemons(); !s.ok()) return s;
    if (absl::Now() > until) {
      return absl::UnavailableError(absl::StrCat("real nodes: containerd of ", node.name,
                                                 " did not answer within 30s; ", daemon->log,
                                                 " ends:\n", LogTail(daemon->log)));
    }
    // Start-up polling of a child daemon (bounded by `until`).
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::OkStatus();
}

absl::Status RealNodes::ImportImages(const NodeLayout& node) {
  std::vector<std::string> archives = {options_.work_dir + "/nodes/phalanx-pause.oci.tar",
                                       options_.work_dir + "/nodes/phalanx-testbox.oci.tar"};
  archives.insert(archives.end(), options_.image_archives.begin(), options_.image_archives.end());
  for (const std::string& archive : archives) {
    if (absl::Status s =
            Ctr(node, {"images", "import", "--snapshotter", "native", archive}, absl::Seconds(120));
        !s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("real nodes: importing ", archive, " into ", node.name, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status RealNodes::Ctr(const NodeLayout& node, std::vector<std::string> args,
                            absl::Duration timeout) const {
  std::vector<std::string> argv = {options_.assets.ctr, "--address", node.containerd_socket(), "-n",
                                   "k8s.io"};
  argv.insert(argv.end(), args.begin(), args.end());
  process::SubprocessOptions o;
  o.argv = argv;
  o.stdout_path = node.dir + "/logs/ctr.log";
  absl::StatusOr<std::unique_ptr<process::Subprocess>> p = process::Subprocess::Start(o);
  if (!p.ok()) return p.status();
  if (!(*p)->Wait(timeout).has_value()) {
    return absl::DeadlineExceededError(absl::StrCat("`ctr ", absl::StrJoin(args, " "),
                                                    "` took over ", absl::FormatDuration(timeout)));
  }
  if (std::optional<int> code = (*p)->ExitCode(); code != 0) {
    return absl::UnavailableError(absl::StrCat("`ctr ", absl::StrJoin(args, " "), "` exited ",
                                               code.value_or(-1), "; ", o.stdout_path, " ends:\n",
                                               LogTail(o.stdout_path, 3)));
  }
  return absl::OkStatus();
}

absl::Status RealNodes::CheckDaemons() const {
  for (const Daemon& d : daemons_) {
    if (std::optional<int> code = d.process->ExitCode(); code.has_value()) {
      return absl::UnavailableError(absl::StrCat("real nodes: ", d.name, " exited with ", *code,
                                                 "; ", d.log, " ends:\n", LogTail(d.log)));
    }
  }
  return absl::OkStatus();
}

absl::Status RealNodes::WaitUntilReady(absl::Time deadline) {
  std::string last = "no answer";
  while (true) {
    if (absl::Status s = CheckDaemons(); !s.ok()) return s;
    absl::StatusOr<std::string> list = client_->Raw("GET", "/api/v1/nodes");
    if (list.ok()) {
      int ready = 0;
      try {
        const kube::Json nodes = kube::Json::parse(*list);
        for (const kube::Json& node : nodes.at("items").as_array()) {
          for (const kube::Json& c : node.at("status").at("conditions").as_array()) {
            if (c.at("type").as_string() == "Ready" && c.at("status").as_string() == "True") {
              ++ready;
            }
          }
        }
      } catch (const std::exception&) {
      }
      last = absl::StrCat(ready, " of ", nodes_.size(), " nodes Ready");
      if (ready == static_cast<int>(nodes_.size())) return absl::OkStatus();
    }
    if (absl::Now() > deadline) {
      const std::string log = nodes_.front().dir + "/logs/kubelet.log";
      return absl::UnavailableError(absl::StrCat("real nodes: not Ready within ",
                                                 absl::FormatDuration(options_.start_timeout), " (",
                                                 last, "); ", log, " ends:\n", LogTail(log)));
    }
    // Start-up polling of the API server (bounded by the deadline).
    absl::SleepFor(absl::Milliseconds(250));
  }
}

absl::Status RealNodes::AdvertiseGpus() {
  if (options_.gpus_per_node == 0) return absl::OkStatus();
  // Kubernetes' documented way to advertise an extended resource without a device plugin: the
  // kubelet keeps it in capacity and derives allocatable from it.
  const std::string count = absl::StrCat(options_.gpus_per_node);
  const std::string patch =
      absl::StrCat(R"({"status":{"capacity":{")", kGpuResource, R"(":")", count,
                   R"("},"allocatable":{")", kGpuResource, R"(":")", count, R"("}}})");
  for (const NodeLayout& node : nodes_) {
    absl::StatusOr<std::string> r = client_->Raw("PATCH", "/api/v1/nodes/" + node.name + "/status",
                                                 patch, "application/merge-patch+json");
    if (!r.ok()) {
      return absl::UnavailableError(
          absl::StrCat("real nodes: advertising GPUs on ", node.name, ": ", r.status().message()));
    }
  }
  return absl::OkStatus();
}

std::string RealNodes::Description() const {
  return absl::StrCat(nodes_.size(), " real kubelet(s) ", kubelet_version_, ", containerd ",
                      containerd_version_);
}

const NodeLayout* RealNodes::FindNode(const std::string& name) const {
  for (const NodeLayout& n : nodes_) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

RealNodes::Daemon* RealNodes::FindDaemon(const std::string& name) {
  for (Daemon& d : daemons_) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

absl::StatusOr<std::pair<const NodeLayout*, std::string>> RealNodes::ContainerOf(
    const std::string& ns, const std::string& name) {
  absl::StatusOr<std::string> text =
      client_->Raw("GET", absl::StrCat("/api/v1/namespaces/", ns, "/pods/", name));
  if (!text.ok()) return text.status();
  try {
    const kube::Json pod = kube::Json::parse(*text);
    const NodeLayout* node = FindNode(pod.at("spec").at("nodeName").as_string());
    const std::string id =
        pod.at("status").at("containerStatuses").as_array().at(0).at("containerID").as_string();
    constexpr absl::string_view kPrefix = "containerd://";
    if (node == nullptr || !absl::StartsWith(id, kPrefix)) throw std::runtime_error("no container");
    return std::make_pair(node, id.substr(kPrefix.size()));
  } catch (const std::exception&) {
    return absl::FailedPreconditionError(
        absl::StrCat("pod ", ns, "/", name, " has no running container on a real node"));
  }
}

absl::Status RealNodes::KillPod(const std::string& ns, const std::string& name, int signal) {
  absl::StatusOr<std::pair<const NodeLayout*, std::string>> c = ContainerOf(ns, name);
  if (!c.ok()) return c.status();
  return Ctr(*c->first, {"tasks", "kill", "--signal", absl::StrCat(signal), c->second});
}

absl::Status RealNodes::StopPod(const std::string& ns, const std::string& name) {
  absl::StatusOr<std::pair<const NodeLayout*, std::string>> c = ContainerOf(ns, name);
  if (!c.ok()) return c.status();
  return Ctr(*c->first, {"tasks", "pause", c->second});  // the cgroup freezer: a hang
}

absl::Status RealNodes::ContinuePod(const std::string& ns, const std::string& name) {
  absl::StatusOr<std::pair<const NodeLayout*, std::string>> c = ContainerOf(ns, name);
  if (!c.ok()) return c.status();
  return Ctr(*c->first, {"tasks", "resume", c->second});
}

absl::Status RealNodes::FailPod(const std::string&, const std::string&, int) {
  return absl::UnimplementedError(
      "fail-pod is for simulated nodes; on a real node use kill-pod (the exit code is the "
      "signal's, as a real kubelet reports it)");
}

absl::Status RealNodes::PreemptNode(const std::string& node, absl::Duration grace) {
  if (FindNode(node) == nullptr)
    return absl::NotFoundError(absl::StrCat("node ", node, " not found"));
  // What a cloud does: the metadata server says preempted (the agent's gce notice source reads
  // it), the termination taint (its node-taint source reads that) ...
  if (auto it = metadata_.find(node); it != metadata_.end()) it->second->SetPreempted(true);
  absl::StatusOr<std::string> text = client_->Raw("GET", "/api/v1/nodes/" + node);
  if (!text.ok()) return text.status();
  kube::Json taints = kube::Json::array();
  try {
    const kube::Json object = kube::Json::parse(*text);
    if (object.at("spec").has_field("taints")) taints = object.at("spec").at("taints");
  } catch (const std::exception&) {
    return absl::InternalError("unreadable node " + node);
  }
  kube::Json taint = kube::Json::object();
  taint["key"] = kube::Json::string("cloud.google.com/impending-node-termination");
  taint["effect"] = kube::Json::string("NoSchedule");
  taints[taints.size()] = taint;
  kube::Json patch = kube::Json::object();
  patch["spec"] = kube::Json::object();
  patch["spec"]["taints"] = taints;
  if (absl::StatusOr<std::string> r = client_->Raw(
          "PATCH", "/api/v1/nodes/" + node, patch.serialize(), "application/merge-patch+json");
      !r.ok()) {
    return r.status();
  }
  // ... then, after the notice's grace, every pod there evicted through the Eviction API (each
  // with its own termination grace period; the API server adds DisruptionTarget).
  absl::MutexLock lock(&mu_);
  preemptions_.emplace_back([this, node, grace] {
    if (stopping_.WaitForNotificationWithTimeout(grace)) return;
    absl::StatusOr<std::string> pods =
        client_->Raw("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3D" + node);
    if (!pods.ok()) return;
    try {
      // Named: a range-for over a member of a temporary would outlive the temporary.
      const kube::Json list = kube::Json::parse(*pods);
      for (const kube::Json& pod : list.at("items").as_array()) {
        const std::string ns = pod.at("metadata").at("namespace").as_string();
        const std::string name = pod.at("metadata").at("name").as_string();
        const std::string eviction =
            absl::StrCat(R"({"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":")",
                         name, R"(","namespace":")", ns, R"("}})");
        absl::StatusOr<std::string> r = client_->Raw(
            "POST", absl::StrCat("/api/v1/namespaces/", ns, "/pods/", name, "/eviction"), eviction);
        if (!r.ok()) PHX_LOG(WARNING) << "evicting " << ns << "/" << name << ": " << r.status();
      }
    } catch (const std::exception&) {
    }
  });
  return absl::OkStatus();
}

absl::Status RealNodes::SetNodeReady(const std::string& node, bool ready) {
  Daemon* kubelet = FindDaemon("kubelet " + node);
  if (kubelet == nullptr) return absl::NotFoundError(absl::StrCat("node ", node, " not found"));
  // A node that stops answering: its kubelet frozen, so the node-lifecycle controller marks it
  // NotReady after its grace period and taints it, as for a lost machine.
  kubelet->process->Signal(ready ? SIGCONT : SIGSTOP);
  return absl::OkStatus();
}

void RealNodes::Stop() {
  if (stopped_) return;
  stopped_ = true;
  stopping_.Notify();
  std::vector<std::thread> preemptions;
  {
    absl::MutexLock lock(&mu_);
    preemptions.swap(preemptions_);
  }
  for (std::thread& t : preemptions) t.join();
  // The kubelets first, so nothing restarts the containers the undo kills.
  for (Daemon& d : daemons_) {
    if (absl::StartsWith(d.name, "kubelet")) {
      d.process->Signal(SIGCONT);
      d.process->Signal(SIGTERM);
    }
  }
  for (Daemon& d : daemons_) {
    if (absl::StartsWith(d.name, "kubelet")) d.process->Wait(absl::Seconds(5));
  }
  metadata_.clear();
  if (lock_ != nullptr) {
    for (const std::string& problem : UndoHostChanges(record_)) {
      PHX_LOG(WARNING) << "real nodes: " << problem;
    }
    lock_->Forget();
  }
  daemons_.clear();  // already SIGKILLed by the undo; reaped here
  lock_.reset();
  if (janitor_ != nullptr) janitor_->Signal(SIGKILL);
  janitor_.reset();
}

RealNodes::~RealNodes() { Stop(); }

}  // namespace phalanx::localcluster
