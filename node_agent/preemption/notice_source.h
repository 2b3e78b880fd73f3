// NoticeSource: one way for the node agent to learn that its node is about to go away (a spot
// preemption, host maintenance, a drain, a graceful node shutdown). The agent keeps one of each
// configured source and, every poll interval (a tick), calls Poll on each; a notice it gets marks
// the node (a taint the operator acts on: every job with a task there checkpoints in time; see
// docs/adr/0002-agent-notices-through-the-node.md).
// Implementations: GceMetadataSource, AwsSpotSource (metadata servers over HTTP), SigtermSource
// (the agent's own SIGTERM), NodeTaintSource (the node's taints and cordon in the Kubernetes API).
//
// Thread-safety: the agent's tick thread is the only caller of Poll; Poll must not be called
// concurrently on one source. name() may be called from any thread. Sources may add methods that
// are safe from other threads (SigtermSource::Trigger).
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace phalanx::agent {

struct NodeNotice {
  std::string source;  // NoticeSource::name() of the source that saw it
  std::string kind;    // "preemption" or "maintenance"
  std::string detail;  // what the source saw, for logs and Events: "preempted=TRUE", a taint key
  // When the node goes away (or maintenance starts); absl::InfiniteFuture() when unknown. A
  // source keeps the deadline of a notice it keeps seeing stable from one Poll to the next.
  absl::Time deadline = absl::InfiniteFuture();

  friend bool operator==(const NodeNotice&, const NodeNotice&) = default;

  std::string DebugString() const {
    return absl::StrCat(source, ": ", kind, " (", detail, "), deadline ",
                        absl::FormatTime(deadline, absl::UTCTimeZone()));
  }
  friend void PrintTo(const NodeNotice& n, std::ostream* os) { *os << n.DebugString(); }
};

inline constexpr char kPreemptionNotice[] = "preemption";
inline constexpr char kMaintenanceNotice[] = "maintenance";

class NoticeSource {
 public:
  virtual ~NoticeSource() = default;

  // A short stable name for logs and metrics labels: "gce-metadata", "aws-spot", "sigterm",
  // "node-taint".
  virtual std::string name() const = 0;

  // Checks once, bounded in time (each source's own request timeout, 2 s by default), so a slow
  // server cannot stall the agent's tick. Returns nullopt when the node is not about to go away,
  // the notice when it is. Errors are returned, never thrown, and never crash; the agent logs
  // them, counts them and polls again next tick:
  //   DeadlineExceeded  the server did not answer within the request timeout
  //   Unavailable       connection refused / reset / closed early, a 5xx, an unparseable HTTP
  //                     response
  //   Internal          the server answered 200 with a body that is not what the API promises
  //   NotFound, PermissionDenied, ...  other HTTP or Kubernetes API errors
  // `now` is the agent's Clock time for this tick; deadlines a source computes ("30 s after
  // preempted=TRUE was first seen") are measured from it.
  virtual absl::StatusOr<std::optional<NodeNotice>> Poll(absl::Time now) = 0;

  // False while a Poll's "no notice" only means "nothing known yet" (a source polled in the
  // background before its first answer): the agent must not take it as "the notice is over".
  virtual bool answered() const { return true; }
};

// Remembers when a source first saw the notice it keeps seeing, so the deadline it computes from
// that moment ("30 s after preempted=TRUE") stays put from one Poll to the next instead of moving
// with every tick. A helper for implementations; not thread-safe (used from Poll).
class FirstSeen {
 public:
  // When `what` was first observed in the current unbroken run of Observe(what, ...) calls:
  // `now` when it is new or differs from the last one observed.
  absl::Time Observe(const std::string& what, absl::Time now) {
    if (!since_.has_value() || what != what_) {
      what_ = what;
      since_ = now;
    }
    return *since_;
  }
  // The notice is gone; the next Observe starts a new run.
  void Reset() { since_.reset(); }

 private:
  std::string what_;
  std::optional<absl::Time> since_;
};

}  // namespace phalanx::agent
