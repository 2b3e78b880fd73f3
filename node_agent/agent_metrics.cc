#include "node_agent/agent_metrics.h"

#include "absl/strings/str_cat.h"

namespace phalanx::agent {
namespace {

template <typename Builder>
auto& Build(Builder builder, const char* name, const char* help, prometheus::Registry& r) {
  return builder.Name(name).Help(help).Register(r);
}

}  // namespace

AgentMetrics::AgentMetrics(prometheus::Registry& registry)
    : gpus_(Build(prometheus::BuildGauge(), "phalanx_agent_gpus", "GPUs on this node", registry)
                .Add({})),
      nvml_available_(Build(prometheus::BuildGauge(), "phalanx_agent_nvml_available",
                            "1 if the NVIDIA driver (NVML) could be loaded", registry)
                          .Add({})),
      last_check_(Build(prometheus::BuildGauge(), "phalanx_agent_last_check_timestamp_seconds",
                        "Unix time of the last completed health and notice check", registry)
                      .Add({})),
      gpus_by_health_(Build(prometheus::BuildGauge(), "phalanx_agent_gpu_health",
                            "GPUs by health (healthy, degraded, failed)", registry)),
      xids_(Build(prometheus::BuildCounter(), "phalanx_agent_xid_errors_total",
                  "XID errors reported by the driver, by code", registry)),
      notices_(Build(prometheus::BuildCounter(), "phalanx_agent_notices_total",
                     "Preemption and maintenance notices, by source and kind", registry)),
      source_errors_(Build(prometheus::BuildCounter(), "phalanx_agent_notice_source_errors_total",
                           "Failed polls of a notice source (metadata server down, garbage)",
                           registry)),
      checks_(Build(prometheus::BuildGauge(), "phalanx_agent_check_ok",
                    "Node checks: 1 passing, 0 failing", registry)),
      cliques_(Build(prometheus::BuildGauge(), "phalanx_agent_cliques",
                     "GPU cliques of this node's tasks, by state", registry)),
      clique_drops_(Build(prometheus::BuildCounter(),
                          "phalanx_agent_clique_connections_dropped_total",
                          "Clique socket connections the agent closed: over the connection limit "
                          "(limit) or past the whole-request deadline (deadline)",
                          registry)) {}

template <typename Metric>
Metric& AgentMetrics::Child(prometheus::Family<Metric>& family,
                            std::map<std::string, Metric*>& cache, const std::string& label,
                            const std::string& value) {
  Metric*& m = cache[value];
  if (m == nullptr) m = &family.Add({{label, value}});
  return *m;
}

void AgentMetrics::SetGauges(prometheus::Family<prometheus::Gauge>& family,
                             std::map<std::string, prometheus::Gauge*>& cache,
                             const std::string& label, const std::map<std::string, int>& counts) {
  for (auto& [value, gauge] : cache) gauge->Set(0);
  for (const auto& [value, count] : counts) Child(family, cache, label, value).Set(count);
}

void AgentMetrics::SetGpusByHealth(const std::map<std::string, int>& counts) {
  absl::MutexLock lock(&mu_);
  SetGauges(gpus_by_health_, health_gauges_, "health", counts);
}

void AgentMetrics::AddXid(int xid) {
  absl::MutexLock lock(&mu_);
  Child(xids_, xid_counters_, "xid", absl::StrCat(xid)).Increment();
}

void AgentMetrics::Notice(const std::string& source, const std::string& kind) {
  absl::MutexLock lock(&mu_);
  prometheus::Counter*& c = notice_counters_[source + "/" + kind];
  if (c == nullptr) c = &notices_.Add({{"source", source}, {"kind", kind}});
  c->Increment();
}

void AgentMetrics::SourceError(const std::string& source) {
  absl::MutexLock lock(&mu_);
  Child(source_errors_, error_counters_, "source", source).Increment();
}

void AgentMetrics::NoticeSourceKnown(const std::string& source) {
  absl::MutexLock lock(&mu_);
  Child(source_errors_, error_counters_, "source", source);
}

void AgentMetrics::SetCheck(const std::string& check, bool ok) {
  absl::MutexLock lock(&mu_);
  Child(checks_, check_gauges_, "check", check).Set(ok ? 1 : 0);
}

void AgentMetrics::SetCliquesByState(const std::map<std::string, int>& counts) {
  absl::MutexLock lock(&mu_);
  SetGauges(cliques_, clique_gauges_, "state", counts);
}

void AgentMetrics::CliqueConnectionDropped(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  Child(clique_drops_, clique_drop_counters_, "reason", reason).Increment();
}

}  // namespace phalanx::agent
