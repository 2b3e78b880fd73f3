// phalanx-operator-bench: whole-workload benchmarks of phalanx-operator on the local cluster.
// Everything is a real process: phalanx-localcluster, phalanx-operator, and (for the recovery
// figures) the job's phalanx-coordinator and phalanx-sample-worker tasks.
//   scale:   N TrainingJobs × T tasks on simulated nodes (pods run no process): time until every
//            pod exists and every job's status says all its tasks are ready, API requests per
//            job, operator RSS with those jobs, operator CPU while nothing changes.
//   replace: one T-task job of sample workers; kill one task's process, K times: kill →
//            replacement pod seen on a watch, and kill → all T tasks registered with the
//            coordinator again (the new incarnation included).
// Writes JSON (--out) and prints a table. See docs/benchmarks.md.
#include <grpcpp/grpcpp.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "bench/standin_coordinators.h"
#include "common/auth/tls_issuer.h"
#include "common/base/clock.h"
#include "common/base/process_init.h"
#include "common/kube/cluster_config.h"
#include "common/kube/informer.h"
#include "common/kube/object_meta.h"
#include "common/kube/rest_client.h"
#include "common/process/subprocess.h"
#include "common/testing/http_get.h"
#include "operator/api/yaml_json.h"
#include "operator/controller/observe.h"
#include "operator/controller/operator_ca.h"
#include "operator/controller/operator_key.h"
#include "operator/controller/reconciler.h"
#include "runtime/proto/coordination.grpc.pb.h"

ABSL_FLAG(std::string, bin_dir, "build", "build directory");
ABSL_FLAG(std::string, source_dir, ".", "source directory (for the CRD)");
ABSL_FLAG(std::string, out, "build/bench/operator.json", "where the JSON goes");
ABSL_FLAG(int, jobs, 200, "scale: TrainingJobs to create");
ABSL_FLAG(int, tasks, 8, "tasks per job (both workloads)");
ABSL_FLAG(int, simulated_nodes, 50, "scale: simulated nodes");
ABSL_FLAG(double, qps, 200, "operator --qps");
ABSL_FLAG(int, burst, 400, "operator --burst");
ABSL_FLAG(absl::Duration, idle, absl::Seconds(30), "scale: idle window for the CPU figure");
ABSL_FLAG(absl::Duration, settle, absl::Seconds(30), "scale: wait before the idle window");
ABSL_FLAG(int, kills, 5, "replace: tasks killed, one at a time");
ABSL_FLAG(std::string, only, "", "comma-separated subset: scale,replace");
ABSL_FLAG(bool, stand_in_coordinators, true,
          "scale: answer the operator's job-state watch on every coordinator port, as running "
          "coordinators do (false: the coordinators are unreachable)");
ABSL_FLAG(std::string, backend, "builtin",
          "the local cluster's back end: builtin (the figures in docs/benchmarks.md), real (etcd + "
          "kube-apiserver sharing the machine's cores) or auto");

namespace phalanx::bench {
namespace {

namespace pb = ::phalanx::coord::v1;
// The sum of a metric's samples in a Prometheus text exposition.
double SumOfMetric(const std::string& text, const std::string& name) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name) || line.size() <= name.size() ||
        (line[name.size()] != '{' && line[name.size()] != ' ')) {
      continue;
    }
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) sum += v;
  }
  return sum;
}

