#include "node_agent/preemption/sigterm_source.h"

namespace phalanx::agent {

absl::StatusOr<std::optional<NodeNotice>> SigtermSource::Poll(absl::Time now) {
  if (!triggered()) return std::nullopt;
  const absl::Time since = seen_.Observe("SIGTERM", now);
  return NodeNotice{name(), kPreemptionNotice, "agent received SIGTERM (node shutting down)",
                    since + grace_};
}

}  // namespace phalanx::agent
