#include "common/kube/event_recorder.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <utility>

#include "common/base/log.h"
#include "common/kube/object_meta.h"

namespace phalanx::kube {
namespace {

std::string TopString(const Json& object, const char* field) {
  if (!object.is_object() || !object.has_field(field) || !object.at(field).is_string()) return "";
  return object.at(field).as_string();
}

const char* TypeName(EventType type) { return type == EventType::kWarning ? "Warning" : "Normal"; }

}  // namespace

EventRecorder::EventRecorder(Client& client, base::Clock& clock, std::string component,
                             std::string host)
    : client_(client), clock_(clock), component_(std::move(component)), host_(std::move(host)) {}

Json EventRecorder::NewEvent(const Json& involved_object, const std::string& ns,
                             const std::string& name, const std::string& type,
                             const std::string& reason, const std::string& message,
                             absl::Time now) const {
  Json event = Json::object();
  event["apiVersion"] = Json::string("v1");
  event["kind"] = Json::string("Event");
  event["metadata"]["name"] = Json::string(name);
  event["metadata"]["namespace"] = Json::string(ns);
  Json& ref = event["involvedObject"];
  ref["apiVersion"] = Json::string(TopString(involved_object, "apiVersion"));
  ref["kind"] = Json::string(TopString(involved_object, "kind"));
  ref["name"] = Json::string(MetaString(involved_object, "name"));
  const std::string object_ns = MetaString(involved_object, "namespace");
  if (!object_ns.empty()) ref["namespace"] = Json::string(object_ns);
  ref["uid"] = Json::string(MetaString(involved_object, "uid"));
  ref["resourceVersion"] = Json::string(MetaString(involved_object, "resourceVersion"));
  event["reason"] = Json::string(reason);
  event["message"] = Json::string(message);
  event["type"] = Json::string(type);
  event["source"]["component"] = Json::string(component_);
  if (!host_.empty()) event["source"]["host"] = Json::string(host_);
  event["firstTimestamp"] = Json::string(FormatKubeTime(now));
  event["lastTimestamp"] = Json::string(FormatKubeTime(now));
  event["count"] = Json::number(1);
  event["reportingComponent"] = Json::string(component_);
  event["reportingInstance"] = Json::string(host_);
  return event;
}

std::string EventRecorder::NextNameLocked(const std::string& object_name, absl::Time now) {
  // client-go's "<name>.<unix nanos in hex>", kept unique within this recorder even when the
  // clock stands still (FakeClock) or steps back.
  const uint64_t nanos = static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixNanos(now)));
  last_suffix_ = std::max(nanos, last_suffix_ + 1);
  char suffix[17];
  std::snprintf(suffix, sizeof(suffix), "%016" PRIx64, last_suffix_);
  return object_name + "." + suffix;
}

void EventRecorder::EvictLocked(absl::Time now) {
  if (cache_.size() < kMaxCachedEvents) return;
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (now - it->second.last_seen >= kAggregationWindow) {
      it = cache_.erase(it);
    } else {
      ++it;
    }
  }
  if (cache_.size() < kMaxCachedEvents) return;
  auto oldest = std::min_element(cache_.begin(), cache_.end(), [](const auto& a, const auto& b) {
    return a.second.last_seen < b.second.last_seen;
  });
  cache_.erase(oldest);
}

void EventRecorder::ForgetLocked(const Key& key, const std::string& event_name) {
  auto it = cache_.find(key);
  if (it != cache_.end() && it->second.event_name == event_name) cache_.erase(it);
}

void EventRecorder::Record(const Json& involved_object, EventType type, const std::string& reason,
                           const std::string& message) {
  const std::string object_name = MetaString(involved_object, "name");
  if (object_name.empty()) {
    failures_.fetch_add(1);
    PHX_LOG(WARNING) << "event " << reason << " dropped: the involved object has no name";
    return;
  }
  std::string ns = MetaString(involved_object, "namespace");
  if (ns.empty()) ns = "default";  // events about cluster-scoped objects, as client-go does
  const std::string uid = MetaString(involved_object, "uid");
  const std::string type_name = TypeName(type);
  const Key key{uid.empty() ? ns + "/" + object_name : uid, type_name, reason, message};
  const absl::Time now = clock_.Now();

  bool create = false;
  std::string event_name;
  int64_t count = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && now - it->second.last_seen < kAggregationWindow) {
      Entry& entry = it->second;
      entry.count++;
      entry.last_seen = now;
      event_name = entry.event_name;
      ns = entry.event_namespace;
      count = entry.count;
    } else {
      if (it != cache_.end()) cache_.erase(it);
      EvictLocked(now);
      create = true;
      event_name = NextNameLocked(object_name, now);
      count = 1;
      cache_[key] = Entry{ns, event_name, 1, now, now};
    }
  }

  // One API call, outside the lock. Client implementations convert their exceptions, but
  // events must never take down the caller, so anything thrown is contained here too.
  absl::Status status;
  try {
    if (create) {
      status =
          client_
              .Create(kEventResource, ns,
                      NewEvent(involved_object, ns, event_name, type_name, reason, message, now))
              .status();
    } else {
      Json patch = Json::object();
      patch["count"] = Json::number(count);
      patch["lastTimestamp"] = Json::string(FormatKubeTime(now));
      status = client_.Patch(kEventResource, ns, event_name, PatchType::kMerge, patch, {}).status();
    }
  } catch (const std::exception& e) {
    status = absl::InternalError(e.what());
  }
  if (status.ok()) {
    (create ? created_ : aggregated_).fetch_add(1);
    return;
  }
  failures_.fetch_add(1);
  PHX_LOG(WARNING) << "event " << type_name << " " << reason << " on " << ns << "/" << object_name
                   << " dropped: " << status;
  // The next repeat starts a fresh Event rather than patching one that may not exist.
  absl::MutexLock lock(&mu_);
  ForgetLocked(key, event_name);
}

}  // namespace phalanx::kube
