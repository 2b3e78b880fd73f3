// EventRecorder: writes core/v1 Events about objects (what `kubectl describe` shows), for the
// operator's reconciler and the node agent. Best effort, as client-go's recorder: a failure to
// write an Event is logged and dropped, never returned, and Record() makes at most one API call.
//
// Aggregation: a repeat of the same (object uid, type, reason, message) within 10 minutes of the
// previous occurrence patches the existing Event (count + 1, lastTimestamp) instead of creating
// another one. The aggregation cache is bounded (oldest entries evicted).
//
// Thread-safety: thread-safe; the API call runs outside the lock. Two racing repeats of one
// event may patch counts out of order (the count is then off by one until the next repeat).
#pragma once

#include <cpprest/json.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/kube/client.h"
#include "common/kube/resources.h"

namespace phalanx::kube {

inline const Resource& kEventResource = kEvents;

enum class EventType { kNormal, kWarning };

class EventRecorder {
 public:
  static constexpr absl::Duration kAggregationWindow = absl::Minutes(10);
  static constexpr size_t kMaxCachedEvents = 4096;

  // `component` is the reporting controller ("phalanx-operator"); `host` its node or pod.
  EventRecorder(Client& client, base::Clock& clock, std::string component, std::string host = "");

  // Records an event about `involved_object` (a full object: its apiVersion, kind and
  // metadata are referenced). Never fails; see the header comment.
  void Record(const Json& involved_object, EventType type, const std::string& reason,
              const std::string& message);

  // Metrics/tests: Events created, Events updated by aggregation, writes that failed.
  int64_t created() const { return created_.load(); }
  int64_t aggregated() const { return aggregated_.load(); }
  int64_t failures() const { return failures_.load(); }

 private:
  using Key =
      std::tuple<std::string, std::string, std::string, std::string>;  // uid,type,reason,msg
  struct Entry {
    std::string event_namespace;
    std::string event_name;
    int64_t count = 0;
    absl::Time first_seen;
    absl::Time last_seen;
  };

  Json NewEvent(const Json& involved_object, const std::string& ns, const std::string& name,
                const std::string& type, const std::string& reason, const std::string& message,
                absl::Time now) const;
  std::string NextNameLocked(const std::string& object_name, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetLocked(const Key& key, const std::string& event_name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Client& client_;
  base::Clock& clock_;
  const std::string component_;
  const std::string host_;

  absl::Mutex mu_;
  std::map<Key, Entry> cache_ ABSL_GUARDED_BY(mu_);
  uint64_t last_suffix_ ABSL_GUARDED_BY(mu_) = 0;

  std::atomic<int64_t> created_{0};
  std::atomic<int64_t> aggregated_{0};
  std::atomic<int64_t> failures_{0};
};

}  // namespace phalanx::kube
