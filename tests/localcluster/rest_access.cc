#include "tests/localcluster/rest_access.h"

#include "absl/strings/str_cat.h"
#include "common/kube/leader_election.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"

namespace phalanx::localcluster {
namespace {

const kube::Resource& kPodResource = kube::kPods;
const kube::Resource& kNodeResource = kube::kNodes;

absl::StatusOr<kube::Resource> ResourceFor(const std::string& resource) {
  if (resource == "pods") return kPodResource;
  if (resource == "nodes") return kNodeResource;
  if (resource == "secrets") return kube::kSecrets;
  if (resource == "leases") return kube::kLeases;
  return absl::InvalidArgumentError(absl::StrCat("the node side does not use ", resource));
}

kube::Informer::Options InformerOptions() {
  kube::Informer::Options o;
  // Streams end on the server's schedule well inside the client's read timeout.
  o.server_timeout = absl::Minutes(2);
  o.max_backoff = absl::Seconds(2);  // a test harness: catch up quickly after faults
  return o;
}

}  // namespace

RestAccess::RestAccess(kube::RestClient& client, base::Clock& clock, size_t history_limit)
    : client_(client),
      history_limit_(history_limit),
      pods_(client, clock, kPodResource, InformerOptions()),
      nodes_(client, clock, kNodeResource, InformerOptions()) {
  for (auto [informer, is_pod] : {std::pair{&pods_, true}, std::pair{&nodes_, false}}) {
    kube::ResourceEventHandler handler;
    handler.on_add = [this, is_pod = is_pod](const Json& o) { Record("ADDED", o, is_pod); };
    handler.on_update = [this, is_pod = is_pod](const Json&, const Json& o) {
      Record("MODIFIED", o, is_pod);
    };
    handler.on_delete = [this, is_pod = is_pod](const Json& o) { Record("DELETED", o, is_pod); };
    informer->AddHandler(std::move(handler));
  }
}

RestAccess::~RestAccess() { Stop(); }

absl::Status RestAccess::Start(absl::Duration timeout) {
  pods_.Start();
  nodes_.Start();
  const absl::Time deadline = absl::Now() + timeout;
  for (kube::Informer* informer : {&pods_, &nodes_}) {
    if (!informer->WaitForSync(std::max(deadline - absl::Now(), absl::ZeroDuration()))) {
      return absl::UnavailableError(absl::StrCat("node side: no list of ",
                                                 informer->resource().resource, " within ",
                                                 absl::FormatDuration(timeout)));
    }
  }
  return absl::OkStatus();
}

void RestAccess::Stop() {
  pods_.Stop();
  nodes_.Stop();
}

void RestAccess::Record(const std::string& type, const Json& object, bool is_pod) {
  absl::MutexLock lock(&mu_);
  const uint64_t version = ++version_;
  if (!is_pod) return;
  const std::string uid = kube::MetaString(object, "uid");
  if (type == "DELETED" || !kube::StringAt(object, "spec.nodeName").empty()) assumed_.erase(uid);
  history_.push_back(
      WatchEvent{type, "pods", kube::MetaString(object, "namespace"), version, object});
  while (history_.size() > history_limit_) {
    oldest_retained_ = history_.front().resource_version;
    history_.pop_front();
  }
}

uint64_t RestAccess::Version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

void RestAccess::WaitForChange(uint64_t since, absl::Duration max_wait) const {
  absl::MutexLock lock(&mu_);
  auto changed = [this, since]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ > since; };
  mu_.AwaitWithTimeout(absl::Condition(&changed), max_wait);
}

absl::StatusOr<std::vector<WatchEvent>> RestAccess::PodEventsSince(uint64_t since) const {
  absl::MutexLock lock(&mu_);
  if (since < oldest_retained_) {
    return absl::OutOfRangeError("pod events older than the kept history");
  }
  std::vector<WatchEvent> events;
  events.assign(FirstEventAfter(history_, since), history_.end());
  return events;
}

