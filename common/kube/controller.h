// Controller: the controller runner (controller-runtime's Controller): informer events become
// keys in a rate-limited WorkQueue, and N worker threads call one level-triggered
// Reconcile(key) per key (CONVENTIONS.md "Operator shape"). Used by the operator and the node
// agent; the reconciler reads the world from the informers' caches.
//
//   informer handlers ──keys_for(obj)──► WorkQueue ──► worker ×N ──► reconciler(key)
//                                          ▲                             │
//                                          └── OK + requeue_after: AddAfter
//                                              Aborted (409): AddRateLimited, quietly
//                                              other error: log + AddRateLimited
//
// The WorkQueue guarantees one worker per key at a time and collapses duplicate keys. Every
// time decision (requeue_after, per-key backoff) is on the injected Clock.
// Thread-safety: every public method is thread-safe; Stop() must not be called from inside the
// reconciler.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/kube/informer.h"
#include "common/kube/object_key.h"
#include "common/kube/work_queue.h"

namespace phalanx::kube {

// Maps an object from a watched informer to the keys to reconcile.
using KeysFor = std::function<std::vector<std::string>(const Json& object)>;

// The object's own key ("ns/name").
KeysFor KeysForSelf();
// The key of the object's controller owner ({} if it has none, or its kind is not `owner_kind`;
// an empty kind accepts any). The owner is assumed to live in the object's namespace.
KeysFor KeysForControllerOwner(const std::string& owner_kind = "");

// How one reconcile pass ended (Controller::Options::observe_pass).
enum class ReconcileResult {
  kOk,        // done, or asked to come back after a while
  kError,     // failed: retried with back-off
  kConflict,  // a 409: someone else wrote first; retried quietly
};
const char* ReconcileResultName(ReconcileResult result);  // "ok", "error", "conflict"

class Controller {
 public:
  struct Options {
    int workers = 2;
    // How long Run() waits for every watched informer's first list. Real time, the one place
    // here that is not on the injected clock: it bounds waiting on the API server (I/O), as a
    // request timeout does, and decides nothing a test should step through.
    absl::Duration sync_timeout = absl::Minutes(2);
    WorkQueue::Options queue;
    // How long an idle worker waits on the queue (on the injected clock) before it looks for a
    // Stop() again; Stop() also wakes it at once.
    absl::Duration poll_interval = absl::Milliseconds(200);
    // Told of every pass the workers run (a deleted object's too, as controller-runtime counts
    // them) and how long it took on the injected clock: the reconcile metrics. Optional; called
    // on the worker thread, so it must be cheap and thread-safe.
    std::function<void(ReconcileResult, absl::Duration)> observe_pass;
  };
  struct Result {
    absl::Duration requeue_after = absl::ZeroDuration();  // > 0: reconcile again after this
  };
  using Reconciler = std::function<absl::StatusOr<Result>(const std::string& key)>;

  Controller(std::string name, base::Clock& clock, Options options);
  Controller(std::string name, base::Clock& clock)
      : Controller(std::move(name), clock, Options()) {}
  ~Controller();  // Stop()
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Enqueues keys_for(object) on every add/update/delete of `informer` (for an update, the
  // keys of both the old and the new object, since an owner can change). Call before Run().
  // The informer is Start()ed by its owner, and must be Stop()ped before this controller is
  // destroyed (informer handlers cannot be removed; they call into this controller).
  void Watch(Informer& informer, KeysFor keys_for);

  // Waits for every watched informer to sync, then starts the workers and returns.
  // DeadlineExceeded (naming the resource) if an informer did not sync within sync_timeout;
  // FailedPrecondition if already running or stopped.
  absl::Status Run(Reconciler reconciler);

  void Enqueue(const std::string& key);

  // Shuts the queue down and joins the workers: bounded by the poll interval plus any
  // reconcile in progress. Idempotent.
  void Stop();

  const std::string& name() const { return name_; }
  // Metrics: reconciles run, failed ones (conflicts excluded), conflicts, ready keys queued.
  int64_t reconciles() const { return reconciles_.load(); }
  int64_t errors() const { return errors_.load(); }
  int64_t conflicts() const { return conflicts_.load(); }
  int queue_depth() { return queue_.Len(); }

 private:
  void Worker();
  void ProcessOne(const std::string& key);

  const std::string name_;
  base::Clock& clock_;
  const Options options_;
  WorkQueue queue_;
  Reconciler reconciler_;  // set once by Run() before the workers start; read-only after

  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Informer*> informers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};

  std::atomic<int64_t> reconciles_{0};
  std::atomic<int64_t> errors_{0};
  std::atomic<int64_t> conflicts_{0};
};

}  // namespace phalanx::kube
