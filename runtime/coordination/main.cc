// phalanx-coordinator: the per-job coordination service. Flags → options → wiring → run.
// Prints one line `ready grpc=HOST:PORT metrics=HOST:PORT` once it serves; SIGTERM/SIGINT stop it.

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/auth/credentials.h"
#include "common/base/env_and_files.h"
#include "common/base/log.h"
#include "common/base/periodic_runner.h"
#include "common/base/process_main.h"
#include "common/http/status_server.h"
#include "prometheus/registry.h"
#include "runtime/coordination/coordinator_server.h"
#include "runtime/coordination/error_details.h"
#include "runtime/coordination/fd_limit.h"
#include "runtime/coordination/health_probe.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/service.h"
#include "runtime/coordination/tls_session.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:8470", "gRPC listen address host:port (port 0: any)");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9090",
          "HTTP address for /metrics and /healthz (empty: off)");
ABSL_FLAG(std::string, job, "", "job name (required)");
ABSL_FLAG(int, num_tasks, 0, "number of tasks in the job (required)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the job token; if unset, the PHALANX_TOKEN environment variable");
ABSL_FLAG(std::string, token_sha256, "",
          "if set, the token's SHA-256 (hex) must equal this: the operator passes it so that a "
          "token Secret it did not write (a squatter of the name) is refused at start");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain: with --tls_key_file, serve gRPC over TLS only");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(1), "how often tasks heartbeat");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(10),
          "a task silent this long is declared failed");
ABSL_FLAG(absl::Duration, barrier_timeout, absl::Minutes(5), "default barrier timeout");
ABSL_FLAG(absl::Duration, shutdown_timeout, absl::Minutes(1), "shutdown barrier timeout");
ABSL_FLAG(absl::Duration, tick, absl::Milliseconds(50),
          "how often deadlines and heartbeats are checked");
ABSL_FLAG(int, max_connections, 0,
          "most client connections open at once on the gRPC port; one more is accepted and "
          "closed (0: derived from the descriptor limit, see docs/operations.md)");
ABSL_FLAG(absl::Duration, unauthenticated_timeout, absl::Seconds(5),
          "a connection that has carried no call with a valid token by then is closed");
ABSL_FLAG(absl::Duration, health_rpc_timeout, absl::Seconds(1),
          "deadline of /healthz's loopback grpc.health.v1 Check through the gRPC port");
ABSL_FLAG(bool, session_wire, true,
          "also serve task sessions over the session wire (framed TCP on the same port; "
          "over TLS with --tls_cert_file); clients fall back to gRPC without it");
ABSL_FLAG(bool, exit_after_shutdown, false,
          "exit 0 once every task has passed the shutdown barrier");
ABSL_FLAG(bool, testing_reword_errors, false,
          "tests only: send every error as \"reworded <CODE>\" instead of its message, to prove "
          "clients read the error details, never the words");
