#include "node_agent/preflight.h"

#include "absl/strings/str_join.h"
#include "node_agent/gpu/gpu_inventory.h"
#include "node_agent/gpu/nvml_loader.h"

namespace phalanx::agent {

int RunPreflight(const std::string& nvml_path, std::ostream& out) {
  absl::StatusOr<std::unique_ptr<NvmlApi>> nvml = NvmlLoader::Load(nvml_path);
  if (!nvml.ok()) {
    out << "preflight: skipped: no GPU (" << nvml.status().message() << ")\n";
    return 0;
  }
  absl::StatusOr<GpuInventory> inventory = ReadInventory(**nvml);
  if (!inventory.ok()) {
    out << "preflight: failed: cannot read the GPUs: " << inventory.status().message() << "\n";
    return 1;
  }
  if (inventory->gpus.empty()) {
    out << "preflight: skipped: no GPU (the driver reports none)\n";
    return 0;
  }
  out << "preflight: driver " << inventory->driver_version << ", CUDA " << inventory->cuda_version
      << ", " << inventory->gpus.size() << " GPU(s)\n";
  int failed = 0;
  for (const GpuInfo& gpu : inventory->gpus) {
    out << "  gpu" << gpu.index << " " << gpu.name << " " << gpu.uuid << ": "
        << GpuHealthName(gpu.health);
    if (!gpu.health_reasons.empty()) out << " (" << absl::StrJoin(gpu.health_reasons, "; ") << ")";
    out << "\n";
    if (gpu.health == GpuHealth::kFailed) ++failed;
  }
  out << (failed == 0 ? "preflight: ok\n" : "preflight: failed: a GPU is unhealthy\n");
  return failed == 0 ? 0 : 1;
}

}  // namespace phalanx::agent
