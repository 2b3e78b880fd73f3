#include "node_agent/preflight.h"

#include "absl/strings/str_join.h"
#include "node_agent/gpu/gpu_inventory.h"
#include "node_agent/gpu/nvml_loader.h"
#include "runtime/clique/nccl_self_test.h"

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
  if (failed > 0) {
    out << "preflight: failed: a GPU is unhealthy\n";
    return 1;
  }
  // Every GPU talks to every other through NCCL, and how fast.
  absl::StatusOr<clique::AllReduceCheck> check = clique::RunLocalAllReduce(size_t{64} << 20, 20);
  if (!check.ok()) {
    out << "preflight: failed: NCCL all-reduce: " << check.status().message() << "\n";
    return 1;
  }
  out << "  all-reduce over " << check->devices << " GPU(s): init " << check->init_ms << " ms, "
      << check->allreduce_ms << " ms per 64 MiB, bus bandwidth " << check->busbw_gbps
      << " GB/s, result " << (check->correct ? "correct" : "WRONG") << "\n";
  out << (check->correct ? "preflight: ok\n" : "preflight: failed: all-reduce result wrong\n");
  return check->correct ? 0 : 1;
}

}  // namespace phalanx::agent
