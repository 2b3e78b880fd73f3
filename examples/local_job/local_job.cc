#include "examples/local_job/local_job.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth/tls_issuer.h"

namespace phalanx::harness {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<LocalJob>> LocalJob::Start(LocalJobOptions options) {
  std::error_code ec;
  fs::create_directories(options.work_dir + "/checkpoints", ec);
  if (ec) return absl::InternalError("cannot create " + options.work_dir + ": " + ec.message());
  {
    std::ofstream token(options.work_dir + "/token", std::ios::trunc);
    token << options.token << "\n";
  }
  if (options.tls) {
    absl::StatusOr<auth::TlsKeyPair> ca =
        auth::MakeCertificateAuthority("phalanx local job CA", absl::Hours(24));
    if (!ca.ok()) return ca.status();
    absl::StatusOr<auth::TlsKeyPair> leaf =
        auth::IssueServerCertificate(*ca, {kLocalJobTlsServerName}, absl::Hours(24));
    if (!leaf.ok()) return leaf.status();
    std::ofstream(options.work_dir + "/ca.crt", std::ios::trunc) << ca->cert_pem;
    std::ofstream(options.work_dir + "/tls.crt", std::ios::trunc) << leaf->cert_pem;
    std::ofstream(options.work_dir + "/tls.key", std::ios::trunc) << leaf->key_pem;
  }
  std::unique_ptr<LocalJob> job(new LocalJob(std::move(options)));
  {
    absl::MutexLock lock(&job->mu_);
    job->workers_.resize(job->options_.num_tasks);
  }
  if (absl::Status s = job->StartCoordinator(0); !s.ok()) return s;
  if (job->options_.start_workers) {
    for (int task = 0; task < job->options_.num_tasks; ++task) {
      if (absl::Status s = job->StartWorker(task); !s.ok()) return s;
    }
  }
  return job;
}

LocalJob::~LocalJob() {
  absl::MutexLock lock(&mu_);
  for (auto& incarnations : workers_) incarnations.clear();  // SIGKILL + reap
}

absl::Status LocalJob::StartCoordinator(int port) {
  process::SubprocessOptions options;
  options.argv = {options_.bin_dir + "/runtime/coordination/phalanx-coordinator",
                  "--job=" + options_.job,
                  absl::StrCat("--num_tasks=", options_.num_tasks),
                  "--token_file=" + options_.work_dir + "/token",
                  absl::StrCat("--listen=127.0.0.1:", port),
                  "--metrics_listen=127.0.0.1:0",
                  "--heartbeat_interval=" + absl::FormatDuration(options_.heartbeat_interval),
                  "--heartbeat_timeout=" + absl::FormatDuration(options_.heartbeat_timeout)};
  if (options_.tls) {
    options.argv.push_back("--tls_cert_file=" + options_.work_dir + "/tls.crt");
    options.argv.push_back("--tls_key_file=" + options_.work_dir + "/tls.key");
  }
  options.stderr_path = options_.work_dir + "/coordinator.log";
  options.echo_stdout = options_.echo;
  options.echo_prefix = "[coordinator] ";
  auto child = process::Subprocess::Start(std::move(options));
  if (!child.ok()) return child.status();
  std::optional<std::string> ready = (*child)->WaitForLine(
      [](const std::string& line) { return line.rfind("ready ", 0) == 0; }, absl::Seconds(30));
  if (!ready.has_value()) {
    return absl::UnavailableError("coordinator did not become ready; see " + options_.work_dir +
                                  "/coordinator.log");
  }
  const size_t colon = ready->find(':');
  const size_t space = ready->find(' ', colon);
  int bound = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(ready->substr(colon + 1, space - colon - 1), &bound)) {
    return absl::InternalError("cannot parse coordinator ready line: " + *ready);
  }
  if (coordinator_) old_coordinators_.push_back(std::move(coordinator_));
  coordinator_ = *std::move(child);
  port_ = bound;
  return absl::OkStatus();
}

absl::Status LocalJob::StopCoordinator(int signal) {
  coordinator_->Signal(signal);
  // A SIGTERMed coordinator gives in-flight calls 1 s before it exits.
  if (!coordinator_->Wait(absl::Seconds(30)).has_value()) {
    return absl::DeadlineExceededError(
        absl::StrCat("the coordinator did not exit within 30 s of signal ", signal));
  }
  return absl::OkStatus();
}

absl::Status LocalJob::RestartCoordinator(int signal) {
  if (absl::Status s = StopCoordinator(signal); !s.ok()) return s;
  return StartNewCoordinator();
}

