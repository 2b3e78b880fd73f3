// Whether a CustomResourceDefinition is Established, and a bounded wait for it: a real API
// server serves (and lists in discovery) a new CRD's resource only once it is. (`kubectl wait
// --for condition=Established` fails outright while status.conditions is still empty.) The one
// C++ copy of that wait, for tests, benchmarks and tools that install the CRD themselves.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/kube/client.h"
#include "common/kube/json.h"

namespace phalanx::kube {

// True when `crd` has the condition Established=True.
bool CrdIsEstablished(const Json& crd);

// Polls the CRD `name` until it is Established, pacing the reads on `clock`; DeadlineExceeded
// after `timeout` (naming the last read's error, if any).
absl::Status WaitForCrdEstablished(Client& client, const std::string& name, absl::Duration timeout,
                                   const base::Clock& clock = base::RealClock::Get());

}  // namespace phalanx::kube
