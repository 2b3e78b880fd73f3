#include "runtime/coordination/metrics.h"

#include <algorithm>
#include <string>

namespace phalanx::coord {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

std::string FailureKindLabel(FailureKind kind) {
  switch (kind) {
    case FailureKind::kSessionBroken:
      return "session_broken";
    case FailureKind::kHeartbeatTimeout:
      return "heartbeat_timeout";
    case FailureKind::kReportedError:
      return "reported_error";
    case FailureKind::kSuperseded:
      return "superseded";
  }
  return "unknown";
}

std::string CloseReasonLabel(ConnectionCloseReason reason) {
  switch (reason) {
    case ConnectionCloseReason::kLimit:
      return "limit";
    case ConnectionCloseReason::kUnauthenticated:
      return "unauthenticated";
    case ConnectionCloseReason::kUnauthenticatedShare:
      return "unauthenticated_share";
    case ConnectionCloseReason::kOutOfDescriptors:
      return "out_of_descriptors";
    case ConnectionCloseReason::kUnreadOutput:
      return "unread_output";
  }
  return "unknown";
}

std::string WireBudgetLabel(WireBudget budget) {
  switch (budget) {
    case WireBudget::kStreamsPerConnection:
      return "streams_per_connection";
    case WireBudget::kStreamsPerCredential:
      return "streams_per_credential";
  }
  return "unknown";
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& r)
    : tasks_registered_(BuildGauge()
                            .Name("phalanx_coordinator_tasks_registered")
                            .Help("Tasks that have registered (any state but unregistered)")
                            .Register(r)
                            .Add({})),
      tasks_connected_(BuildGauge()
                           .Name("phalanx_coordinator_tasks_connected")
                           .Help("Tasks registered and alive (connected state)")
                           .Register(r)
                           .Add({})),
      task_failures_(BuildCounter()
                         .Name("phalanx_coordinator_task_failures_total")
                         .Help("Tasks declared failed, by reason")
                         .Register(r)),
      session_breaks_(BuildCounter()
                          .Name("phalanx_coordinator_session_breaks_total")
                          .Help("Session streams of connected tasks that broke")
                          .Register(r)
                          .Add({})),
      heartbeat_age_(BuildGauge()
                         .Name("phalanx_coordinator_heartbeat_age_max_seconds")
                         .Help("Oldest time since the last heartbeat among connected tasks")
                         .Register(r)
                         .Add({})),
      barrier_wait_(BuildHistogram()
                        .Name("phalanx_coordinator_barrier_wait_seconds")
                        .Help("Time each task waited in a barrier that passed")
                        .Register(r)
                        .Add({}, LatencyBuckets())),
      barrier_timeouts_(BuildCounter()
                            .Name("phalanx_coordinator_barrier_timeouts_total")
                            .Help("Barriers that timed out")
                            .Register(r)
                            .Add({})),
      kv_entries_(BuildGauge()
                      .Name("phalanx_coordinator_kv_entries")
                      .Help("Keys in the key-value store")
                      .Register(r)
                      .Add({})),
      kv_bytes_(BuildGauge()
                    .Name("phalanx_coordinator_kv_bytes")
                    .Help("Bytes of keys and values in the key-value store")
                    .Register(r)
                    .Add({})),
      preemption_rounds_(BuildCounter()
                             .Name("phalanx_coordinator_preemption_rounds_total")
                             .Help("Preemption sync rounds opened")
                             .Register(r)
                             .Add({})),
      spare_takeovers_(BuildCounter()
                           .Name("phalanx_coordinator_spare_takeovers_total")
                           .Help("Failed tasks a waiting spare took over (spec.spares)")
                           .Register(r)
                           .Add({})),
      spares_waiting_(BuildGauge()
                          .Name("phalanx_coordinator_spares_waiting")
                          .Help("Spares waiting to be given a task (spec.spares)")
                          .Register(r)
                          .Add({})),
      auth_failures_(BuildCounter()
                         .Name("phalanx_coordinator_auth_failures_total")
                         .Help("Calls refused for a missing or wrong job token")
                         .Register(r)
                         .Add({})),
      connections_closed_(BuildCounter()
                              .Name("phalanx_coordinator_connections_closed_total")
                              .Help("Client connections the coordinator refused or closed: "
                                    "over --max_connections, unauthenticated past "
                                    "--unauthenticated_timeout, out of descriptors, or "
                                    "with more output unread than the session wire allows")
                              .Register(r)),
      connections_open_(BuildGauge()
                            .Name("phalanx_coordinator_connections_open")
                            .Help("Client connections open on the gRPC port")
                            .Register(r)
                            .Add({})),
      wire_streams_(BuildGauge()
                        .Name("phalanx_coordinator_wire_streams")
                        .Help("Session wire streams held (one per task session on the wire; "
                              "a stream whose session ended is freed at once)")
                        .Register(r)
                        .Add({})),
      wire_refusals_(BuildCounter()
                         .Name("phalanx_coordinator_wire_refusals_total")
                         .Help("New session wire streams refused (ResourceExhausted), by the "
                               "budget they would have exceeded: streams on one connection, or "
                               "held by one task credential")
                         .Register(r)),
      rpcs_(BuildCounter()
                .Name("phalanx_coordinator_rpcs_total")
                .Help("RPCs handled, by method and status code")
                .Register(r)),
      rpc_latency_(BuildHistogram()
                       .Name("phalanx_coordinator_rpc_latency_seconds")
                       .Help("RPC handling time (includes waiting, for blocking calls)")
                       .Register(r)) {
  // Every reason from the start, at 0: Prometheus' increase() starts at a series' first sample,
  // so a series born at 1 hides its first event (a live Prometheus showed it on the operator).
  for (FailureKind kind : {FailureKind::kSessionBroken, FailureKind::kHeartbeatTimeout,
                           FailureKind::kReportedError, FailureKind::kSuperseded}) {
    task_failures_.Add({{"reason", FailureKindLabel(kind)}});
  }
  for (ConnectionCloseReason reason :
       {ConnectionCloseReason::kLimit, ConnectionCloseReason::kUnauthenticated,
        ConnectionCloseReason::kUnauthenticatedShare, ConnectionCloseReason::kOutOfDescriptors,
        ConnectionCloseReason::kUnreadOutput}) {
    connections_closed_.Add({{"reason", CloseReasonLabel(reason)}});
  }
  for (WireBudget budget : {WireBudget::kStreamsPerConnection, WireBudget::kStreamsPerCredential}) {
    wire_refusals_.Add({{"budget", WireBudgetLabel(budget)}});
  }
}

void CoordinatorMetrics::SetTaskCounts(int registered, int connected) {
  tasks_registered_.Set(registered);
  tasks_connected_.Set(connected);
}

void CoordinatorMetrics::TaskFailed(FailureKind kind) {
  task_failures_.Add({{"reason", FailureKindLabel(kind)}}).Increment();
}

void CoordinatorMetrics::WireRefused(WireBudget budget) {
  wire_refusals_.Add({{"budget", WireBudgetLabel(budget)}}).Increment();
}

void CoordinatorMetrics::ConnectionClosed(ConnectionCloseReason reason) {
  connections_closed_.Add({{"reason", CloseReasonLabel(reason)}}).Increment();
}

void CoordinatorMetrics::SetKv(size_t entries, size_t bytes) {
  kv_entries_.Set(static_cast<double>(entries));
  kv_bytes_.Set(static_cast<double>(bytes));
}

void CoordinatorMetrics::Rpc(const char* method, absl::StatusCode code, absl::Duration latency) {
  const size_t index = std::min<size_t>(static_cast<size_t>(code), 16);
  prometheus::Histogram* histogram;
  prometheus::Counter* counter;
  {
    absl::MutexLock lock(&rpc_mu_);
    std::unique_ptr<MethodSeries>& series = rpc_series_[method];
    if (series == nullptr) {
      series = std::make_unique<MethodSeries>();
      series->latency = &rpc_latency_.Add({{"method", method}}, LatencyBuckets());
    }
    if (series->by_code[index] == nullptr) {
      series->by_code[index] =
          &rpcs_.Add({{"method", method}, {"code", absl::StatusCodeToString(code)}});
    }
    histogram = series->latency;
    counter = series->by_code[index];
  }
  counter->Increment();
  histogram->Observe(absl::ToDoubleSeconds(latency));
}

}  // namespace phalanx::coord
