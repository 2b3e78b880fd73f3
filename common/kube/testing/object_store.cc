#include "common/kube/testing/object_store.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/kube/object_meta.h"

namespace phalanx::kube::fake {
namespace {

using kube::MetaString;

bool HasFinalizers(const Json& object) {
  const Json& meta = object.at("metadata");
  return meta.has_field("finalizers") && meta.at("finalizers").is_array() &&
         meta.at("finalizers").size() > 0;
}

Json FieldOrNull(const Json& object, const char* field) {
  return object.has_field(field) ? object.at(field) : Json::null();
}

constexpr char kForegroundFinalizer[] = "foregroundDeletion";

std::vector<std::string> OwnerUids(const Json& object) {
  std::vector<std::string> uids;
  const Json& meta = object.at("metadata");
  if (!meta.has_field("ownerReferences") || !meta.at("ownerReferences").is_array()) return uids;
  for (const Json& ref : meta.at("ownerReferences").as_array()) {
    if (ref.is_object() && ref.has_field("uid") && ref.at("uid").is_string()) {
      uids.push_back(ref.at("uid").as_string());
    }
  }
  return uids;
}

bool HasFinalizer(const Json& object, const std::string& finalizer) {
  if (!HasFinalizers(object)) return false;
  for (const Json& f : object.at("metadata").at("finalizers").as_array()) {
    if (f.is_string() && f.as_string() == finalizer) return true;
  }
  return false;
}

absl::Status NotFound(const std::string& resource, const std::string& name) {
  return absl::NotFoundError(absl::StrCat(resource, " \"", name, "\" not found"));
}

// Kubernetes' default when a pod names no terminationGracePeriodSeconds.
constexpr int64_t kDefaultPodGraceSeconds = 30;

int64_t IntOr(const Json& object, const char* field, int64_t fallback) {
  if (!object.is_object() || !object.has_field(field) || !object.at(field).is_number()) {
    return fallback;
  }
  return object.at(field).as_number().to_int64();
}

// An object marked with a grace period waits for its owner (the kubelet) to finish the
// deletion, even once no finalizer remains: updates to it must not remove it.
bool InGracePeriod(const Json& object) {
  return IntOr(object.at("metadata"), "deletionGracePeriodSeconds", 0) > 0;
}

}  // namespace

ObjectStore::ObjectStore(base::Clock& clock, size_t history_limit)
    : clock_(clock), history_limit_(history_limit) {}

void ObjectStore::EnableStatusSubresource(const std::string& resource) {
  absl::MutexLock lock(&mu_);
  status_resources_.insert(resource);
}

uint64_t ObjectStore::NextVersionLocked() { return ++version_; }

void ObjectStore::RecordLocked(const std::string& type, const std::string& resource,
                               const std::string& ns, const Json& object) {
  history_.push_back(WatchEvent{type, resource, ns, version_, object});
  while (history_.size() > history_limit_) {
    oldest_retained_ = history_.front().resource_version;
    history_.pop_front();
  }
}

absl::StatusOr<Json> ObjectStore::Create(const std::string& resource, const std::string& ns,
                                         Json object, bool keep_status) {
  if (!object.is_object()) return absl::InvalidArgumentError("object must be a JSON object");
  const std::string name = MetaString(object, "name");
  if (name.empty()) return absl::InvalidArgumentError("metadata.name: Required value");
  absl::MutexLock lock(&mu_);
  const Key key{resource, ns, name};
  if (objects_.contains(key)) {
    return absl::AlreadyExistsError(absl::StrCat(resource, " \"", name, "\" already exists"));
  }
  Json& meta = object["metadata"];
  if (!ns.empty()) meta["namespace"] = Json::string(ns);
  meta["uid"] = Json::string(absl::StrFormat("00000000-0000-4000-8000-%012d", next_uid_++));
  meta["resourceVersion"] = Json::string(absl::StrCat(NextVersionLocked()));
  meta["creationTimestamp"] = Json::string(kube::FormatKubeTime(clock_.Now()));
  meta["generation"] = Json::number(1);
  if (meta.has_field("deletionTimestamp")) meta.erase("deletionTimestamp");
  if (status_resources_.contains(resource) && object.has_field("status") && !keep_status) {
    object.erase("status");
  }
  objects_[key] = object;
  RecordLocked("ADDED", resource, ns, object);
  return object;
}

absl::StatusOr<Json> ObjectStore::Get(const std::string& resource, const std::string& ns,
                                      const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(Key{resource, ns, name});
  if (it == objects_.end()) return NotFound(resource, name);
  return it->second;
}

absl::StatusOr<ListResult> ObjectStore::List(const std::string& resource, const std::string& ns,
                                             const kube::ObjectFilter& filter, int64_t limit,
                                             const std::string& continue_token) const {
  std::string start_ns = ns;
  std::string start_name;
  if (!continue_token.empty()) {
    const size_t slash = continue_token.find('/');
    if (slash == std::string::npos) return absl::InvalidArgumentError("invalid continue token");
    start_ns = continue_token.substr(0, slash);
    start_name = continue_token.substr(slash + 1) + '\0';  // strictly after the last one sent
  }
  absl::MutexLock lock(&mu_);
  ListResult result;
  result.resource_version = version_;
  for (auto it = objects_.lower_bound(Key{resource, start_ns, start_name});
       it != objects_.end() && std::get<0>(it->first) == resource; ++it) {
    if (!ns.empty() && std::get<1>(it->first) != ns) break;
    if (!filter.Matches(it->second)) continue;
    if (limit > 0 && static_cast<int64_t>(result.items.size()) == limit) {
      const Json& last = result.items.back();
      result.continue_token = MetaString(last, "namespace") + "/" + MetaString(last, "name");
      break;
    }
    result.items.push_back(it->second);
  }
  return result;
}

absl::StatusOr<Json> ObjectStore::Update(const std::string& resource, const std::string& ns,
                                         Json object, bool status_subresource) {
  if (!object.is_object()) return absl::InvalidArgumentError("object must be a JSON object");
  const std::string name = MetaString(object, "name");
  if (name.empty()) return absl::InvalidArgumentError("metadata.name: Required value");
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(Key{resource, ns, name});
  if (it == objects_.end()) return NotFound(resource, name);
  Json& stored = it->second;
  const std::string want_version = MetaString(object, "resourceVersion");
  if (!want_version.empty() && want_version != MetaString(stored, "resourceVersion")) {
    return absl::AbortedError(absl::StrCat(
        "Operation cannot be fulfilled on ", resource, " \"", name,
        "\": the object has been modified; please apply your changes to the latest version "
        "and try again"));
  }
  Json updated;
  if (status_subresource) {
    updated = stored;
    updated["status"] = FieldOrNull(object, "status");
  } else {
    updated = object;
    if (status_resources_.contains(resource)) {
      if (stored.has_field("status")) {
        updated["status"] = stored.at("status");
      } else if (updated.has_field("status")) {
        updated.erase("status");
      }
    }
    // Immutable metadata stays as stored.
    Json& meta = updated["metadata"];
    const Json& old_meta = stored.at("metadata");
    for (const char* field : {"uid", "creationTimestamp", "deletionTimestamp",
                              "deletionGracePeriodSeconds", "namespace"}) {
      if (old_meta.has_field(field)) {
        meta[field] = old_meta.at(field);
      } else if (meta.has_field(field)) {
        meta.erase(field);
      }
    }
    int64_t generation = old_meta.at("generation").as_number().to_int64();
    if (!(FieldOrNull(updated, "spec") == FieldOrNull(stored, "spec"))) ++generation;
    meta["generation"] = Json::number(generation);
  }
  // A write that changes nothing is a no-op, as in kube-apiserver: same resourceVersion, no
  // watch event (otherwise a controller re-writing an identical status would wake itself forever).
  updated["metadata"]["resourceVersion"] = stored.at("metadata").at("resourceVersion");
  if (updated.serialize() == stored.serialize()) return stored;
  updated["metadata"]["resourceVersion"] = Json::string(absl::StrCat(NextVersionLocked()));
  const bool finishing = updated.at("metadata").has_field("deletionTimestamp") &&
                         !HasFinalizers(updated) && !InGracePeriod(updated);
  if (finishing) {
    objects_.erase(it);
    RecordLocked("DELETED", resource, ns, updated);
    return updated;
  }
  stored = updated;
  RecordLocked("MODIFIED", resource, ns, stored);
  return stored;
}

absl::StatusOr<Json> ObjectStore::Delete(const std::string& resource, const std::string& ns,
                                         const std::string& name,
                                         const std::string& uid_precondition,
                                         Propagation propagation,
                                         std::optional<int64_t> grace_period_seconds) {
  absl::MutexLock lock(&mu_);
  auto it = objects_.find(Key{resource, ns, name});
  if (it == objects_.end()) return NotFound(resource, name);
  Json& stored = it->second;
  const std::string uid = MetaString(stored, "uid");
  if (!uid_precondition.empty() && uid_precondition != uid) {
    return absl::FailedPreconditionError(
        absl::StrCat("Precondition failed: UID in precondition: ", uid_precondition,
                     ", UID in object meta: ", uid));
  }
  if (propagation == Propagation::kOrphan) {
    for (auto& [key, object] : objects_) {
      std::vector<std::string> owners = OwnerUids(object);
      if (std::find(owners.begin(), owners.end(), uid) == owners.end()) continue;
      Json kept = Json::array();
      for (const Json& ref : object.at("metadata").at("ownerReferences").as_array()) {
        if (!(ref.has_field("uid") && ref.at("uid").is_string() &&
              ref.at("uid").as_string() == uid)) {
          kept[kept.size()] = ref;
        }
      }
      // As kube-apiserver serialises it: no empty list (ownerReferences is omitempty).
      if (kept.size() == 0) {
        object["metadata"].erase("ownerReferences");
      } else {
        object["metadata"]["ownerReferences"] = kept;
      }
      object["metadata"]["resourceVersion"] = Json::string(absl::StrCat(NextVersionLocked()));
      RecordLocked("MODIFIED", std::get<0>(key), std::get<1>(key), object);
    }
  }
  if (propagation == Propagation::kForeground && !HasFinalizer(stored, kForegroundFinalizer)) {
    Json& finalizers = stored["metadata"]["finalizers"];
    if (!finalizers.is_array()) finalizers = Json::array();
    finalizers[finalizers.size()] = Json::string(kForegroundFinalizer);
  }
  if (std::optional<Json> marked = MarkGracefulLocked(it, grace_period_seconds)) return *marked;
  return DeleteLocked(it);
}

std::optional<Json> ObjectStore::MarkGracefulLocked(std::map<Key, Json>::iterator it,
                                                    std::optional<int64_t> grace_period_seconds) {
  Json& stored = it->second;
  if (std::get<0>(it->first) != "pods") return std::nullopt;
  // Only a kubelet can stop a pod's containers: nothing to wait for when none runs it.
  const std::string phase = kube::StringAt(stored, "status.phase");
  if (kube::StringAt(stored, "spec.nodeName").empty() || phase == "Succeeded" ||
      phase == "Failed") {
    return std::nullopt;
  }
  const Json spec = FieldOrNull(stored, "spec");
  const int64_t grace = grace_period_seconds.value_or(
      IntOr(spec, "terminationGracePeriodSeconds", kDefaultPodGraceSeconds));
  if (grace <= 0) return std::nullopt;
  Json& meta = stored["metadata"];
  const absl::Time deadline = clock_.Now() + absl::Seconds(grace);
  if (meta.has_field("deletionTimestamp")) {
    // Already terminating: a second delete may only bring the deadline forward.
    const std::optional<absl::Time> current =
        kube::ParseKubeTime(kube::MetaString(stored, "deletionTimestamp"));
    const int64_t current_grace = IntOr(meta, "deletionGracePeriodSeconds", 0);
    if (current_grace == 0 || (current.has_value() && *current <= deadline)) return stored;
  }
  meta["deletionTimestamp"] = Json::string(kube::FormatKubeTime(deadline));
  meta["deletionGracePeriodSeconds"] = Json::number(grace);
  meta["resourceVersion"] = Json::string(absl::StrCat(NextVersionLocked()));
  RecordLocked("MODIFIED", std::get<0>(it->first), std::get<1>(it->first), stored);
  return stored;
}

Json ObjectStore::DeleteLocked(std::map<Key, Json>::iterator it) {
  Json& stored = it->second;
  const std::string& resource = std::get<0>(it->first);
  const std::string& ns = std::get<1>(it->first);
  if (HasFinalizers(stored)) {
    // A graceful deletion cut short (grace 0) now waits for the finalizers alone.
    if (!stored.at("metadata").has_field("deletionTimestamp") || InGracePeriod(stored)) {
      stored["metadata"]["deletionTimestamp"] = Json::string(kube::FormatKubeTime(clock_.Now()));
      if (InGracePeriod(stored)) stored["metadata"]["deletionGracePeriodSeconds"] = Json::number(0);
      stored["metadata"]["resourceVersion"] = Json::string(absl::StrCat(NextVersionLocked()));
      RecordLocked("MODIFIED", resource, ns, stored);
    }
    return stored;
  }
  Json deleted = stored;
  deleted["metadata"]["resourceVersion"] = Json::string(absl::StrCat(NextVersionLocked()));
  const std::string resource_copy = resource;
  const std::string ns_copy = ns;
  objects_.erase(it);
  RecordLocked("DELETED", resource_copy, ns_copy, deleted);
  return deleted;
}

int ObjectStore::CollectGarbage() {
  absl::MutexLock lock(&mu_);
  int collected = 0;
  // Repeat until nothing changes: deleting one level of dependents can orphan the next.
  for (bool changed = true; changed;) {
    changed = false;
    std::set<std::string> live_uids;
    std::set<std::string> owners_with_dependents;
    for (const auto& [key, object] : objects_) {
      live_uids.insert(MetaString(object, "uid"));
      for (const std::string& owner : OwnerUids(object)) owners_with_dependents.insert(owner);
    }
    for (auto it = objects_.begin(); it != objects_.end();) {
      const Json& object = it->second;
      auto next = std::next(it);
      const std::vector<std::string> owners = OwnerUids(object);
      const bool orphaned =
          !owners.empty() && std::none_of(owners.begin(), owners.end(), [&](const std::string& u) {
            return live_uids.contains(u);
          });
      const bool being_deleted = object.at("metadata").has_field("deletionTimestamp");
      if (orphaned && !being_deleted) {
        // As Kubernetes' collector, with the default grace: a running pod's kubelet stops it.
        if (!MarkGracefulLocked(it, std::nullopt)) DeleteLocked(it);
        ++collected;
        changed = true;
      } else if (being_deleted && HasFinalizer(object, kForegroundFinalizer) &&
                 !owners_with_dependents.contains(MetaString(object, "uid"))) {
        // Foreground deletion: every dependent is gone, so the owner may go too.
        Json& stored = it->second;
        Json kept = Json::array();
        for (const Json& f : stored.at("metadata").at("finalizers").as_array()) {
          if (!(f.is_string() && f.as_string() == kForegroundFinalizer)) kept[kept.size()] = f;
        }
        stored["metadata"]["finalizers"] = kept;
        if (kept.size() == 0) {
          DeleteLocked(it);
        } else {
          stored["metadata"]["resourceVersion"] = Json::string(absl::StrCat(NextVersionLocked()));
          RecordLocked("MODIFIED", std::get<0>(it->first), std::get<1>(it->first), stored);
        }
        ++collected;
        changed = true;
      } else if (being_deleted && HasFinalizer(object, kForegroundFinalizer)) {
        // Foreground: delete the dependents first.
        const std::string uid = MetaString(object, "uid");
        for (auto dep = objects_.begin(); dep != objects_.end();) {
          auto dep_next = std::next(dep);
          const std::vector<std::string> dep_owners = OwnerUids(dep->second);
          if (dep != it &&
              std::find(dep_owners.begin(), dep_owners.end(), uid) != dep_owners.end() &&
              !dep->second.at("metadata").has_field("deletionTimestamp")) {
            if (!MarkGracefulLocked(dep, std::nullopt)) DeleteLocked(dep);
            ++collected;
            changed = true;
          }
          dep = dep_next;
        }
      }
      // Any change may orphan or free others, and erasing may have touched `next`: rescan.
      if (changed) break;
      it = next;
    }
  }
  return collected;
}

absl::StatusOr<std::vector<WatchEvent>> ObjectStore::EventsSince(const std::string& resource,
                                                                 const std::string& ns,
                                                                 uint64_t since) const {
  absl::MutexLock lock(&mu_);
  if (since < oldest_retained_) {
    return absl::OutOfRangeError(
        absl::StrCat("too old resource version: ", since, " (", oldest_retained_, ")"));
  }
  std::vector<WatchEvent> events;
  for (auto e = FirstEventAfter(history_, since); e != history_.end(); ++e) {
    if (e->resource != resource || (!ns.empty() && e->ns != ns)) continue;
    events.push_back(*e);
  }
  return events;
}

void ObjectStore::WaitForChange(uint64_t since, absl::Duration max_wait) const {
  absl::MutexLock lock(&mu_);
  auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ > since; };
  mu_.AwaitWithTimeout(absl::Condition(&changed), max_wait);
}

uint64_t ObjectStore::resource_version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

}  // namespace phalanx::kube::fake
