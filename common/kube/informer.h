// Informer: a watched, indexed, in-memory cache of one resource type (client-go's
// SharedIndexInformer, without the sharing), used by controllers (controller.h) to read the world
// without hitting the API server and to learn which objects changed.
//
// One background thread per informer runs the list-watch loop (CONVENTIONS.md "Watches"):
//
//        ┌──────────────► List (paged, limit 500, following continue tokens)
//        │                  │ ok: replace the cache, deliver add/update/delete for differences
//        │ 410 (OutOfRange) ▼
//        └──────────── Watch from the list's resourceVersion (bookmarks on, server timeout)
//                        │ event: apply to the cache, remember its resourceVersion
//                        │ stream end / error: back off (jittered, ≤ 30 s), re-watch from the
//                        └ last resourceVersion (a List or Watch call failure backs off too)
// A long back-off is cut short as soon as a small probe list succeeds, so after an API server
// outage the cache catches up within a probe interval, not the back-off built up meanwhile.
//
// Handlers run on the informer thread, never under the cache lock, in event order; a slow
// handler delays the informer, so handlers should only enqueue work. Handlers added after
// Start() first receive an add for every cached object (on the informer thread).
// The resync period (if set) re-delivers update(obj, obj) for every cached object, judged on
// the injected Clock. Waits between polls and backoffs are on real time and end at Stop().
//
// Thread-safety: every public method is thread-safe. Stop() returns once the thread has ended;
// it is bounded by the poll interval (200 ms), one in-flight API call and one handler call.
#pragma once

#include <cpprest/json.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/backoff.h"
#include "common/base/clock.h"
#include "common/kube/client.h"
#include "common/kube/object_key.h"

namespace phalanx::kube {

// Callbacks for cache changes; unset members are skipped (each has an initializer, so a
// designated initializer may name only the ones it sets).
struct ResourceEventHandler {
  std::function<void(const Json& object)> on_add{};
  std::function<void(const Json& old_object, const Json& new_object)> on_update{};
  // The object's last known state (from the DELETED event, or the cache on a relist).
  std::function<void(const Json& object)> on_delete{};
};

// Maps an object to the index values it is filed under (e.g. every owner uid).
using IndexFunc = std::function<std::vector<std::string>(const Json& object)>;

class Informer {
 public:
  // Built-in indexes.
  static constexpr char kNamespaceIndex[] = "namespace";  // metadata.namespace
  static constexpr char kOwnerIndex[] = "owner";          // every ownerReferences[].uid

  struct Options {
    std::string namespace_;  // "" = every namespace
    std::string label_selector;
    std::string field_selector;
    absl::Duration server_timeout = absl::Minutes(5);     // watch timeoutSeconds
    absl::Duration resync_period = absl::ZeroDuration();  // zero: never
    int64_t page_size = 500;
    absl::Duration poll_interval = absl::Milliseconds(200);  // bounds Stop()
    absl::Duration initial_backoff = absl::Milliseconds(200);
    absl::Duration max_backoff = absl::Seconds(30);
    // During a back-off longer than this, a one-item list this often asks whether the server
    // answers again; when it does, the back-off ends and the informer lists and watches at once
    // (so the cache is not stale for up to max_backoff after an outage). Zero: never probe.
    absl::Duration probe_interval = absl::Seconds(1);
    // Applied to every object as it arrives, before it is cached, indexed or handed to a
    // handler (client-go's SetTransform): drop what the controller never reads, so the cache
    // holds less. Must not change the object's namespace, name or resourceVersion.
    std::function<void(Json&)> transform;
  };