// A local cluster and an operator on it, stopped on destruction.
class Stack {
 public:
  // `before_operator` runs once the cluster is up, before the operator starts (false: give up).
  static std::unique_ptr<Stack> Start(
      const std::string& name, std::vector<std::string> cluster_args,
      std::vector<std::string> operator_args,
      const std::function<bool(kube::Client&)>& before_operator = nullptr) {
    auto s = std::unique_ptr<Stack>(new Stack());
    s->dir_ = std::filesystem::temp_directory_path() /
              absl::StrCat("phalanx-operator-bench-", name, "-", getpid());
    std::filesystem::create_directories(s->dir_);
    const std::string bin = absl::GetFlag(FLAGS_bin_dir);
    const std::string kubeconfig = (s->dir_ / "kubeconfig").string();
    std::vector<std::string> argv = {bin + "/tests/localcluster/phalanx-localcluster",
                                     "--kubeconfig-out",
                                     kubeconfig,
                                     "--work-dir",
                                     (s->dir_ / "cluster").string(),
                                     "--backend",
                                     absl::GetFlag(FLAGS_backend)};
    argv.insert(argv.end(), cluster_args.begin(), cluster_args.end());
    s->cluster_ = s->Run(argv, "cluster");
    if (s->cluster_ == nullptr) return nullptr;
    absl::StatusOr<kube::ClusterConfig> config = kube::LoadKubeconfig(kubeconfig);
    if (!config.ok()) return nullptr;
    kube::RestClientOptions options;
    options.qps = 1000;
    options.burst = 2000;
    absl::StatusOr<std::unique_ptr<kube::RestClient>> client =
        kube::RestClient::Create(*config, options);
    if (!client.ok()) return nullptr;
    s->client_ = *std::move(client);
    if (!ApplyTrainingJobCrd(*s->client_, absl::GetFlag(FLAGS_source_dir))) return nullptr;
    if (before_operator && !before_operator(*s->client_)) return nullptr;
    argv = {bin + "/operator/phalanx-operator",
            "--kubeconfig",
            kubeconfig,
            "--metrics_listen",
            "127.0.0.1:0",
            "--lease_namespace",
            "default",
            "--qps",
            absl::StrCat(absl::GetFlag(FLAGS_qps)),
            "--burst",
            absl::StrCat(absl::GetFlag(FLAGS_burst))};
    argv.insert(argv.end(), operator_args.begin(), operator_args.end());
    s->operator_ = s->Run(argv, "operator");
    if (s->operator_ == nullptr) return nullptr;
    s->metrics_port_ = std::stoi(s->ready_line_.substr(s->ready_line_.rfind(':') + 1));
    return s;
  }

