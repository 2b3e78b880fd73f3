// GpuHealthTracker: keeps every GPU's health current. Each Tick (driven by the node agent's
// periodic runner) drains pending XID events, re-reads temperature and ECC counters, and
// classifies each GPU with ClassifyGpuHealth (gpu_health.h). It reports GPUs that newly became
// Failed so the agent can taint the node and notify the jobs using them, and keeps counters
// for the agent's metrics.
//
// Failed is sticky: a GPU that failed stays Failed for the life of the tracker (XID events are
// one-shot, and a failed GPU needs a reset, which restarts the agent's view anyway). Degraded
// is not: a GPU recovers once it cools down and its corrected ECC count stops growing for
// `corrected_ecc_hold`.
//
// Thread-safety: thread-safe. Tick must not run concurrently with itself (one runner thread);
// the accessors may be called from any thread (e.g. a metrics scrape) at any time.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node_agent/gpu/gpu_health.h"
#include "node_agent/gpu/gpu_inventory.h"
#include "node_agent/gpu/nvml_api.h"

namespace phalanx::agent {

class GpuHealthTracker {
 public:
  struct Options {
    GpuHealthThresholds thresholds;
    // A GPU stays Degraded until its corrected ECC count has not grown for this long.
    absl::Duration corrected_ecc_hold = absl::Minutes(10);
  };
  struct FailedGpu {
    int index = 0;
    std::string uuid;
    std::vector<std::string> reasons;
  };
  struct Counters {
    std::map<uint64_t, uint64_t> xids_by_code;  // every XID seen since Create, fatal or not
    std::map<GpuHealth, int> gpus_by_health;    // now; all three keys always present
    uint64_t xid_poll_errors = 0;               // failed XID polls
    bool xid_events_available = false;          // an event set exists and >= 1 GPU is in it
  };

  // Reads the inventory (the GPU count is fixed from here on) and registers every GPU for XID
  // events. A GPU that cannot report XIDs is still tracked through ECC and temperature (logged).
  // Errors: those of ReadInventory.
  static absl::StatusOr<std::unique_ptr<GpuHealthTracker>> Create(NvmlApi& nvml, Options options);
  static absl::StatusOr<std::unique_ptr<GpuHealthTracker>> Create(NvmlApi& nvml) {
    return Create(nvml, Options());
  }
  ~GpuHealthTracker();  // frees the event set

  // Polls, re-reads and reclassifies every GPU; returns the GPUs that became Failed in this
  // tick (each GPU is returned at most once per tracker). Read failures do not fail the tick:
  // an unreadable GPU is Degraded (or Failed when lost), a failed XID poll is counted and
  // retried on the next tick.
  std::vector<FailedGpu> Tick(absl::Time now);

  // The latest snapshot: Create's reading until the first Tick.
  GpuInventory inventory() const;
  // What the latest Tick returned.
  std::vector<FailedGpu> newly_failed() const;
  Counters counters() const;

 private:
  struct GpuState {
    std::set<uint64_t> xids;
    std::optional<uint64_t> last_corrected;
    std::deque<std::pair<absl::Time, uint64_t>> corrected_growth;  // within the hold window
    bool failed = false;                                           // sticky
    std::vector<std::string> failed_reasons;
  };

  GpuHealthTracker(NvmlApi& nvml, Options options, GpuInventory inventory, NvmlEventSet events,
                   bool xid_events_available);
  // Classifies one fresh reading and stores it; adds the GPU to `newly_failed` when it fails.
  void ApplyLocked(absl::Time now, GpuReading reading, std::vector<FailedGpu>& newly_failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  NvmlApi& nvml_;
  const Options options_;
  const NvmlEventSet events_;
  const int gpu_count_;

  mutable absl::Mutex mu_;
  GpuInventory inventory_ ABSL_GUARDED_BY(mu_);
  std::vector<GpuState> states_ ABSL_GUARDED_BY(mu_);
  std::vector<FailedGpu> newly_failed_ ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::agent
