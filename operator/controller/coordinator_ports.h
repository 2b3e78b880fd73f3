// CoordinatorPortLedger: in port-hash mode (ReconcilerOptions::coordinator_port_base, the local
// cluster's process nodes, where every coordinator shares the machine's ports) which coordinator
// port each job was handed. Even ports only, so a coordinator's metrics port (port + 1) never
// collides with another job's gRPC port. A job's slot is its UID's hash, or the next slot that
// no other job's coordinator pod holds and no other job was handed (its pod may not be in the
// cache yet): with a hash alone, two of a few dozen jobs share a port (the birthday bound), and
// the second coordinator exits at start ("cannot listen") however often it is recreated.
// Thread-safe (reconcile workers share it).
#pragma once

#include <map>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace phalanx::op {

class CoordinatorPortLedger {
 public:
  // Ports base, base + 2, ..., below base + span (at least one slot).
  CoordinatorPortLedger(int base, int span) : base_(base), slots_(span / 2 > 1 ? span / 2 : 1) {}

  // `key`'s coordinator pod already listens on `port` (its tasks were told it): it keeps it.
  void Keep(const std::string& key, int port);
  // The port for `key`'s next coordinator pod (job UID `uid`): its hash slot, or the next one
  // that is neither in `taken` (other jobs' coordinator pods) nor handed to another job; the
  // hash slot when every slot is. Handed to `key` from now on (any earlier port released).
  int Assign(const std::string& key, const std::string& uid, const std::set<int>& taken);
  // The job is gone: its port may be handed to another.
  void Release(const std::string& key);

 private:
  const int base_;
  const int slots_;
  absl::Mutex mu_;
  std::map<int, std::string> handed_ ABSL_GUARDED_BY(mu_);  // port → job key
};

}  // namespace phalanx::op