absl::Status LocalJob::StartWorker(int task, std::map<std::string, std::string> extra_env) {
  base::Incarnation incarnation;
  {
    absl::MutexLock lock(&mu_);
    incarnation = workers_[task].size();
  }
  process::SubprocessOptions options;
  options.argv = {options_.bin_dir + "/examples/sample_worker/phalanx-sample-worker",
                  "--checkpoint_dir=" + options_.work_dir + "/checkpoints"};
  options.argv.insert(options.argv.end(), options_.worker_args.begin(), options_.worker_args.end());
  options.env = {{"PHALANX_COORDINATOR", address()},
                 {"PHALANX_JOB", options_.job},
                 {"PHALANX_TASK_ID", absl::StrCat(task)},
                 {"PHALANX_NUM_TASKS", absl::StrCat(options_.num_tasks)},
                 {"PHALANX_INCARNATION", absl::StrCat(incarnation)},
                 {"PHALANX_TOKEN", options_.token}};
  if (options_.tls) {
    options.env["PHALANX_TLS_CA_FILE"] = options_.work_dir + "/ca.crt";
    options.env["PHALANX_TLS_SERVER_NAME"] = kLocalJobTlsServerName;
  }
  for (auto& [k, v] : extra_env) options.env[k] = v;
  options.stderr_path = absl::StrCat(options_.work_dir, "/worker-", task, ".log");
  options.echo_stdout = options_.echo;
  options.echo_prefix = absl::StrCat("[task ", task, "] ");
  auto child = process::Subprocess::Start(std::move(options));
  if (!child.ok()) return child.status();
  absl::MutexLock lock(&mu_);
  workers_[task].push_back(*std::move(child));
  return absl::OkStatus();
}

process::Subprocess& LocalJob::worker(int task) {
  absl::MutexLock lock(&mu_);
  return *workers_[task].back();
}

base::Incarnation LocalJob::incarnation(int task) {
  absl::MutexLock lock(&mu_);
  return workers_[task].size() - 1;
}

std::vector<WorkerEvent> LocalJob::Events(int task) {
  std::vector<process::Subprocess*> processes;
  {
    absl::MutexLock lock(&mu_);
    for (auto& p : workers_[task]) processes.push_back(p.get());
  }
  std::vector<WorkerEvent> events;
  for (process::Subprocess* p : processes) {
    for (const std::string& line : p->Lines()) {
      if (std::optional<WorkerEvent> e = ParseWorkerEvent(line)) events.push_back(std::move(*e));
    }
  }
  return events;
}

std::optional<WorkerEvent> LocalJob::WaitForEvent(
    int task, const std::string& kind, absl::Duration timeout,
    const std::function<bool(const WorkerEvent&)>& match) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    for (const WorkerEvent& e : Events(task)) {
      if (e.kind == kind && (!match || match(e))) return e;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    // Wait for the current process to print anything new (bounded by the deadline).
    process::Subprocess& current = worker(task);
    const size_t seen = current.Lines().size();
    const absl::Time slice_end = std::min(absl::Now() + absl::Milliseconds(200), deadline);
    if (current.WaitForLine([](const std::string&) { return true; }, slice_end - absl::Now(), seen)
            .has_value()) {
      continue;
    }
    // WaitForLine returns at once, with nothing, once the process has exited (its stdout is
    // closed): wait for the task's next incarnation until the slice ends instead of spinning.
    absl::MutexLock lock(&mu_);
    const size_t incarnations = workers_[task].size();
    auto replaced = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return workers_[task].size() != incarnations;
    };
    mu_.AwaitWithDeadline(absl::Condition(&replaced), slice_end);
  }
}

bool LocalJob::WaitAllExited(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  bool all_ok = true;
  for (int task = 0; task < options_.num_tasks; ++task) {
    process::Subprocess& w = worker(task);
    if (!w.Wait(std::max(absl::ZeroDuration(), deadline - absl::Now())).has_value()) return false;
    all_ok = all_ok && w.ExitCode() == 0;
  }
  return all_ok;
}

namespace {

// The last `n` lines of `lines`, each indented and newline-terminated.
std::string Tail(const std::vector<std::string>& lines, int n) {
  std::string out;
  const size_t from = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0;
  for (size_t i = from; i < lines.size(); ++i) absl::StrAppend(&out, "    ", lines[i], "\n");
  return out;
}

std::vector<std::string> FileLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  return lines;
}

}  // namespace

std::string LocalJob::Describe(int lines) {
  std::string out = absl::StrCat("--- local job state (", absl::FormatTime(absl::Now()), ")\n");
  for (int task = 0; task < options_.num_tasks; ++task) {
    std::vector<std::string> stdout_lines;
    {
      absl::MutexLock lock(&mu_);
      for (auto& p : workers_[task]) {
        for (std::string& line : p->Lines()) stdout_lines.push_back(std::move(line));
      }
    }
    absl::StrAppend(&out, "  task ", task, " stdout (last ", lines, "):\n",
                    Tail(stdout_lines, lines));
    const std::vector<std::string> log =
        FileLines(absl::StrCat(options_.work_dir, "/worker-", task, ".log"));
    if (!log.empty()) absl::StrAppend(&out, "  task ", task, " stderr:\n", Tail(log, lines));
  }
  absl::StrAppend(&out, "  coordinator log (last ", 2 * lines, "):\n",
                  Tail(FileLines(options_.work_dir + "/coordinator.log"), 2 * lines));
  return out;
}

std::unique_ptr<client::CoordinationClientImpl> LocalJob::AdminClient() {
  client::ClientConfig config;
  config.coordinator = address();
  config.job = options_.job;
  config.task_id = 0;
  config.num_tasks = options_.num_tasks;
  config.token = options_.token;
  config.tls = ClientTls();
  return *client::CoordinationClientImpl::Create(config);
}

client::CoordinatorTls LocalJob::ClientTls() const {
  if (!options_.tls) return {};
  std::ifstream in(options_.work_dir + "/ca.crt");
  std::stringstream pem;
  pem << in.rdbuf();
  return {pem.str(), kLocalJobTlsServerName};
}

}  // namespace phalanx::harness