// Memory bounds (docs/operations.md, "Limits"): any holder of the job token can write.
ABSL_FLAG(int64_t, kv_max_bytes, 64 << 20, "key-value store quota: bytes of keys plus values");
ABSL_FLAG(int64_t, kv_max_keys, 100'000, "key-value store quota: number of keys");
ABSL_FLAG(int64_t, kv_max_key_bytes, 512, "longest key-value key");
ABSL_FLAG(int64_t, kv_max_value_bytes, 1 << 20, "largest key-value value");
ABSL_FLAG(int64_t, kv_dir_max_entries, 1000, "most entries in one directory answer (page)");
ABSL_FLAG(int64_t, kv_dir_max_bytes, 2 << 20, "most key plus value bytes in one directory answer");
ABSL_FLAG(int64_t, kv_max_waiters, 32'768, "blocked key-value gets waiting at once");
ABSL_FLAG(int64_t, barrier_max_id_bytes, 512, "longest barrier id");
ABSL_FLAG(int64_t, barrier_max_pending, 1024, "barriers waiting at once");
ABSL_FLAG(int64_t, barrier_max_waiting, 65'536, "barrier arrivals waiting at once, all barriers");
ABSL_FLAG(int64_t, barrier_max_finished, 10'000,
          "finished barriers whose result is remembered for late arrivals");
ABSL_FLAG(int64_t, barrier_max_finished_bytes, 16 << 20,
          "bytes of ids and messages remembered for finished barriers");

namespace {

using phalanx::base::LogSeverity;

absl::StatusOr<std::string> ReadToken() {
  const std::string path = absl::GetFlag(FLAGS_token_file);
  std::string token;
  if (!path.empty()) {
    absl::StatusOr<std::string> text = phalanx::base::ReadFileToString(path);
    if (!text.ok()) {
      return absl::NotFoundError(absl::StrCat("--token_file: ", text.status().message()));
    }
    token = *text;
  } else if (std::optional<std::string> env = phalanx::base::ProcessGetenv("PHALANX_TOKEN")) {
    token = *env;
  }
  token = std::string(absl::StripAsciiWhitespace(token));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        "no job token: pass --token_file or set PHALANX_TOKEN (the service refuses to run open)");
  }
  if (const std::string want = absl::GetFlag(FLAGS_token_sha256);
      !want.empty() && phalanx::auth::Sha256Hex(token) != absl::AsciiStrToLower(want)) {
    return absl::PermissionDeniedError(
        "the job token does not match --token_sha256: the token Secret was not written by the "
        "operator (an object squatting its name?); delete it and let the operator recreate it");
  }
  return token;
}

// Reads the TLS certificate and key named by the flags into `options` (both or neither).
absl::Status ReadTls(phalanx::coord::CoordinatorServer::Options& options) {
  const std::string cert = absl::GetFlag(FLAGS_tls_cert_file);
  const std::string key = absl::GetFlag(FLAGS_tls_key_file);
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file go together");
  }
  if (cert.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> cert_pem = phalanx::base::ReadFileToString(cert);
  if (!cert_pem.ok())
    return absl::NotFoundError(absl::StrCat("--tls_cert_file: ", cert_pem.status().message()));
  absl::StatusOr<std::string> key_pem = phalanx::base::ReadFileToString(key);
  if (!key_pem.ok())
    return absl::NotFoundError(absl::StrCat("--tls_key_file: ", key_pem.status().message()));
  options.tls_cert_pem = *cert_pem;
  options.tls_key_pem = *key_pem;
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const phalanx::base::ProcessMain process(
      argc, argv,
      {"coordinator", "phalanx-coordinator", "The Phalanx per-job coordination service."});

  if (absl::GetFlag(FLAGS_job).empty()) return process.Fail("--job is required");
  phalanx::coord::SetRewordErrorsForTesting(absl::GetFlag(FLAGS_testing_reword_errors));
  if (absl::GetFlag(FLAGS_num_tasks) < 1) return process.Fail("--num_tasks must be at least 1");
  if (absl::GetFlag(FLAGS_tick) <= absl::ZeroDuration())
    return process.Fail("--tick must be positive");
  absl::StatusOr<std::string> token = ReadToken();
  if (absl::IsPermissionDenied(token.status())) {
    process.Fail(std::string(token.status().message()));
    return phalanx::auth::kExitTokenMismatch;  // the operator reads this as a squatted Secret
  }
  if (!token.ok()) return process.Fail(std::string(token.status().message()));
  if (absl::GetFlag(FLAGS_max_connections) < 0)
    return process.Fail("--max_connections must be >= 0");
  if (absl::GetFlag(FLAGS_unauthenticated_timeout) <= absl::ZeroDuration()) {
    return process.Fail("--unauthenticated_timeout must be positive");
  }
  // Every task holds a connection; the usual soft limit of 1024 is below a large job's needs.
  absl::StatusOr<uint64_t> fd_limit = phalanx::coord::RaiseFdLimitToHard();
  if (!fd_limit.ok()) return process.Fail(std::string(fd_limit.status().message()));
  const int max_connections = absl::GetFlag(FLAGS_max_connections) > 0
                                  ? absl::GetFlag(FLAGS_max_connections)
                                  : phalanx::coord::DefaultMaxConnections(*fd_limit);
  PHX_LOG(INFO) << "descriptor limit (RLIMIT_NOFILE) " << *fd_limit << ", max connections "
                << max_connections;
  if (max_connections < absl::GetFlag(FLAGS_num_tasks) + 8) {
    PHX_LOG(WARNING) << "max connections " << max_connections << " leaves little room for "
                     << absl::GetFlag(FLAGS_num_tasks)
                     << " tasks: raise the hard RLIMIT_NOFILE or --max_connections";
  }

  phalanx::base::Clock& clock = phalanx::base::RealClock::Get();
  prometheus::Registry registry;
  phalanx::coord::CoordinatorMetrics metrics(registry);

  phalanx::coord::CoordinationService::Options options;
  options.job = absl::GetFlag(FLAGS_job);
  options.num_tasks = absl::GetFlag(FLAGS_num_tasks);
  options.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options.heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  options.barrier_default_timeout = absl::GetFlag(FLAGS_barrier_timeout);
  options.shutdown_timeout = absl::GetFlag(FLAGS_shutdown_timeout);
  for (const auto* flag :
       {&FLAGS_kv_max_bytes, &FLAGS_kv_max_keys, &FLAGS_kv_max_key_bytes, &FLAGS_kv_max_value_bytes,
        &FLAGS_kv_dir_max_entries, &FLAGS_kv_dir_max_bytes, &FLAGS_barrier_max_id_bytes,
        &FLAGS_barrier_max_finished, &FLAGS_barrier_max_finished_bytes, &FLAGS_kv_max_waiters,
        &FLAGS_barrier_max_pending, &FLAGS_barrier_max_waiting}) {
    if (absl::GetFlag(*flag) < 1) {
      return process.Fail(
          absl::StrCat("--", absl::GetFlagReflectionHandle(*flag).Name(), " must be at least 1"));
    }
  }
  options.kv_limits.max_bytes = absl::GetFlag(FLAGS_kv_max_bytes);
  options.kv_limits.max_keys = absl::GetFlag(FLAGS_kv_max_keys);
  options.kv_limits.max_key_bytes = absl::GetFlag(FLAGS_kv_max_key_bytes);
  options.kv_limits.max_value_bytes = absl::GetFlag(FLAGS_kv_max_value_bytes);
  options.kv_limits.max_dir_entries = absl::GetFlag(FLAGS_kv_dir_max_entries);
  options.kv_limits.max_dir_bytes = absl::GetFlag(FLAGS_kv_dir_max_bytes);
  options.barrier_limits.max_id_bytes = absl::GetFlag(FLAGS_barrier_max_id_bytes);
  options.barrier_limits.max_finished = absl::GetFlag(FLAGS_barrier_max_finished);
  options.barrier_limits.max_finished_bytes = absl::GetFlag(FLAGS_barrier_max_finished_bytes);
  options.kv_limits.max_waiters = absl::GetFlag(FLAGS_kv_max_waiters);
  options.barrier_limits.max_pending = absl::GetFlag(FLAGS_barrier_max_pending);
  options.barrier_limits.max_waiting = absl::GetFlag(FLAGS_barrier_max_waiting);
  auto service = phalanx::coord::CoordinationService::Create(options, clock, metrics);
  if (!service.ok()) return process.Fail(std::string(service.status().message()));

  phalanx::coord::CoordinatorServer::Options server_options;
  server_options.listen_address = absl::GetFlag(FLAGS_listen);
  server_options.token = *token;
  server_options.max_connections = max_connections;
  server_options.unauthenticated_timeout = absl::GetFlag(FLAGS_unauthenticated_timeout);
  server_options.session_wire = absl::GetFlag(FLAGS_session_wire);
  if (absl::Status tls = ReadTls(server_options); !tls.ok()) {
    return process.Fail(std::string(tls.message()));
  }
  auto server = phalanx::coord::CoordinatorServer::Start(server_options, **service, metrics, clock);
  if (!server.ok()) return process.Fail(std::string(server.status().message()));

  std::unique_ptr<phalanx::http::StatusHttpServer> http;
  std::string metrics_address = "off";
  if (const std::string addr = absl::GetFlag(FLAGS_metrics_listen); !addr.empty()) {
    // Healthy means a loopback RPC through the real listening server answers: a server that
    // stopped accepting is reported 503 even though this process is otherwise fine.
    phalanx::http::StatusHttpServer::HealthCheck health =
        [target = phalanx::coord::LoopbackTarget(absl::GetFlag(FLAGS_listen), (*server)->port()),
         timeout = absl::GetFlag(FLAGS_health_rpc_timeout),
         tls_name = server_options.tls_cert_pem.empty()
                        ? std::nullopt
                        : std::optional<std::string>(
                              phalanx::coord::CertificateDnsName(server_options.tls_cert_pem))] {
          return phalanx::coord::CheckGrpcHealth(target, timeout, tls_name);
        };
    auto started = phalanx::http::StatusHttpServer::Start(addr, registry, std::move(health));
    if (!started.ok()) return process.Fail(std::string(started.status().message()));
    http = *std::move(started);
    metrics_address = absl::StrCat(addr.substr(0, addr.rfind(':')), ":", http->port());
  }

  const absl::Duration tick = absl::GetFlag(FLAGS_tick);
  phalanx::base::PeriodicRunner ticker(clock, tick, [&](absl::Time now) { (*service)->Tick(now); });
  // Closing unauthenticated connections needs no finer grain than a quarter second.
  phalanx::base::PeriodicRunner connection_ticker(clock, absl::Milliseconds(250),
                                                  [&](absl::Time now) { (*server)->Tick(now); });

  const std::string listen = absl::GetFlag(FLAGS_listen);
  std::printf("ready grpc=%s:%d metrics=%s\n", listen.substr(0, listen.rfind(':')).c_str(),
              (*server)->port(), metrics_address.c_str());
  std::fflush(stdout);
  PHX_LOG(INFO) << "job " << options.job << ": serving " << options.num_tasks << " tasks on port "
                << (*server)->port() << ", heartbeat timeout "
                << absl::FormatDuration(options.heartbeat_timeout);

  const bool exit_after_shutdown = absl::GetFlag(FLAGS_exit_after_shutdown);
  while (true) {
    if (const int sig = process.WaitForStopSignal(absl::Milliseconds(200)); sig != 0) {
      PHX_LOG(INFO) << "signal " << sig << ": stopping";
      break;
    }
    if (exit_after_shutdown && (*service)->AllTasksShutDown()) {
      PHX_LOG(INFO) << "every task passed the shutdown barrier: exiting";
      break;
    }
  }
  ticker.Stop();
  connection_ticker.Stop();
  (*service)->Stop();
  (*server)->Shutdown(absl::Seconds(1));
  return 0;
}
