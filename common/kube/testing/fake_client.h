// FakeClient: kube::Client served from an in-memory ObjectStore, for component tests of
// controllers (CONVENTIONS.md: "Component tests with fakes ... in-memory API server").
// Fault injection: FailNext(n, status) makes the next n calls fail with `status` (e.g. a 500
// → Unavailable, a 409 → Aborted); BeforeEachCall runs a hook before each call. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "absl/synchronization/mutex.h"
#include "common/kube/client.h"
#include "common/kube/testing/object_store.h"

namespace phalanx::kube::fake {

class FakeClient final : public kube::Client {
 public:
  explicit FakeClient(ObjectStore& store) : store_(store) {}

  void FailNext(int calls, absl::Status status);
  // Runs before each call that is not failed (outside the client's lock), named by its verb:
  // GET, LIST, CREATE, UPDATE, UPDATE_STATUS, DELETE, PATCH, WATCH. E.g. to advance a FakeClock
  // as a slow API server would.
  void BeforeEachCall(std::function<void(std::string_view verb)> hook);

  absl::StatusOr<Json> Get(const kube::Resource& r, const std::string& ns,
                           const std::string& name) override;
  absl::StatusOr<kube::ObjectList> List(const kube::Resource& r, const std::string& ns,
                                        const kube::ListOptions& options) override;
  absl::StatusOr<Json> Create(const kube::Resource& r, const std::string& ns,
                              const Json& object) override;
  absl::StatusOr<Json> Update(const kube::Resource& r, const std::string& ns,
                              const Json& object) override;
  absl::StatusOr<Json> UpdateStatus(const kube::Resource& r, const std::string& ns,
                                    const Json& object) override;
  absl::StatusOr<Json> Patch(const kube::Resource& r, const std::string& ns,
                             const std::string& name, kube::PatchType type, const Json& patch,
                             const kube::PatchOptions& options) override;
  absl::Status Delete(const kube::Resource& r, const std::string& ns, const std::string& name,
                      const kube::DeleteOptions& options) override;
  absl::StatusOr<std::unique_ptr<kube::WatchStream>> Watch(
      const kube::Resource& r, const std::string& ns, const kube::WatchOptions& options) override;

 private:
  // The injected failure for this call, if any.
  absl::Status Injected(std::string_view verb);

  ObjectStore& store_;
  absl::Mutex mu_;
  int fail_calls_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_status_ ABSL_GUARDED_BY(mu_);
  std::function<void(std::string_view)> before_each_call_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::kube::fake
