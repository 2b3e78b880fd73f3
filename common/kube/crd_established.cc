#include "common/kube/crd_established.h"

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"

namespace phalanx::kube {

bool CrdIsEstablished(const Json& crd) {
  for (const Json& c : ArrayOrEmpty(FieldOrNull(crd, "status"), "conditions").as_array()) {
    if (StringAt(c, "type") == "Established" && StringAt(c, "status") == "True") return true;
  }
  return false;
}

absl::Status WaitForCrdEstablished(Client& client, const std::string& name, absl::Duration timeout,
                                   const base::Clock& clock) {
  const Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions", false};
  const absl::Time deadline = clock.Now() + timeout;
  absl::Status last = absl::OkStatus();
  while (true) {
    absl::StatusOr<Json> crd = client.Get(crds, "", name);
    if (crd.ok() && CrdIsEstablished(*crd)) return absl::OkStatus();
    if (!crd.ok()) last = crd.status();
    if (clock.Now() >= deadline) break;
    // No watch says "Established" short of a CRD watch: a poll, bounded by the caller's timeout.
    clock.SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("the CRD ", name, " was not Established within ", absl::FormatDuration(timeout),
                   last.ok() ? "" : absl::StrCat(" (last read: ", last.ToString(), ")")));
}

}  // namespace phalanx::kube
