// InMemoryUniqueIdExchange: a UniqueIdExchange inside one process, for tests and for cliques
// whose ranks all live in one process. Fetch with a timeout waits on a condition (real time);
// CliqueManager only fetches with a zero timeout. Thread-safe.
#pragma once

#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "runtime/clique/unique_id_exchange.h"

namespace phalanx::clique {

class InMemoryUniqueIdExchange final : public UniqueIdExchange {
 public:
  absl::Status Publish(const std::string& key, const NcclUniqueId& id) override;
  absl::StatusOr<NcclUniqueId> Fetch(const std::string& key, absl::Duration timeout) override;

  // How many ids were published (distinct keys).
  int published() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, NcclUniqueId> ids_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::clique
