// AgentMetrics: the `phalanx_agent_*` Prometheus families on an injected registry. Gauges are
// set from the agent's tick; counters count events. Thread-safe (prometheus-cpp metrics are; the
// per-label maps are guarded).
#pragma once

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace phalanx::agent {

class AgentMetrics {
 public:
  explicit AgentMetrics(prometheus::Registry& registry);

  void SetGpus(int count) { gpus_.Set(count); }
  void SetNvmlAvailable(bool available) { nvml_available_.Set(available ? 1 : 0); }
  void SetGpusByHealth(const std::map<std::string, int>& counts);
  void AddXid(int xid);
  void Notice(const std::string& source, const std::string& kind);
  void SourceError(const std::string& source);
  // The source's error counter, at 0 until its first error.
  void NoticeSourceKnown(const std::string& source);
  void SetCheck(const std::string& check, bool ok);
  void SetCliquesByState(const std::map<std::string, int>& counts);
  // The clique socket closed a connection: "limit" (over --clique_socket_max_connections) or
  // "deadline" (the whole request did not arrive in time).
  void CliqueConnectionDropped(const std::string& reason);
  void Checked(absl::Time now) { last_check_.Set(absl::ToDoubleSeconds(now - absl::UnixEpoch())); }

 private:
  // One child of `family` per label value, created on first use.
  template <typename Metric>
  Metric& Child(prometheus::Family<Metric>& family, std::map<std::string, Metric*>& cache,
                const std::string& label, const std::string& value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetGauges(prometheus::Family<prometheus::Gauge>& family,
                 std::map<std::string, prometheus::Gauge*>& cache, const std::string& label,
                 const std::map<std::string, int>& counts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  prometheus::Gauge& gpus_;
  prometheus::Gauge& nvml_available_;
  prometheus::Gauge& last_check_;
  prometheus::Family<prometheus::Gauge>& gpus_by_health_;
  prometheus::Family<prometheus::Counter>& xids_;
  prometheus::Family<prometheus::Counter>& notices_;
  prometheus::Family<prometheus::Counter>& source_errors_;
  prometheus::Family<prometheus::Gauge>& checks_;
  prometheus::Family<prometheus::Gauge>& cliques_;
  prometheus::Family<prometheus::Counter>& clique_drops_;
  absl::Mutex mu_;
  std::map<std::string, prometheus::Gauge*> health_gauges_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> xid_counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> notice_counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> error_counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Gauge*> check_gauges_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Gauge*> clique_gauges_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Counter*> clique_drop_counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::agent
