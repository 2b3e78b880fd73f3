// Test-only: a kube::Client that forwards to another (usually kube::fake::FakeClient) and
// adds the faults FakeClient's FailNext cannot express: ending every open watch stream
// (BreakWatches: the next Next() returns Unavailable, as when a server closes the connection)
// and a hook run before each Update (to make another writer win a race). Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "common/kube/client.h"

namespace phalanx::kube {

class ForwardingClient final : public Client {
 public:
  explicit ForwardingClient(Client& inner) : inner_(inner) {}

  // Every stream open now ends with Unavailable at its next Next().
  void BreakWatches() {
    absl::MutexLock lock(&mu_);
    ++generation_;
  }
  // Runs (once) before the next Update is forwarded.
  void BeforeNextUpdate(std::function<void()> hook) {
    absl::MutexLock lock(&mu_);
    before_update_ = std::move(hook);
  }
  int watches_opened() {
    absl::MutexLock lock(&mu_);
    return watches_opened_;
  }

  absl::StatusOr<Json> Get(const Resource& r, const std::string& ns,
                           const std::string& name) override {
    return inner_.Get(r, ns, name);
  }
  absl::StatusOr<ObjectList> List(const Resource& r, const std::string& ns,
                                  const ListOptions& options) override {
    return inner_.List(r, ns, options);
  }
  absl::StatusOr<Json> Create(const Resource& r, const std::string& ns,
                              const Json& object) override {
    return inner_.Create(r, ns, object);
  }
  absl::StatusOr<Json> Update(const Resource& r, const std::string& ns,
                              const Json& object) override {
    std::function<void()> hook;
    {
      absl::MutexLock lock(&mu_);
      hook = std::exchange(before_update_, nullptr);
    }
    if (hook) hook();
    return inner_.Update(r, ns, object);
  }
  absl::StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns,
                                    const Json& object) override {
    return inner_.UpdateStatus(r, ns, object);
  }
  absl::StatusOr<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                             PatchType type, const Json& patch,
                             const PatchOptions& options) override {
    return inner_.Patch(r, ns, name, type, patch, options);
  }
  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& options) override {
    return inner_.Delete(r, ns, name, options);
  }
  absl::StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                                     const WatchOptions& options) override {
    absl::StatusOr<std::unique_ptr<WatchStream>> inner = inner_.Watch(r, ns, options);
    if (!inner.ok()) return inner.status();
    absl::MutexLock lock(&mu_);
    ++watches_opened_;
    return std::unique_ptr<WatchStream>(
        std::make_unique<Stream>(*this, std::move(*inner), generation_));
  }

 private:
  class Stream final : public WatchStream {
   public:
    Stream(ForwardingClient& owner, std::unique_ptr<WatchStream> inner, int generation)
        : owner_(owner), inner_(std::move(inner)), generation_(generation) {}
    absl::StatusOr<std::optional<WatchEventData>> Next(absl::Duration max_wait) override {
      if (owner_.generation() != generation_) {
        return absl::UnavailableError("watch stream closed by the test");
      }
      return inner_->Next(max_wait);
    }

   private:
    ForwardingClient& owner_;
    std::unique_ptr<WatchStream> inner_;
    const int generation_;
  };

  int generation() {
    absl::MutexLock lock(&mu_);
    return generation_;
  }

  Client& inner_;
  absl::Mutex mu_;
  int generation_ ABSL_GUARDED_BY(mu_) = 0;
  int watches_opened_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void()> before_update_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::kube
