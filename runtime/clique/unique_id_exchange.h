// UniqueIdExchange: how the ranks of a clique agree on its NCCL unique id. Rank 0 creates the
// id and publishes it under a key; every other rank fetches it. Implementations:
// CoordinationUniqueIdExchange (coordination_unique_id_exchange.h, the job's KV store) and
// InMemoryUniqueIdExchange (in_memory_unique_id_exchange.h, one process, for tests).
//
// CliqueManager calls Fetch with a zero timeout from its tick and enforces the clique's deadline
// itself, so a slow rank 0 never blocks the tick.
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/clique/nccl_api.h"

namespace phalanx::clique {

class UniqueIdExchange {
 public:
  virtual ~UniqueIdExchange() = default;

  // Publishes `id` under `key`. Publishing the same id again is OK. Errors: AlreadyExists (a
  // different id is already there), Unavailable (store unreachable), InvalidArgument (bad key).
  virtual absl::Status Publish(const std::string& key, const NcclUniqueId& id) = 0;

  // The id published under `key`, waiting at most `timeout` for it (zero: look once).
  // Errors: NotFound or DeadlineExceeded (not published in time), Unavailable, InvalidArgument
  // (bad key, or the stored value is not an id).
  virtual absl::StatusOr<NcclUniqueId> Fetch(const std::string& key, absl::Duration timeout) = 0;
};

}  // namespace phalanx::clique
