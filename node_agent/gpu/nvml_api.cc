#include "node_agent/gpu/nvml_api.h"

#include "absl/strings/str_cat.h"

namespace phalanx::agent {

std::string FormatCudaVersion(int cuda_version) {
  if (cuda_version <= 0) return "unknown";
  return absl::StrCat(cuda_version / 1000, ".", (cuda_version % 1000) / 10);
}

}  // namespace phalanx::agent
