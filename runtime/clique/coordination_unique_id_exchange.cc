#include "runtime/clique/coordination_unique_id_exchange.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace phalanx::clique {

absl::Status CoordinationUniqueIdExchange::Publish(const std::string& key, const NcclUniqueId& id) {
  absl::Status inserted = client_.KvInsert(key, id.ToBytes(), /*allow_overwrite=*/false);
  if (!absl::IsAlreadyExists(inserted)) return inserted;
  // Publishing twice (a retried RPC) is fine as long as it is the same id.
  ASSIGN_OR_RETURN(std::string existing, client_.KvTryGet(key));
  if (existing == id.ToBytes()) return absl::OkStatus();
  return absl::AlreadyExistsError(absl::StrCat("another unique id is published under ", key));
}

absl::StatusOr<NcclUniqueId> CoordinationUniqueIdExchange::Fetch(const std::string& key,
                                                                 absl::Duration timeout) {
  absl::StatusOr<std::string> value =
      timeout > absl::ZeroDuration() ? client_.KvGet(key, timeout) : client_.KvTryGet(key);
  if (!value.ok()) return value.status();
  absl::StatusOr<NcclUniqueId> id = NcclUniqueId::FromBytes(*value);
  if (!id.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("value under ", key, ": ", id.status().message()));
  }
  return id;
}

}  // namespace phalanx::clique
