#include "common/kube/testing/fake_client.h"

#include <deque>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kube/merge_patch.h"
#include "common/kube/object_meta.h"

namespace phalanx::kube::fake {
namespace {

std::string ResourceVersionOf(const Json& object) {
  return object.at("metadata").at("resourceVersion").as_string();
}

// A watch over the store: polls its event history, bounded by the caller's wait.
class FakeWatch final : public kube::WatchStream {
 public:
  FakeWatch(ObjectStore& store, std::string resource, std::string ns, uint64_t since,
            kube::ObjectFilter filter)
      : store_(store),
        resource_(std::move(resource)),
        ns_(std::move(ns)),
        since_(since),
        filter_(std::move(filter)) {}

  absl::StatusOr<std::optional<kube::WatchEventData>> Next(absl::Duration max_wait) override {
    const absl::Time deadline = absl::Now() + max_wait;
    while (true) {
      if (!buffered_.empty()) {
        kube::WatchEventData event = std::move(buffered_.front());
        buffered_.pop_front();
        return std::optional<kube::WatchEventData>(std::move(event));
      }
      // Read the store's version first: a write after it wakes the wait below.
      const uint64_t seen = store_.resource_version();
      absl::StatusOr<std::vector<WatchEvent>> events = store_.EventsSince(resource_, ns_, since_);
      if (!events.ok()) return events.status();
      for (WatchEvent& e : *events) {
        since_ = e.resource_version;
        if (!filter_.Matches(e.object)) continue;
        buffered_.push_back({e.type, e.object, ResourceVersionOf(e.object)});
      }
      if (!buffered_.empty()) continue;
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return std::optional<kube::WatchEventData>();
      store_.WaitForChange(seen, left);
    }
  }

 private:
  ObjectStore& store_;
  const std::string resource_;
  const std::string ns_;
  uint64_t since_;
  const kube::ObjectFilter filter_;
  std::deque<kube::WatchEventData> buffered_;
};

ObjectStore::Propagation ToStore(kube::PropagationPolicy p) {
  switch (p) {
    case kube::PropagationPolicy::kForeground:
      return ObjectStore::Propagation::kForeground;
    case kube::PropagationPolicy::kOrphan:
      return ObjectStore::Propagation::kOrphan;
    default:
      return ObjectStore::Propagation::kBackground;
  }
}

}  // namespace

void FakeClient::FailNext(int calls, absl::Status status) {
  absl::MutexLock lock(&mu_);
  fail_calls_ = calls;
  fail_status_ = std::move(status);
}

void FakeClient::BeforeEachCall(std::function<void(std::string_view verb)> hook) {
  absl::MutexLock lock(&mu_);
  before_each_call_ = std::move(hook);
}

absl::Status FakeClient::Injected(std::string_view verb) {
  std::function<void(std::string_view)> hook;
  {
    absl::MutexLock lock(&mu_);
    hook = before_each_call_;
    if (fail_calls_ > 0) {
      --fail_calls_;
      return fail_status_;
    }
  }
  if (hook) hook(verb);
  return absl::OkStatus();
}

absl::StatusOr<Json> FakeClient::Get(const kube::Resource& r, const std::string& ns,
                                     const std::string& name) {
  if (absl::Status s = Injected("GET"); !s.ok()) return s;
  return store_.Get(r.Qualified(), r.namespaced ? ns : "", name);
}

absl::StatusOr<kube::ObjectList> FakeClient::List(const kube::Resource& r, const std::string& ns,
                                                  const kube::ListOptions& options) {
  if (absl::Status s = Injected("LIST"); !s.ok()) return s;
  absl::StatusOr<kube::ObjectFilter> filter =
      kube::ObjectFilter::Parse(options.label_selector, options.field_selector);
  if (!filter.ok()) return filter.status();
  absl::StatusOr<ListResult> list = store_.List(r.Qualified(), r.namespaced ? ns : "", *filter,
                                                options.limit, options.continue_token);
  if (!list.ok()) return list.status();
  return kube::ObjectList{std::move(list->items), absl::StrCat(list->resource_version),
                          list->continue_token};
}

absl::StatusOr<Json> FakeClient::Create(const kube::Resource& r, const std::string& ns,
                                        const Json& object) {
  if (absl::Status s = Injected("CREATE"); !s.ok()) return s;
  return store_.Create(r.Qualified(), r.namespaced ? ns : "", object);
}

absl::StatusOr<Json> FakeClient::Update(const kube::Resource& r, const std::string& ns,
                                        const Json& object) {
  if (absl::Status s = Injected("UPDATE"); !s.ok()) return s;
  return store_.Update(r.Qualified(), r.namespaced ? ns : "", object, false);
}

absl::StatusOr<Json> FakeClient::UpdateStatus(const kube::Resource& r, const std::string& ns,
                                              const Json& object) {
  if (absl::Status s = Injected("UPDATE_STATUS"); !s.ok()) return s;
  return store_.Update(r.Qualified(), r.namespaced ? ns : "", object, true);
}

absl::Status FakeClient::Delete(const kube::Resource& r, const std::string& ns,
                                const std::string& name, const kube::DeleteOptions& options) {
  if (absl::Status s = Injected("DELETE"); !s.ok()) return s;
  if (!options.resource_version_precondition.empty()) {
    absl::StatusOr<Json> current = store_.Get(r.Qualified(), r.namespaced ? ns : "", name);
    if (!current.ok()) return current.status();
    if (kube::MetaString(*current, "resourceVersion") != options.resource_version_precondition) {
      return absl::AbortedError("resourceVersion precondition failed");
    }
  }
  return store_
      .Delete(r.Qualified(), r.namespaced ? ns : "", name, options.uid_precondition,
              ToStore(options.propagation), options.grace_period_seconds)
      .status();
}

absl::StatusOr<Json> FakeClient::Patch(const kube::Resource& r, const std::string& ns,
                                       const std::string& name, kube::PatchType type,
                                       const Json& patch, const kube::PatchOptions& options) {
  if (absl::Status s = Injected("PATCH"); !s.ok()) return s;
  const std::string store_ns = r.namespaced ? ns : "";
  absl::StatusOr<Json> current = store_.Get(r.Qualified(), store_ns, name);
  if (!current.ok() && absl::IsNotFound(current.status()) && type == kube::PatchType::kApply) {
    Json object = patch;
    object["metadata"]["name"] = Json::string(name);
    return store_.Create(r.Qualified(), store_ns, object);
  }
  if (!current.ok()) return current.status();
  // Server-side apply is approximated by a merge of the caller's intent (no field ownership).
  return store_.Update(r.Qualified(), store_ns, kube::MergePatch(*current, patch), options.status);
}

absl::StatusOr<std::unique_ptr<kube::WatchStream>> FakeClient::Watch(
    const kube::Resource& r, const std::string& ns, const kube::WatchOptions& options) {
  if (absl::Status s = Injected("WATCH"); !s.ok()) return s;
  absl::StatusOr<kube::ObjectFilter> filter =
      kube::ObjectFilter::Parse(options.label_selector, options.field_selector);
  if (!filter.ok()) return filter.status();
  uint64_t since = store_.resource_version();
  const std::string& resource_version = options.resource_version;
  if (!resource_version.empty() && !absl::SimpleAtoi(resource_version, &since)) {
    return absl::InvalidArgumentError("resourceVersion must be a number");
  }
  return std::unique_ptr<kube::WatchStream>(std::make_unique<FakeWatch>(
      store_, r.Qualified(), r.namespaced ? ns : "", since, *std::move(filter)));
}

}  // namespace phalanx::kube::fake
