// KvChain: one set→get chain of the key-value workload: inserts a key, reads it back, and
// starts over until `stop`. It runs on the client's completion threads, so one client keeps
// several operations in flight without a thread per operation. Shared by the coordination bench
// and the scale bench (the same workload, with and without N sessions open).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "runtime/client/coordination_client_impl.h"

namespace phalanx::bench {

struct KvChain {
  client::CoordinationClientImpl* client;
  std::string prefix;
  const std::string* value;
  std::atomic<bool>* stop;
  std::atomic<int64_t>* ops;  // +2 per completed set→get
  std::atomic<int>* running;  // decremented when this chain sees `stop`
  int64_t i = 0;

  void Next() {
    if (stop->load(std::memory_order_relaxed)) {
      --*running;
      return;
    }
    const std::string key = absl::StrCat(prefix, i++ % 1000);
    client->KvInsertAsync(key, *value, true, [this, key](absl::Status s) {
      if (!s.ok()) return Next();
      client->KvGetAsync(key, absl::Seconds(5), [this](absl::StatusOr<std::string> got) {
        if (got.ok()) *ops += 2;
        Next();
      });
    });
  }
};

}  // namespace phalanx::bench
