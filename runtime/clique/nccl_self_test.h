// NcclSelfTest: an all-reduce over every GPU of this process, for `phalanx-agent preflight` and
// the `gpu`-labelled tests: one communicator per device (ncclCommInitAll), `iterations` float32
// sum all-reduces of `bytes` each inside one NCCL group, the result checked on every device,
// and bus bandwidth computed as nccl-tests does (2·(n−1)/n · bytes / time per all-reduce).
// libnccl and libcudart are loaded with dlopen (the NcclLoader paths), so this builds and
// answers "no GPU" on machines without them. Blocking; call it from a tool or test thread.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace phalanx::clique {

struct AllReduceCheck {
  int devices = 0;
  double init_ms = 0;       // ncclCommInitAll
  double allreduce_ms = 0;  // mean per all-reduce
  double busbw_gbps = 0;    // GB/s
  bool correct = false;     // every element equals the number of devices
};

// Unavailable: no libcudart/libnccl, or no GPU (the message says which, for "skipped: ...").
// Internal: a CUDA or NCCL call failed (named in the message).
absl::StatusOr<AllReduceCheck> RunLocalAllReduce(size_t bytes, int iterations);

}  // namespace phalanx::clique
