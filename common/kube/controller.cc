#include "common/kube/controller.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/log.h"
#include "common/kube/object_meta.h"

namespace phalanx::kube {

KeysFor KeysForSelf() {
  return [](const Json& object) { return std::vector<std::string>{KeyOf(object)}; };
}

KeysFor KeysForControllerOwner(const std::string& owner_kind) {
  return [owner_kind](const Json& object) {
    std::optional<OwnerReference> owner = ControllerOf(object);
    if (!owner || owner->name.empty() || (!owner_kind.empty() && owner->kind != owner_kind)) {
      return std::vector<std::string>{};
    }
    return std::vector<std::string>{KeyFor(MetaString(object, "namespace"), owner->name)};
  };
}

const char* ReconcileResultName(ReconcileResult result) {
  switch (result) {
    case ReconcileResult::kOk:
      return "ok";
    case ReconcileResult::kError:
      return "error";
    case ReconcileResult::kConflict:
      return "conflict";
  }
  return "error";
}

Controller::Controller(std::string name, base::Clock& clock, Options options)
    : name_(std::move(name)),
      clock_(clock),
      options_(std::move(options)),
      queue_(clock_, options_.queue) {}

Controller::~Controller() { Stop(); }

void Controller::Watch(Informer& informer, KeysFor keys_for) {
  {
    absl::MutexLock lock(&mu_);
    informers_.push_back(&informer);
  }
  auto enqueue = [this, keys_for](const Json& object) {
    for (const std::string& key : keys_for(object)) {
      if (!key.empty()) queue_.Add(key);
    }
  };
  ResourceEventHandler handler;
  handler.on_add = enqueue;
  handler.on_update = [enqueue](const Json& old_object, const Json& new_object) {
    enqueue(old_object);  // the queue collapses the common case of identical keys
    enqueue(new_object);
  };
  handler.on_delete = enqueue;
  informer.AddHandler(std::move(handler));
}

absl::Status Controller::Run(Reconciler reconciler) {
  std::vector<Informer*> informers;
  {
    absl::MutexLock lock(&mu_);
    if (running_ || stopped_) {
      return absl::FailedPreconditionError(
          absl::StrCat("controller ", name_, " is already running or stopped"));
    }
    running_ = true;
    informers = informers_;
  }
  // Real time, not the injected clock: this bounds a wait on the informers' first lists, which
  // make progress on real I/O (Informer::WaitForSync takes a real-time bound); no clock a test
  // advances could make them sync sooner or later.
  const absl::Time deadline = absl::Now() + options_.sync_timeout;
  for (Informer* informer : informers) {
    if (!informer->WaitForSync(deadline - absl::Now())) {
      absl::MutexLock lock(&mu_);
      running_ = false;
      return absl::DeadlineExceededError(
          absl::StrCat("controller ", name_, ": informer for ", informer->resource().Qualified(),
                       " did not sync within ", absl::FormatDuration(options_.sync_timeout)));
    }
  }
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::CancelledError(absl::StrCat("controller ", name_, " stopped"));
  reconciler_ = std::move(reconciler);
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    workers_.emplace_back([this] { Worker(); });
  }
  PHX_LOG(INFO) << "controller " << name_ << ": started " << workers_.size() << " workers";
  return absl::OkStatus();
}

void Controller::Enqueue(const std::string& key) { queue_.Add(key); }

void Controller::Stop() {
  std::vector<std::thread> workers;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    workers.swap(workers_);
  }
  stopping_.store(true);
  queue_.ShutDown();
  for (std::thread& worker : workers) worker.join();
}

void Controller::Worker() {
  while (!stopping_.load()) {
    std::optional<std::string> key = queue_.Get(options_.poll_interval);
    if (!key) continue;
    ProcessOne(*key);
    queue_.Done(*key);
  }
}

void Controller::ProcessOne(const std::string& key) {
  const absl::Time started = clock_.Now();
  absl::StatusOr<Result> result;
  // Reconcilers run JSON code that throws; one bad object must not end a worker.
  try {
    result = reconciler_(key);
  } catch (const std::exception& e) {
    result = absl::InternalError(absl::StrCat("reconciler threw: ", e.what()));
  }
  reconciles_.fetch_add(1);
  if (options_.observe_pass) {
    options_.observe_pass(result.ok()                        ? ReconcileResult::kOk
                          : absl::IsAborted(result.status()) ? ReconcileResult::kConflict
                                                             : ReconcileResult::kError,
                          clock_.Now() - started);
  }
  if (result.ok()) {
    queue_.Forget(key);
    if (result->requeue_after > absl::ZeroDuration()) queue_.AddAfter(key, result->requeue_after);
    return;
  }
  if (absl::IsAborted(result.status())) {
    // A 409: someone else wrote first; the next pass reads the newer state. Not an error.
    conflicts_.fetch_add(1);
    queue_.AddRateLimited(key);
    return;
  }
  errors_.fetch_add(1);
  PHX_LOG(WARNING) << "controller " << name_ << ": reconcile " << key << " failed (attempt "
                   << queue_.Failures(key) + 1 << "): " << result.status();
  queue_.AddRateLimited(key);
}

}  // namespace phalanx::kube
