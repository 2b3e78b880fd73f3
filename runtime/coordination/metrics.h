// CoordinatorMetrics: the `phalanx_coordinator_*` Prometheus families, built on an injected
// registry so tests can assert values on a fresh one. Thread-safe (prometheus-cpp metrics are).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace phalanx::coord {

// Why a task was declared failed; bounded label values for task_failures_total.
enum class FailureKind { kSessionBroken, kHeartbeatTimeout, kReportedError, kSuperseded };

// Why the coordinator closed a client connection; bounded label values for
// connections_closed_total.
enum class ConnectionCloseReason {
  kLimit,
  kUnauthenticated,
  kUnauthenticatedShare,  // the oldest unauthenticated one, for a newer (connection_listener.h)
  kOutOfDescriptors,
  kUnreadOutput  // a session wire connection whose tasks left too much unread (wire_server.h)
};

// A session wire budget a new stream was refused by (ResourceExhausted); bounded label values
// for wire_refusals_total.
enum class WireBudget { kStreamsPerConnection, kStreamsPerCredential };

class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry);

  void SetTaskCounts(int registered, int connected);
  void TaskFailed(FailureKind kind);
  void SessionBroken() { session_breaks_.Increment(); }
  void SetMaxHeartbeatAge(absl::Duration age) { heartbeat_age_.Set(absl::ToDoubleSeconds(age)); }
  void BarrierWait(absl::Duration wait) { barrier_wait_.Observe(absl::ToDoubleSeconds(wait)); }
  void BarrierTimedOut() { barrier_timeouts_.Increment(); }
  void SetKv(size_t entries, size_t bytes);
  void PreemptionRoundOpened() { preemption_rounds_.Increment(); }
  void SpareTookOver() { spare_takeovers_.Increment(); }
  void SetSparesWaiting(size_t waiting) { spares_waiting_.Set(static_cast<double>(waiting)); }
  void AuthFailure() { auth_failures_.Increment(); }
  void ConnectionClosed(ConnectionCloseReason reason);
  void WireRefused(WireBudget budget);
  void SetOpenConnections(size_t open) { connections_open_.Set(static_cast<double>(open)); }
  // A session wire stream was added (+1) or freed (-1).
  void WireStreams(int delta) { wire_streams_.Increment(delta); }
  // One finished RPC: counted by method and status code, timed by method. `method` must be a
  // string literal (or otherwise live for the process).
  void Rpc(const char* method, absl::StatusCode code, absl::Duration latency);

 private:
  prometheus::Gauge& tasks_registered_;
  prometheus::Gauge& tasks_connected_;
  prometheus::Family<prometheus::Counter>& task_failures_;
  prometheus::Counter& session_breaks_;
  prometheus::Gauge& heartbeat_age_;
  prometheus::Histogram& barrier_wait_;
  prometheus::Counter& barrier_timeouts_;
  prometheus::Gauge& kv_entries_;
  prometheus::Gauge& kv_bytes_;
  prometheus::Counter& preemption_rounds_;
  prometheus::Counter& spare_takeovers_;
  prometheus::Gauge& spares_waiting_;
  prometheus::Counter& auth_failures_;
  prometheus::Family<prometheus::Counter>& connections_closed_;
  prometheus::Gauge& connections_open_;
  prometheus::Gauge& wire_streams_;
  prometheus::Family<prometheus::Counter>& wire_refusals_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Histogram>& rpc_latency_;

  // prometheus-cpp's Family::Add builds a metric (and its label map) on every call even when
  // the series exists; the hot RPC path looks its series up here instead.
  struct MethodSeries {
    prometheus::Histogram* latency = nullptr;
    std::array<prometheus::Counter*, 17> by_code{};
  };
  absl::Mutex rpc_mu_;
  // Keyed by the method name's address: callers pass string literals, so no string is built
  // per call.
  absl::flat_hash_map<const char*, std::unique_ptr<MethodSeries>> rpc_series_
      ABSL_GUARDED_BY(rpc_mu_);
};

}  // namespace phalanx::coord