  ~Stack() {
    for (auto* p : {&operator_, &cluster_}) {
      if (*p) {
        (*p)->Signal(SIGTERM);
        (*p)->Wait(absl::Seconds(30));
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  kube::RestClient& client() { return *client_; }
  pid_t operator_pid() const { return operator_->pid(); }
  std::string Metrics() {
    std::optional<testing::HttpResponse> r = testing::HttpGet(metrics_port_, "/metrics");
    return r.has_value() ? r->body : "";
  }

 private:
  Stack() = default;

  std::unique_ptr<process::Subprocess> Run(std::vector<std::string> argv, const std::string& name) {
    return StartUntilReady(std::move(argv), (dir_ / (name + ".log")).string(), &ready_line_);
  }

  std::filesystem::path dir_;
  std::unique_ptr<process::Subprocess> cluster_;
  std::unique_ptr<process::Subprocess> operator_;
  std::unique_ptr<kube::RestClient> client_;
  std::string ready_line_;
  int metrics_port_ = 0;
};

struct Results {
  int jobs = 0, tasks = 0;
  double create_all_pods_s = kFailed;
  double api_requests_per_job = kFailed;
  double operator_rss_mib = kFailed;
  double idle_cpu_pct = kFailed;
  double replace_p50_ms = kFailed;
  double recover_p50_s = kFailed;
  double informer_pod_kib = kFailed;        // scale: the operator's pod cache, per pod
  double informer_pod_whole_kib = kFailed;  // ... were the pods cached whole
  double informer_job_kib = kFailed;        // ... per cached TrainingJob
  double scale_replace_p50_ms = kFailed;    // scale: a failed task pod → its replacement
  // ... of which the operator's part: from the pass that sees the failure starting to the
  // replacement created (its phalanx_operator_replacement_latency_seconds); the rest is the
  // local cluster's.
  double scale_replace_operator_p50_ms = kFailed;
  int kills = 0;
};

kube::Json JobManifest(const std::string& name, int tasks, const std::string& container,
                       const std::string& failure_policy) {
  return kube::Json::parse(absl::StrCat(
      R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":")", name,
      R"("},"spec":{"replicas":)", tasks, R"(,"failurePolicy":)", failure_policy,
      R"(,"template":{"spec":{"terminationGracePeriodSeconds":1,"containers":[)", container,
      "]}}}}"));
}

// Faults `old_pod` (the admin endpoint's `fault`: "kill" on a process node, "fail?exitCode=137"
// on a simulated one) and waits for `new_pod` on a watch of task pods: the milliseconds from the
// fault to the replacement (kFailed after 30 s). `killed` is when the fault was made
// (InfinitePast: it could not be).
double KillToReplacementMs(Stack& stack, const std::string& old_pod, const std::string& fault,
                           const std::string& new_pod, absl::Time& killed) {
  killed = absl::InfinitePast();
  absl::StatusOr<kube::ObjectList> listed =
      stack.client().List(op::kPods, "default", {.label_selector = "phalanx.dev/role=task"});
  if (!listed.ok()) return kFailed;
  absl::StatusOr<std::unique_ptr<kube::WatchStream>> watch = stack.client().Watch(
      op::kPods, "default",
      {.resource_version = listed->resource_version, .label_selector = "phalanx.dev/role=task"});
  if (!watch.ok()) return kFailed;
  const absl::Time at = absl::Now();
  if (!stack.client().Raw("POST", absl::StrCat("/admin/pods/default/", old_pod, "/", fault)).ok()) {
    return kFailed;
  }
  killed = at;
  while (absl::Now() - killed < absl::Seconds(30)) {
    absl::StatusOr<std::optional<kube::WatchEventData>> event = (*watch)->Next(absl::Seconds(1));
    if (!event.ok()) break;
    if (event->has_value() && (*event)->type == "ADDED" &&
        kube::MetaString((*event)->object, "name") == new_pod) {
      return absl::ToDoubleMilliseconds(absl::Now() - killed);
    }
  }
  return kFailed;
}

// The heap one informer's cache takes per object, in KiB: this process caches what the
// operator's informer of `resource` (label selector `selector`, `transform`) caches and the
// heap in use grows by the objects (cpprest JSON documents) and their keys.
double InformerKibPerObject(kube::RestClient& client, const kube::Resource& resource,
                            const std::string& selector,
                            std::function<void(kube::Json&)> transform = nullptr) {
  const size_t before = mallinfo2().uordblks;
  kube::Informer::Options options;
  options.namespace_ = "default";
  options.label_selector = selector;
  options.transform = std::move(transform);
  kube::Informer informer(client, base::RealClock::Get(), resource, options);
  informer.Start();
  if (!informer.WaitForSync(absl::Minutes(2))) return kFailed;
  informer.Stop();  // its thread's buffers go; the cache stays
  const size_t after = mallinfo2().uordblks;
  size_t objects = 0;
  informer.ForEach([&](const kube::Json&) { ++objects; });
  if (objects == 0 || after < before) return kFailed;
  return static_cast<double>(after - before) / objects / 1024.0;
}

void RunScale(Results& r) {
  r.jobs = absl::GetFlag(FLAGS_jobs);
  r.tasks = absl::GetFlag(FLAGS_tasks);
  // Pod IPs, not Service DNS names: the operator's coordinator channels (to coordinators that
  // do not run here) stay on 127.0.0.1 instead of asking the machine's resolver.
  const int port_base = 20000 + static_cast<int>(getpid() % 4000) * 2;
  // A coordinator port for every job, with room to spare (the operator hashes jobs into them).
  const int port_slots = std::max(64, r.jobs + r.jobs / 4);
  // Every job's coordinator answers the operator's watch, as in a running fleet
  // (standin_coordinators.h); --stand_in_coordinators=false leaves them unreachable. Over TLS,
  // the operator's default: the bench makes the operator's CA (the operator loads it as its
  // own) and one leaf that passes for every job's coordinator, as the operator's own would.
  const bool stand_ins = absl::GetFlag(FLAGS_stand_in_coordinators);
  std::optional<auth::TlsKeyPair> leaf;
  // Declared before the stack, so it outlives the operator that polls it.
  std::unique_ptr<StandInCoordinators> stand_in;
  auto install_ca = [&](kube::Client& client) {
    absl::StatusOr<auth::TlsKeyPair> ca =
        auth::MakeCertificateAuthority("phalanx operator bench CA", absl::Hours(24));
    // One wildcard name for every job's coordinator (<job>-coordinator.default.svc), which the
    // operator's link accepts as a per-job leaf. Not one name per job: a leaf with 1,000 names,
    // which every one of the operator's 1,000 TLS channels keeps as its peer's, made the
    // operator's RSS 858 MiB instead of what production leaves (4 names each) cost.
    absl::StatusOr<auth::TlsKeyPair> issued =
        ca.ok() ? auth::IssueServerCertificate(*ca, {"*.default.svc"}, absl::Hours(24))
                : ca.status();
    absl::StatusOr<kube::Json> secret =
        issued.ok() ? op::LoadOrCreateOwnSecret(
                          client, "default", "phalanx-operator-ca", {},
                          [&]() -> absl::StatusOr<std::map<std::string, std::string>> {
                            return std::map<std::string, std::string>{
                                {op::kCaCertField, ca->cert_pem}, {op::kCaKeyField, ca->key_pem}};
                          })
                    : issued.status();
    if (!secret.ok()) {
      std::fprintf(stderr, "scale: the operator's CA: %s\n", secret.status().ToString().c_str());
      return false;
    }
    leaf = *issued;
    return true;
  };
  std::unique_ptr<Stack> stack = Stack::Start(
      "scale",
      {"--nodes", "0", "--simulated-nodes", absl::StrCat(absl::GetFlag(FLAGS_simulated_nodes))},
      // Task pods wait for the coordinator's first answer, as by default, unless none comes.
      {"--coordinator_address", "pod-ip", "--coordinator_port_base", absl::StrCat(port_base),
       "--coordinator_port_span", absl::StrCat(2 * port_slots),
       absl::StrCat("--task_pods_wait_for_coordinator=", stand_ins)},
      install_ca);
  if (stack == nullptr) return;
  if (stand_ins) {
    stand_in = StandInCoordinators::Start(port_base, port_slots, leaf->cert_pem, leaf->key_pem);
    if (stand_in == nullptr) {
      std::fprintf(stderr, "scale: cannot listen on the %d stand-in coordinator ports from %d\n",
                   port_slots, port_base);
      return;
    }
  }
  std::fprintf(stderr, "scale: creating %d jobs x %d tasks on simulated nodes\n", r.jobs, r.tasks);
  const absl::Time start = absl::Now();
  for (int j = 0; j < r.jobs; ++j) {
    absl::Status created =
        stack->client()
            .Create(op::kTrainingJobs, "default",
                    JobManifest(absl::StrFormat("job-%03d", j), r.tasks,
                                R"({"name":"w","image":"x","command":["train"]})", "{}"))
            .status();
    if (!created.ok()) {
      std::fprintf(stderr, "scale: create failed: %s\n", created.ToString().c_str());
      return;
    }
  }
  const int want_pods = r.jobs * r.tasks;
  const absl::Time deadline = start + absl::Minutes(5);
  int ready_jobs = 0, pods = 0;
  absl::Time last_progress = absl::Now();
  // The jobs are read often and the pods only to report progress and to confirm the end: a list
  // of every pod ten times a second was a fifth of the API server's CPU at 8,000 pods.
  auto count_pods = [&] {
    absl::StatusOr<kube::ObjectList> task_pods =
        stack->client().List(op::kPods, "default", {.label_selector = "phalanx.dev/role=task"});
    if (task_pods.ok()) pods = static_cast<int>(task_pods->items.size());
  };
  while (absl::Now() < deadline) {
    absl::StatusOr<kube::ObjectList> jobs = stack->client().List(op::kTrainingJobs, "default", {});
    if (jobs.ok()) {
      ready_jobs = 0;
      for (const kube::Json& job : jobs->items) {
        const kube::Json& status = kube::FieldOrNull(job, "status");
        const kube::Json& ready = kube::FieldOrNull(status, "readyTasks");
        if (kube::StringAt(job, "status.phase") == "Running" && ready.is_number() &&
            ready.as_integer() == r.tasks) {
          ++ready_jobs;
        }
      }
      if (ready_jobs == r.jobs) {
        const absl::Time all_ready = absl::Now();
        count_pods();
        if (pods == want_pods) {
          r.create_all_pods_s = absl::ToDoubleSeconds(all_ready - start);
          break;
        }
      }
    }
    if (absl::Now() - last_progress > absl::Seconds(5)) {
      count_pods();
      std::fprintf(stderr, "  %.0f s: %d/%d pods, %d/%d jobs report every task ready\n",
                   absl::ToDoubleSeconds(absl::Now() - start), pods, want_pods, ready_jobs, r.jobs);
      last_progress = absl::Now();
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
  if (r.create_all_pods_s < 0) {
    std::fprintf(stderr, "scale: timed out with %d/%d pods, %d/%d jobs ready\n", pods, want_pods,
                 ready_jobs, r.jobs);
    return;
  }
  std::fprintf(stderr, "  all %d pods exist and every job says so after %.2f s\n", want_pods,
               r.create_all_pods_s);
  const std::string metrics = stack->Metrics();
  r.api_requests_per_job = SumOfMetric(metrics, "phalanx_operator_api_requests_total") / r.jobs;
  // Which requests, per job: on a real API server a job costs more than on the built-in one.
  constexpr absl::string_view kRequestSeries = "phalanx_operator_api_requests_total{";
  std::string by_kind;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, kRequestSeries)) continue;
    const size_t labels_end = line.find('}');
    double v = 0;
    if (labels_end == absl::string_view::npos ||
        !absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) {
      continue;
    }
    const size_t labels = kRequestSeries.size();
    absl::StrAppend(&by_kind, " ", line.substr(labels, labels_end - labels), " ",
                    absl::StrFormat("%.2f", v / r.jobs));
  }
  std::fprintf(stderr, "scale: API requests per job by code and verb:%s\n", by_kind.c_str());
  // Let the last status writes and the coordinator links' first polls settle, then measure the
  // quiet.
  absl::SleepFor(absl::GetFlag(FLAGS_settle));
  const absl::Duration idle = absl::GetFlag(FLAGS_idle);
  std::fprintf(stderr, "scale: measuring operator CPU over %.0f s with nothing changing\n",
               absl::ToDoubleSeconds(idle));
  const double cpu_before = CpuSeconds(stack->operator_pid());
  absl::SleepFor(idle);
  const double cpu_after = CpuSeconds(stack->operator_pid());
  if (cpu_before >= 0 && cpu_after >= 0) {
    r.idle_cpu_pct = 100.0 * (cpu_after - cpu_before) / absl::ToDoubleSeconds(idle);
  }
  r.operator_rss_mib = RssMib(stack->operator_pid());
  r.informer_pod_kib =
      InformerKibPerObject(stack->client(), op::kPods, "phalanx.dev/job", op::TrimCachedPod);
  r.informer_pod_whole_kib = InformerKibPerObject(stack->client(), op::kPods, "phalanx.dev/job");
  r.informer_job_kib = InformerKibPerObject(stack->client(), op::kTrainingJobs, "");
  std::fprintf(stderr,
               "scale: the operator's informers hold %.1f KiB per pod (%.1f whole), %.1f KiB "
               "per job\n",
               r.informer_pod_kib, r.informer_pod_whole_kib, r.informer_job_kib);
  // A kill's replacement with every job running: task pods of jobs spread over the fleet fail
  // (exit 137, as a SIGKILLed process's would) one at a time.
  std::vector<double> replace_ms, operator_ms;
  // The operator's own replacement_latency histogram.
  const std::string sum = "phalanx_operator_replacement_latency_seconds_sum";
  const std::string count = "phalanx_operator_replacement_latency_seconds_count";
  for (int k = 0; k < absl::GetFlag(FLAGS_kills); ++k) {
    const std::string before = stack->Metrics();
    const std::string job = absl::StrFormat("job-%03d", (k * 7919 + r.jobs / 2) % r.jobs);
    const int task = k % r.tasks;
    absl::Time killed;
    const double ms =
        KillToReplacementMs(*stack, absl::StrFormat("%s-task-%d-0", job, task), "fail?exitCode=137",
                            absl::StrFormat("%s-task-%d-1", job, task), killed);
    // One replacement between the two readings: the sum grew by exactly its latency. The
    // operator books it once its create call has returned, which may be after this driver saw
    // the pod: wait for it (bounded), or it would land in the next kill's readings.
    std::string after = stack->Metrics();
    for (const absl::Time until = absl::Now() + absl::Seconds(5);
         SumOfMetric(after, count) == SumOfMetric(before, count) && absl::Now() < until;
         after = stack->Metrics()) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    const bool one = SumOfMetric(after, count) - SumOfMetric(before, count) == 1;
    const double operator_part =
        one ? (SumOfMetric(after, sum) - SumOfMetric(before, sum)) * 1000 : kFailed;
    std::fprintf(stderr,
                 "  %s task %d failed: replacement pod after %.1f ms (the operator's part %.1f "
                 "ms)\n",
                 job.c_str(), task, ms, operator_part);
    replace_ms.push_back(ms);
    if (one) operator_ms.push_back(operator_part);
  }
  r.scale_replace_p50_ms = Median(replace_ms);
  if (!operator_ms.empty()) r.scale_replace_operator_p50_ms = Median(operator_ms);
}

