#include "runtime/clique/nccl_api.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace phalanx::clique {

absl::StatusOr<NcclUniqueId> NcclUniqueId::FromBytes(absl::string_view data) {
  if (data.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("an NCCL unique id is ", kNcclUniqueIdBytes, " bytes, got ", data.size()));
  }
  NcclUniqueId id;
  std::copy(data.begin(), data.end(), id.bytes.begin());
  return id;
}

}  // namespace phalanx::clique
