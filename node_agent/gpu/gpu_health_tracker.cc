#include "node_agent/gpu/gpu_health_tracker.h"

#include <utility>

#include "absl/strings/str_join.h"
#include "common/base/log.h"

namespace phalanx::agent {
namespace {

std::map<GpuHealth, int> CountByHealth(const GpuInventory& inventory) {
  std::map<GpuHealth, int> counts = {
      {GpuHealth::kHealthy, 0}, {GpuHealth::kDegraded, 0}, {GpuHealth::kFailed, 0}};
  for (const GpuInfo& gpu : inventory.gpus) ++counts[gpu.health];
  return counts;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuHealthTracker>> GpuHealthTracker::Create(NvmlApi& nvml,
                                                                           Options options) {
  absl::StatusOr<GpuInventory> inventory = ReadInventory(nvml, options.thresholds);
  if (!inventory.ok()) return inventory.status();
  NvmlEventSet events;
  int registered = 0;
  if (!inventory->gpus.empty()) {
    absl::StatusOr<NvmlEventSet> set = nvml.EventSetCreate();
    if (set.ok()) {
      events = *set;
      for (const GpuInfo& gpu : inventory->gpus) {
        absl::StatusOr<NvmlDevice> device = nvml.DeviceByIndex(gpu.index);
        absl::Status s = device.ok() ? nvml.RegisterXidEvents(events, *device) : device.status();
        if (s.ok()) {
          ++registered;
        } else {
          PHX_LOG(WARNING) << "GPU " << gpu.index << " (" << gpu.uuid
                           << "): no XID events, tracking ECC and temperature only: " << s;
        }
      }
    } else {
      PHX_LOG(WARNING) << "no XID events for any GPU, tracking ECC and temperature only: "
                       << set.status();
    }
  }
  return std::unique_ptr<GpuHealthTracker>(new GpuHealthTracker(
      nvml, std::move(options), *std::move(inventory), events, registered > 0));
}

GpuHealthTracker::GpuHealthTracker(NvmlApi& nvml, Options options, GpuInventory inventory,
                                   NvmlEventSet events, bool xid_events_available)
    : nvml_(nvml),
      options_(std::move(options)),
      events_(events),
      gpu_count_(static_cast<int>(inventory.gpus.size())) {
  absl::MutexLock lock(&mu_);
  states_.resize(gpu_count_);
  counters_.gpus_by_health = CountByHealth(inventory);
  counters_.xid_events_available = xid_events_available;
  inventory_ = std::move(inventory);
}

GpuHealthTracker::~GpuHealthTracker() {
  if (!events_.valid()) return;
  if (absl::Status s = nvml_.EventSetFree(events_); !s.ok()) {
    PHX_LOG(WARNING) << "freeing the XID event set: " << s;
  }
}

std::vector<GpuHealthTracker::FailedGpu> GpuHealthTracker::Tick(absl::Time now) {
  // NVML first, without the lock, so a metrics scrape never waits on the driver.
  absl::StatusOr<std::vector<XidEvent>> xids = std::vector<XidEvent>();
  if (events_.valid()) xids = nvml_.PollXidEvents(events_);
  std::vector<GpuReading> readings;
  readings.reserve(gpu_count_);
  for (int i = 0; i < gpu_count_; ++i) readings.push_back(ReadGpu(nvml_, i));

  std::vector<FailedGpu> newly_failed;
  {
    absl::MutexLock lock(&mu_);
    if (xids.ok()) {
      for (const XidEvent& event : *xids) {
        ++counters_.xids_by_code[event.xid];
        if (event.device_index >= 0 && event.device_index < gpu_count_) {
          states_[event.device_index].xids.insert(event.xid);
        }
      }
    } else {
      ++counters_.xid_poll_errors;
    }
    for (GpuReading& reading : readings) ApplyLocked(now, std::move(reading), newly_failed);
    counters_.gpus_by_health = CountByHealth(inventory_);
    newly_failed_ = newly_failed;
  }

  if (!xids.ok()) PHX_LOG(WARNING) << "polling XID events: " << xids.status();
  for (const XidEvent& event : xids.value_or(std::vector<XidEvent>())) {
    PHX_LOG(WARNING) << "GPU " << event.device_index << ": XID " << event.xid
                     << (IsFatalXid(event.xid) ? " (fatal)" : "");
  }
  for (const FailedGpu& gpu : newly_failed) {
    PHX_LOG(ERROR) << "GPU " << gpu.index << " (" << gpu.uuid
                   << ") failed: " << absl::StrJoin(gpu.reasons, "; ");
  }
  return newly_failed;
}

void GpuHealthTracker::ApplyLocked(absl::Time now, GpuReading reading,
                                   std::vector<FailedGpu>& newly_failed) {
  const int index = reading.info.index;
  GpuState& state = states_[index];
  GpuInfo& previous = inventory_.gpus[index];
  GpuInfo& info = reading.info;
  if (info.uuid.empty()) {  // unreadable now: keep the identity it had
    info.name = previous.name;
    info.uuid = previous.uuid;
    info.pci_bus_id = previous.pci_bus_id;
    info.memory_total_bytes = previous.memory_total_bytes;
  }

  if (info.ecc_corrected) {
    // A lower count means the driver was reloaded (volatile counters reset): not growth.
    if (state.last_corrected && *info.ecc_corrected > *state.last_corrected) {
      state.corrected_growth.emplace_back(now, *info.ecc_corrected - *state.last_corrected);
    }
    state.last_corrected = info.ecc_corrected;
  }
  while (!state.corrected_growth.empty() &&
         now - state.corrected_growth.front().first >= options_.corrected_ecc_hold) {
    state.corrected_growth.pop_front();
  }

  GpuHealthSignals signals;
  signals.temperature_c = info.temperature_c;
  signals.ecc_uncorrected = info.ecc_uncorrected;
  for (const auto& [when, growth] : state.corrected_growth) signals.ecc_corrected_growth += growth;
  signals.xids = state.xids;
  signals.lost = reading.lost;
  signals.read_error = reading.read_error;
  GpuHealthVerdict verdict = ClassifyGpuHealth(signals, options_.thresholds);

  if (verdict.health == GpuHealth::kFailed && !state.failed) {
    state.failed = true;
    state.failed_reasons = verdict.reasons;
    newly_failed.push_back(FailedGpu{index, info.uuid, verdict.reasons});
  }
  if (state.failed && verdict.health != GpuHealth::kFailed) {
    verdict.health = GpuHealth::kFailed;
    verdict.reasons = state.failed_reasons;
  }
  info.health = verdict.health;
  info.health_reasons = std::move(verdict.reasons);
  previous = std::move(info);
}

GpuInventory GpuHealthTracker::inventory() const {
  absl::MutexLock lock(&mu_);
  return inventory_;
}

std::vector<GpuHealthTracker::FailedGpu> GpuHealthTracker::newly_failed() const {
  absl::MutexLock lock(&mu_);
  return newly_failed_;
}

GpuHealthTracker::Counters GpuHealthTracker::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace phalanx::agent