  Informer(Client& client, base::Clock& clock, Resource resource, Options options);
  Informer(Client& client, base::Clock& clock, Resource resource)
      : Informer(client, clock, std::move(resource), Options()) {}
  ~Informer();  // Stop()
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Adds a custom index, filing the objects cached so far at once (any time; a second index of
  // the same name is ignored with a log line).
  void AddIndex(const std::string& name, IndexFunc index);
  // Any time; see the header comment for handlers added after Start().
  void AddHandler(ResourceEventHandler handler);

  // Starts the background thread. Idempotent; no-op after Stop().
  void Start();
  // Ends the thread (bounded, see above). Idempotent; the cache stays readable. Not from a
  // handler (it would wait for itself).
  void Stop();

  // True once the first complete List has been applied.
  bool HasSynced() const;
  // Waits up to `timeout` of real time for HasSynced(); false if it did not happen (or Stop()).
  bool WaitForSync(absl::Duration timeout) const;

  std::optional<Json> Get(const std::string& ns, const std::string& name) const;
  // Every cached object (unordered).
  std::vector<Json> List() const;
  // Calls `visit` on every cached object (unordered), one at a time, so a walk over thousands
  // holds one of them as JSON at a time (List() holds them all). Outside the cache's lock: what
  // was cached when it began.
  void ForEach(absl::FunctionRef<void(const Json&)> visit) const;
  // Objects filed under `value` in index `index_name`; empty for an unknown index.
  std::vector<Json> ByIndex(const std::string& index_name, const std::string& value) const;
  // The values of index `index_name` that some cached object is filed under (unordered; empty
  // for an unknown index), without copying any object.
  std::vector<std::string> IndexValues(const std::string& index_name) const;

  const Resource& resource() const { return resource_; }
  // The resourceVersion the next watch would start from ("" before the first list).
  std::string last_resource_version() const;
  // Lists forced by an expired resourceVersion (410), not counting the first one.
  int64_t relists() const;
  // Watches re-opened after a stream ended or failed (not after a relist).
  int64_t watch_restarts() const;
  // Objects cached, replaced or dropped so far: while it stands still, so does the cache (unlike
  // last_resource_version(), which bookmarks move with every change anywhere in the cluster).
  uint64_t changes() const;

 private:
  struct Delivery {
    enum class Kind { kAdd, kUpdate, kDelete } kind;
    Json old_object;
    Json object;
  };
  enum class WatchEnd { kStopped, kRelist, kRewatch };

  void Loop();
  // Lists every page and replaces the cache; deliveries for the differences.
  absl::Status ListAndReplace();
  // Opens a watch and applies its events until it ends. `progressed`: it delivered an event or
  // stayed open long enough to count as healthy (the backoff resets).
  WatchEnd WatchOnce(bool& progressed);
  void ApplyEvent(const WatchEventData& event);
  // Waits `d` of real time or until Stop(); false once stopping.
  bool SleepUnlessStopped(absl::Duration d);
  // A back-off of `d` that ends early once a probe list succeeds (Options::probe_interval);
  // false once stopping.
  bool BackOff(absl::Duration d);
  bool Stopping() const;

  // Background-thread housekeeping between polls: late handlers and resync.
  void ActivatePendingHandlers();
  void MaybeResync();
  void Deliver(const std::vector<Delivery>& deliveries);

  // A cached object is kept as its JSON text: cpprest's JSON tree costs ~5x its text (a heap
  // node per value, a std::string per key), and the operator caches nine pods a job (issue 33:
  // 1,000 jobs). A read parses the text where it used to copy the tree: tens of microseconds a
  // pod, on reads that are per job, never per event.
  struct CachedObject {
    std::string text;
    std::string resource_version;  // what a relist compares, without parsing
  };
  static CachedObject Pack(const Json& object);
  std::vector<CachedObject> Snapshot() const;  // every cached object, as cached
  static Json Unpack(const CachedObject& cached);

  // Caches `object` under `key`; true (and the replaced object in `*previous`, if given) when
  // it replaced one.
  bool UpsertLocked(const std::string& key, const Json& object, Json* previous = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void IndexLocked(const std::string& key, const Json& object, bool add)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<const ResourceEventHandler*> HandlersSnapshot() const;

  Client& client_;
  base::Clock& clock_;
  const Resource resource_;
  const Options options_;
  base::ExponentialBackoff backoff_;  // informer thread only

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
  std::string resource_version_ ABSL_GUARDED_BY(mu_);
  int64_t relists_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t watch_restarts_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_resync_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::flat_hash_map<std::string, CachedObject> objects_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, IndexFunc> index_funcs_ ABSL_GUARDED_BY(mu_);
  // index name → value → keys
  absl::flat_hash_map<std::string,
                      absl::flat_hash_map<std::string, absl::flat_hash_set<std::string>>>
      indexes_ ABSL_GUARDED_BY(mu_);
  // Handlers are never removed, so the pointers a delivery snapshots stay valid.
  std::vector<std::unique_ptr<ResourceEventHandler>> handlers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<ResourceEventHandler>> pending_handlers_ ABSL_GUARDED_BY(mu_);

  absl::Mutex start_stop_mu_;  // serialises Start() and Stop()
  std::thread thread_ ABSL_GUARDED_BY(start_stop_mu_);
};

}  // namespace phalanx::kube