// The job's state as its coordinator sees it, over the operator's own channel kind.
class CoordinatorProbe {
 public:
  CoordinatorProbe(const std::string& address, const std::string& token)
      : stub_(pb::Coordination::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))),
        token_(token) {}

  // Waits (bounded) until every task is connected and task `task` is at `incarnation`.
  bool WaitAllConnected(int tasks, int task, base::Incarnation incarnation, absl::Time deadline) {
    uint64_t version = 0;
    while (absl::Now() < deadline) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
      ctx.AddMetadata("authorization", "Bearer " + token_);
      pb::WatchJobStateRequest request;
      request.set_known_version(version);
      request.set_timeout_ms(2000);
      pb::WatchJobStateResponse response;
      if (!stub_->WatchJobState(&ctx, request, &response).ok()) {
        absl::SleepFor(absl::Milliseconds(20));
        version = 0;
        continue;
      }
      version = response.state().version();
      int connected = 0;
      bool at_incarnation = false;
      for (const pb::TaskInfo& t : response.state().tasks()) {
        if (t.state() == pb::TASK_STATE_CONNECTED) ++connected;
        if (t.task_id() == task && base::IncarnationFromWire(t.incarnation()) == incarnation &&
            t.state() == pb::TASK_STATE_CONNECTED) {
          at_incarnation = true;
        }
      }
      if (connected == tasks && at_incarnation) return true;
    }
    return false;
  }

 private:
  std::unique_ptr<pb::Coordination::Stub> stub_;
  std::string token_;
};

