// CoordinationUniqueIdExchange: the production UniqueIdExchange, over the job's coordination
// key-value store (runtime/client/coordination_client.h): Publish is KvInsert without
// overwrite, Fetch is KvTryGet (zero timeout) or a blocking KvGet. Keys are CliqueKey KV
// prefixes plus an attempt suffix, so they follow the KV store's key rules.
//
// Thread-safe (the client is).
#pragma once

#include <string>

#include "runtime/client/coordination_client.h"
#include "runtime/clique/unique_id_exchange.h"

namespace phalanx::clique {

class CoordinationUniqueIdExchange final : public UniqueIdExchange {
 public:
  explicit CoordinationUniqueIdExchange(client::CoordinationClient& client) : client_(client) {}

  // Errors as UniqueIdExchange, plus the client's own (Aborted: this task was superseded).
  absl::Status Publish(const std::string& key, const NcclUniqueId& id) override;
  absl::StatusOr<NcclUniqueId> Fetch(const std::string& key, absl::Duration timeout) override;

 private:
  client::CoordinationClient& client_;
};

}  // namespace phalanx::clique
