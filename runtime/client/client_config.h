// ClientConfig: how a training process finds and identifies itself to its job's coordinator.
// Built from the environment the operator injects into every worker pod (DESIGN.md):
//   PHALANX_COORDINATOR  host:port of the coordination service (required)
//   PHALANX_JOB          job name (required)
//   PHALANX_TASK_ID      this task's index, 0..N-1 (required)
//   PHALANX_NUM_TASKS    N (required)
//   PHALANX_INCARNATION  restart count of this task (default 0)
//   PHALANX_TOKEN        the job token or this task's credential, or PHALANX_TOKEN_FILE naming
//                        a file holding it (the operator mounts one: docs/security.md)
//   PHALANX_TLS_CA_FILE  PEM CA certificates: when set, the coordinator is reached over TLS
//                        and its certificate must chain to one of them (default: cleartext)
//   PHALANX_TLS_SERVER_NAME  the name the coordinator's certificate must carry, whatever
//                        address is dialled (default: the host of PHALANX_COORDINATOR)
//   PHALANX_SESSION_TRANSPORT  auto (default), wire or grpc: how the session travels (below)
// A spare pod (spec.spares) has PHALANX_SPARE=<slot> and PHALANX_POD_NAME instead of
// PHALANX_TASK_ID/PHALANX_INCARNATION, and a spare credential: SpareConfig, then
// AwaitSpareAssignment (spare_assignment.h) gives it its task.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/env_and_files.h"
#include "common/base/incarnation.h"
#include "runtime/client/coordinator_credentials.h"

namespace phalanx::client {

struct ClientConfig {
  std::string coordinator;
  std::string job;
  int task_id = 0;
  int num_tasks = 1;
  base::Incarnation incarnation = 0;
  std::string token;
  // The job's CA and the coordinator's name; no CA: cleartext (gRPC and the session wire).
  CoordinatorTls tls;
  // How the session (registration, heartbeats, events, barriers and key-value set/get) travels:
  // kWire is the session wire (wire_session_stream.h), kGrpc the Session RPC. kAuto takes the
  // wire and falls back to gRPC, for good, when the coordinator does not speak it. Both are
  // TLS when `tls` is. Other calls are gRPC calls either way.
  enum class SessionTransport { kAuto, kWire, kGrpc };
  SessionTransport session_transport = SessionTransport::kAuto;
  // Added to each blocking call's own timeout to form its RPC deadline, so the service's
  // answer (e.g. a straggler report) arrives before the transport gives up.
  absl::Duration rpc_margin = absl::Seconds(2);
  // Deadline for calls that do not wait on other tasks (KV insert, try-get, ...).
  absl::Duration short_call_timeout = absl::Seconds(10);

  // Reads the variables above through `getenv` (default: the process environment).
  // InvalidArgument naming the variable that is missing or malformed (for a spare that has not
  // been given its task yet, it says so).
  static absl::StatusOr<ClientConfig> FromEnv(const base::GetenvFn& getenv = nullptr);
};

// What a spare needs to wait for its task: the coordinator, its spare credential, its pod's name.
struct SpareConfig {
  std::string coordinator;
  int slot = 0;
  std::string pod;
  std::string credential;
  CoordinatorTls tls;
  // PHALANX_COORDINATOR, PHALANX_SPARE, PHALANX_POD_NAME (default: HOSTNAME), PHALANX_TOKEN or
  // PHALANX_TOKEN_FILE, PHALANX_TLS_CA_FILE, PHALANX_TLS_SERVER_NAME. InvalidArgument naming
  // what is missing.
  static absl::StatusOr<SpareConfig> FromEnv(const base::GetenvFn& getenv = nullptr);
};

}  // namespace phalanx::client
