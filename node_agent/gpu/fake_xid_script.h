// FakeXidScript: scripted GPU failures for an agent in fake-GPU mode (`--fake_xid_file`). A test
// or a demo appends lines "<gpu index> <xid>" ("1 79") to a file; each Poll reads the lines added
// since the last one and injects each XID once into the FakeNvml, as if the driver had raised
// it. This is how the local cluster's end-to-end tests make one fake GPU on one node fail while
// the agent runs as its own process. Not for real GPUs: the agent refuses the flag without
// --fake_gpus.
//
// A missing file is "nothing scripted yet". A partial last line waits for its newline. A bad line
// (not two numbers, a GPU that does not exist) is logged and skipped, never fatal. Not
// thread-safe: the agent's tick calls it.
#pragma once

#include <cstdint>
#include <string>

#include "node_agent/gpu/fake_nvml.h"

namespace phalanx::agent {

class FakeXidScript {
 public:
  FakeXidScript(std::string path, FakeNvml& nvml) : path_(std::move(path)), nvml_(nvml) {}

  // Injects the XIDs of the complete lines added since the last call; returns how many.
  int Poll();

 private:
  const std::string path_;
  FakeNvml& nvml_;
  uint64_t consumed_ = 0;  // bytes of the file already handled (whole lines)
};

}  // namespace phalanx::agent