std::string EnvOf(const kube::Json& pod, const std::string& name) {
  for (const kube::Json& e :
       kube::ArrayOrEmpty(pod.at("spec").at("containers").at(0), "env").as_array()) {
    if (kube::StringAt(e, "name") == name) return kube::StringAt(e, "value");
  }
  return "";
}

void RunReplace(Results& r) {
  r.tasks = absl::GetFlag(FLAGS_tasks);
  const int kills = absl::GetFlag(FLAGS_kills);
  const std::string bin = absl::GetFlag(FLAGS_bin_dir);
  const int port_base = 20000 + static_cast<int>(getpid() % 4000) * 2;
  std::unique_ptr<Stack> stack = Stack::Start(
      "replace", {"--nodes", "3"},
      {"--coordinator_command", bin + "/runtime/coordination/phalanx-coordinator",
       "--coordinator_address", "pod-ip", "--coordinator_port_base", absl::StrCat(port_base)});
  if (stack == nullptr) return;
  const std::string ckpt =
      (std::filesystem::temp_directory_path() / absl::StrCat("phalanx-bench-ckpt-", getpid()))
          .string();
  const std::string worker = absl::StrCat(
      R"({"name":"w","image":"x","command":[")", bin,
      R"(/examples/sample_worker/phalanx-sample-worker"],"args":["--steps=1000000","--step_time=50ms","--checkpoint_every=20","--checkpoint_dir=)",
      ckpt, R"("]})");
  if (!stack->client()
           .Create(
               op::kTrainingJobs, "default",
               JobManifest("bench", r.tasks, worker,
                           R"({"maxRestarts":1000,"backoff":{"baseSeconds":1,"maxSeconds":1}})"))
           .ok()) {
    return;
  }
  // The coordinator's address and the job's token, as the tasks get them.
  std::string address, token;
  const absl::Time setup_deadline = absl::Now() + absl::Seconds(90);
  while (absl::Now() < setup_deadline && (address.empty() || token.empty())) {
    absl::StatusOr<kube::Json> pod = stack->client().Get(op::kPods, "default", "bench-task-0-0");
    absl::StatusOr<kube::Json> secret = stack->client().Get(op::kSecrets, "default", "bench-token");
    if (pod.ok()) address = EnvOf(*pod, "PHALANX_COORDINATOR");
    if (secret.ok()) {
      absl::Base64Unescape(kube::StringAt(*secret, "data.token"), &token);
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  CoordinatorProbe probe(address, token);
  if (address.empty() || !probe.WaitAllConnected(r.tasks, 0, 0, absl::Now() + absl::Seconds(90))) {
    std::fprintf(stderr, "replace: the job never had every task registered\n");
    std::filesystem::remove_all(ckpt);
    return;
  }
  std::vector<double> replace_ms, recover_s;
  for (int k = 0; k < kills; ++k) {
    const int victim = (k * 3 + 1) % r.tasks;
    const base::Incarnation incarnation =
        k / r.tasks;  // each victim is killed once per lap of the tasks
    const std::string old_pod = absl::StrFormat("bench-task-%d-%d", victim, incarnation);
    const std::string new_pod = absl::StrFormat("bench-task-%d-%d", victim, incarnation + 1);
    absl::Time killed;
    const double ms = KillToReplacementMs(*stack, old_pod, "kill", new_pod, killed);
    if (killed == absl::InfinitePast()) break;
    const bool back =
        probe.WaitAllConnected(r.tasks, victim, incarnation + 1, killed + absl::Seconds(60));
    const double s = back ? absl::ToDoubleSeconds(absl::Now() - killed) : kFailed;
    std::fprintf(stderr,
                 "  kill %d (task %d): replacement pod after %.1f ms, all %d registered "
                 "after %.2f s\n",
                 k + 1, victim, ms, r.tasks, s);
    replace_ms.push_back(ms);
    recover_s.push_back(s);
    if (!back) break;
    absl::SleepFor(absl::Milliseconds(1500));  // past the 1 s restart back-off
  }
  r.kills = static_cast<int>(replace_ms.size());
  r.replace_p50_ms = Median(replace_ms);
  r.recover_p50_s = Median(recover_s);
  stack->client().Delete(op::kTrainingJobs, "default", "bench", {}).IgnoreError();
  stack.reset();
  std::filesystem::remove_all(ckpt);
}

std::string Json(const Results& r) {
  const auto num = JsonNumber;
  return absl::StrCat(
      "{\n", "  \"jobs\": ", r.jobs, ",\n", "  \"tasks_per_job\": ", r.tasks, ",\n",
      "  \"create_all_pods_s\": ", num(r.create_all_pods_s, 2), ",\n",
      "  \"api_requests_per_job\": ", num(r.api_requests_per_job, 1), ",\n",
      "  \"operator_rss_mib\": ", num(r.operator_rss_mib, 1), ",\n",
      "  \"idle_cpu_pct\": ", num(r.idle_cpu_pct, 2), ",\n",
      "  \"informer_pod_kib\": ", num(r.informer_pod_kib, 2), ",\n",
      "  \"informer_pod_whole_kib\": ", num(r.informer_pod_whole_kib, 2), ",\n",
      "  \"informer_job_kib\": ", num(r.informer_job_kib, 2), ",\n",
      "  \"scale_replace_p50_ms\": ", num(r.scale_replace_p50_ms, 1), ",\n",
      "  \"scale_replace_operator_p50_ms\": ", num(r.scale_replace_operator_p50_ms, 1), ",\n",
      "  \"kills\": ", r.kills, ",\n", "  \"replace_p50_ms\": ", num(r.replace_p50_ms, 1), ",\n",
      "  \"recover_p50_s\": ", num(r.recover_p50_s, 2), "\n}\n");
}

}  // namespace
}  // namespace phalanx::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  phalanx::base::InitProcess("operator-bench");
  using namespace phalanx::bench;
  const std::string only = absl::GetFlag(FLAGS_only);
  auto wanted = [&](absl::string_view name) { return Wanted(only, name); };
  Results r;
  if (wanted("scale")) RunScale(r);
  if (wanted("replace")) RunReplace(r);

  const std::string json = Json(r);
  const std::string out = absl::GetFlag(FLAGS_out);
  std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  std::ofstream(out) << json;
  const auto cell = TableCell;
  std::printf("\n| key | result | target |\n|---|---|---|\n");
  std::printf("| create_all_pods_s (%d jobs x %d tasks) | %s | < 30 |\n", r.jobs, r.tasks,
              cell(r.create_all_pods_s, 2).c_str());
  std::printf("| api_requests_per_job | %s | (reported) |\n",
              cell(r.api_requests_per_job, 1).c_str());
  std::printf("| operator_rss_mib | %s | < 200 |\n", cell(r.operator_rss_mib, 1).c_str());
  std::printf("| idle_cpu_pct | %s | < 1 |\n", cell(r.idle_cpu_pct, 2).c_str());
  std::printf("| informer_pod_kib / informer_job_kib | %s / %s | (reported) |\n",
              cell(r.informer_pod_kib, 2).c_str(), cell(r.informer_job_kib, 2).c_str());
  std::printf("| scale_replace_p50_ms (%d jobs) | %s | as at 200 jobs |\n", r.jobs,
              cell(r.scale_replace_p50_ms, 1).c_str());
  std::printf("| scale_replace_operator_p50_ms: the operator's part | %s | (reported) |\n",
              cell(r.scale_replace_operator_p50_ms, 1).c_str());
  std::printf("| replace_p50_ms (%d kills) | %s | < 100 |\n", r.kills,
              cell(r.replace_p50_ms, 1).c_str());
  std::printf("| recover_p50_s | %s | < 3 |\n", cell(r.recover_p50_s, 2).c_str());
  std::printf("\nwritten to %s\n", out.c_str());
  const bool all = r.create_all_pods_s >= 0 || !wanted("scale");
  return all && (r.replace_p50_ms >= 0 || !wanted("replace")) ? 0 : 1;
}