Json RestAccess::WithAssumedBinding(Json pod) const {
  auto it = assumed_.find(kube::MetaString(pod, "uid"));
  if (it != assumed_.end() && kube::StringAt(pod, "spec.nodeName").empty()) {
    pod["spec"]["nodeName"] = Json::string(it->second);
  }
  return pod;
}

absl::StatusOr<ListResult> RestAccess::List(const std::string& resource,
                                            const kube::ObjectFilter& filter) const {
  if (resource != "pods" && resource != "nodes") {
    return absl::InvalidArgumentError(absl::StrCat("the node side does not list ", resource));
  }
  ListResult result;
  // The version first: the cache read after it is at least as new.
  result.resource_version = Version();
  std::vector<Json> objects = (resource == "pods" ? pods_ : nodes_).List();
  absl::MutexLock lock(&mu_);
  for (Json& object : objects) {
    Json view = resource == "pods" ? WithAssumedBinding(std::move(object)) : std::move(object);
    if (filter.Matches(view)) result.items.push_back(std::move(view));
  }
  return result;
}

absl::StatusOr<Json> RestAccess::Get(const std::string& resource, const std::string& ns,
                                     const std::string& name) const {
  if (resource == "pods" || resource == "nodes") {
    std::optional<Json> cached = (resource == "pods" ? pods_ : nodes_).Get(ns, name);
    if (!cached.has_value()) {
      return absl::NotFoundError(absl::StrCat(resource, " \"", name, "\" not found"));
    }
    absl::MutexLock lock(&mu_);
    return resource == "pods" ? WithAssumedBinding(*std::move(cached)) : *std::move(cached);
  }
  absl::StatusOr<kube::Resource> r = ResourceFor(resource);
  if (!r.ok()) return r.status();
  return client_.Get(*r, ns, name);
}

absl::StatusOr<Json> RestAccess::Create(const std::string& resource, const std::string& ns,
                                        const Json& object) {
  absl::StatusOr<kube::Resource> r = ResourceFor(resource);
  if (!r.ok()) return r.status();
  return client_.Create(*r, ns, object);
}

absl::StatusOr<Json> RestAccess::Update(const std::string& resource, const std::string& ns,
                                        const Json& object, bool status) {
  absl::StatusOr<kube::Resource> r = ResourceFor(resource);
  if (!r.ok()) return r.status();
  return status ? client_.UpdateStatus(*r, ns, object) : client_.Update(*r, ns, object);
}

absl::Status RestAccess::DeletePod(const std::string& ns, const std::string& name,
                                   const std::string& uid, std::optional<int64_t> grace) {
  kube::DeleteOptions options;
  options.uid_precondition = uid;
  options.grace_period_seconds = grace;
  absl::Status s = client_.Delete(kPodResource, ns, name, options);
  // A failed uid precondition comes back as a 409 Conflict: the pod of that name is another.
  if (absl::IsAborted(s) || absl::IsAlreadyExists(s))
    return absl::FailedPreconditionError(s.message());
  return s;
}

absl::StatusOr<Json> RestAccess::Bind(const Json& pod, const std::string& node) {
  const std::string ns = kube::MetaString(pod, "namespace");
  const std::string name = kube::MetaString(pod, "name");
  Json binding = Json::object();
  binding["apiVersion"] = Json::string("v1");
  binding["kind"] = Json::string("Binding");
  binding["metadata"]["name"] = Json::string(name);
  binding["metadata"]["uid"] = Json::string(kube::MetaString(pod, "uid"));
  binding["target"]["apiVersion"] = Json::string("v1");
  binding["target"]["kind"] = Json::string("Node");
  binding["target"]["name"] = Json::string(node);
  absl::StatusOr<std::string> answer =
      client_.Raw("POST", absl::StrCat("/api/v1/namespaces/", ns, "/pods/", name, "/binding"),
                  binding.serialize());
  if (!answer.ok()) return answer.status();
  Json bound = pod;
  bound["spec"]["nodeName"] = Json::string(node);
  absl::MutexLock lock(&mu_);
  assumed_[kube::MetaString(pod, "uid")] = node;
  return bound;
}

}  // namespace phalanx::localcluster
