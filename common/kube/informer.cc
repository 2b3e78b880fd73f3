#include "common/kube/informer.h"

#include <cstdint>
#include <exception>
#include <functional>
#include <utility>

#include "absl/time/clock.h"
#include "common/base/log.h"
#include "common/kube/object_meta.h"

namespace phalanx::kube {
namespace {

// A watch that stays silent this long past its server-side timeout is presumed dead.
constexpr absl::Duration kWatchSlack = absl::Seconds(30);
// A watch that stayed open this long counts as healthy even without events (resets backoff).
constexpr absl::Duration kHealthyWatch = absl::Seconds(10);

std::vector<std::string> NamespaceIndex(const Json& object) {
  return {MetaString(object, "namespace")};
}

std::vector<std::string> OwnerIndex(const Json& object) {
  std::vector<std::string> uids;
  for (const OwnerReference& ref : OwnerReferencesOf(object)) {
    if (!ref.uid.empty()) uids.push_back(ref.uid);
  }
  return uids;
}

// The HTTP code of an in-stream ERROR event's Status object (0 if absent).
int ErrorEventCode(const Json& object) {
  if (!object.is_object() || !object.has_field("code") || !object.at("code").is_number()) {
    return 0;
  }
  return object.at("code").as_integer();
}

}  // namespace

Informer::Informer(Client& client, base::Clock& clock, Resource resource, Options options)
    : client_(client),
      clock_(clock),
      resource_(std::move(resource)),
      options_(std::move(options)),
      // Seeded per informer so many informers reconnecting together spread out.
      backoff_(options_.initial_backoff, options_.max_backoff, 2.0,
               std::hash<std::string>()(resource_.Qualified() + "/" + options_.namespace_) ^
                   reinterpret_cast<uintptr_t>(this)) {
  absl::MutexLock lock(&mu_);
  index_funcs_[kNamespaceIndex] = NamespaceIndex;
  index_funcs_[kOwnerIndex] = OwnerIndex;
}

Informer::~Informer() { Stop(); }

void Informer::AddIndex(const std::string& name, IndexFunc index) {
  absl::MutexLock lock(&mu_);
  if (index_funcs_.contains(name)) {
    PHX_LOG(ERROR) << "informer " << resource_.Qualified() << ": index " << name
                   << " added twice: the second is ignored";
    return;
  }
  // Objects cached already are filed now, under the same lock as every later change.
  auto& filed = indexes_[name];
  for (const auto& [key, cached] : objects_) {
    for (const std::string& value : index(Unpack(cached))) filed[value].insert(key);
  }
  index_funcs_[name] = std::move(index);
}

std::vector<std::string> Informer::IndexValues(const std::string& index_name) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> values;
  auto index = indexes_.find(index_name);
  if (index == indexes_.end()) return values;
  for (const auto& [value, keys] : index->second) values.push_back(value);
  return values;
}

void Informer::AddHandler(ResourceEventHandler handler) {
  absl::MutexLock lock(&mu_);
  auto owned = std::make_unique<ResourceEventHandler>(std::move(handler));
  // After Start() only the informer thread touches the active list, so that a late handler
  // sees the cache's contents (replayed as adds) and then every later change, in order.
  (started_ ? pending_handlers_ : handlers_).push_back(std::move(owned));
}

void Informer::Start() {
  absl::MutexLock start_stop(&start_stop_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (started_ || stopping_) return;
    started_ = true;
  }
  thread_ = std::thread([this] { Loop(); });
}

void Informer::Stop() {
  absl::MutexLock start_stop(&start_stop_mu_);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool Informer::HasSynced() const {
  absl::MutexLock lock(&mu_);
  return synced_;
}

bool Informer::WaitForSync(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return synced_ || stopping_; };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  return synced_;
}

std::optional<Json> Informer::Get(const std::string& ns, const std::string& name) const {
  CachedObject cached;
  {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(KeyFor(resource_.namespaced ? ns : "", name));
    if (it == objects_.end()) return std::nullopt;
    cached = it->second;
  }
  return Unpack(cached);
}

// Reads copy the objects' text under the lock and parse it after: parsing 9,000 pods takes a
// good part of a second, which the informer's thread and every other reader would wait out.
std::vector<Json> Informer::List() const {
  std::vector<Json> out;
  for (const CachedObject& cached : Snapshot()) out.push_back(Unpack(cached));
  return out;
}

void Informer::ForEach(absl::FunctionRef<void(const Json&)> visit) const {
  for (const CachedObject& cached : Snapshot()) visit(Unpack(cached));
}

std::vector<Json> Informer::ByIndex(const std::string& index_name, const std::string& value) const {
  std::vector<CachedObject> filed;
  {
    absl::MutexLock lock(&mu_);
    auto index = indexes_.find(index_name);
    if (index == indexes_.end()) return {};
    auto keys = index->second.find(value);
    if (keys == index->second.end()) return {};
    for (const std::string& key : keys->second) {
      auto it = objects_.find(key);
      if (it != objects_.end()) filed.push_back(it->second);
    }
  }
  std::vector<Json> out;
  for (const CachedObject& cached : filed) out.push_back(Unpack(cached));
  return out;
}

std::vector<Informer::CachedObject> Informer::Snapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<CachedObject> out;
  out.reserve(objects_.size());
  for (const auto& [key, cached] : objects_) out.push_back(cached);
  return out;
}

std::string Informer::last_resource_version() const {
  absl::MutexLock lock(&mu_);
  return resource_version_;
}

int64_t Informer::relists() const {
  absl::MutexLock lock(&mu_);
  return relists_;
}

int64_t Informer::watch_restarts() const {
  absl::MutexLock lock(&mu_);
  return watch_restarts_;
}

uint64_t Informer::changes() const {
  absl::MutexLock lock(&mu_);
  return changes_;
}

bool Informer::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

bool Informer::SleepUnlessStopped(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
  return !stopping_;
}

bool Informer::BackOff(absl::Duration d) {
  const absl::Time end = absl::Now() + d;
  while (true) {
    const absl::Duration left = end - absl::Now();
    if (left <= absl::ZeroDuration()) return !Stopping();
    const bool probe =
        options_.probe_interval > absl::ZeroDuration() && left > options_.probe_interval;
    if (!SleepUnlessStopped(probe ? options_.probe_interval : left)) return false;
    if (!probe) continue;
    // A back-off built up during an outage would otherwise leave the cache stale for up to
    // max_backoff after the server is back: one small list says whether it answers again.
    ListOptions one{.label_selector = options_.label_selector,
                    .field_selector = options_.field_selector,
                    .limit = 1,
                    .continue_token = ""};
    if (client_.List(resource_, options_.namespace_, one).ok()) {
      PHX_LOG(INFO) << "informer " << resource_.Qualified()
                    << ": the API server answers again; ending the back-off early";
      backoff_.Reset();
      return !Stopping();
    }
  }
}

void Informer::Loop() {
  bool need_list = true;
  while (!Stopping()) {
    ActivatePendingHandlers();
    if (need_list) {
      if (absl::Status s = ListAndReplace(); !s.ok()) {
        if (absl::IsCancelled(s)) return;
        PHX_LOG(WARNING) << "informer " << resource_.Qualified() << ": list failed: " << s;
        if (!BackOff(backoff_.NextDelay())) return;
        continue;
      }
      backoff_.Reset();
      need_list = false;
    }
    bool progressed = false;
    const WatchEnd end = WatchOnce(progressed);
    if (end == WatchEnd::kStopped) return;
    if (progressed) backoff_.Reset();
    {
      absl::MutexLock lock(&mu_);
      (end == WatchEnd::kRelist ? relists_ : watch_restarts_)++;
    }
    need_list = end == WatchEnd::kRelist;
    // A watch that delivered nothing before failing backs off, so a failing server is not
    // hammered; a healthy one that ended (server timeout) re-watches at once.
    if (!progressed && !BackOff(backoff_.NextDelay())) return;
  }
}

absl::Status Informer::ListAndReplace() {
  ListOptions list_options{.label_selector = options_.label_selector,
                           .field_selector = options_.field_selector,
                           .limit = options_.page_size,
                           .continue_token = ""};
  std::vector<Json> items;
  std::string resource_version;
  while (true) {
    if (Stopping()) return absl::CancelledError("informer stopping");
    absl::StatusOr<ObjectList> page = client_.List(resource_, options_.namespace_, list_options);
    if (!page.ok()) return page.status();
    // Later pages come from the first page's snapshot; its version is where the watch starts.
    if (resource_version.empty()) resource_version = page->resource_version;
    for (Json& item : page->items) {
      if (options_.transform) options_.transform(item);
      items.push_back(std::move(item));
    }
    if (page->continue_token.empty()) break;
    list_options.continue_token = page->continue_token;
  }

  std::vector<Delivery> deliveries;
  bool first_sync = false;
  {
    absl::MutexLock lock(&mu_);
    absl::flat_hash_set<std::string> listed;
    for (Json& item : items) {
      const std::string key = KeyOf(item);
      listed.insert(key);
      auto it = objects_.find(key);
      if (it == objects_.end()) {
        UpsertLocked(key, item);
        deliveries.push_back({Delivery::Kind::kAdd, Json(), std::move(item)});
      } else if (it->second.resource_version != MetaString(item, "resourceVersion")) {
        Json previous;
        UpsertLocked(key, item, &previous);
        deliveries.push_back({Delivery::Kind::kUpdate, std::move(previous), std::move(item)});
      }
    }
    std::vector<std::string> gone;
    for (const auto& [key, cached] : objects_) {
      if (!listed.contains(key)) {
        gone.push_back(key);
        deliveries.push_back({Delivery::Kind::kDelete, Json(), Unpack(cached)});
      }
    }
    for (const std::string& key : gone) EraseLocked(key);
    resource_version_ = resource_version;
    first_sync = !synced_;
  }
  Deliver(deliveries);
  if (first_sync) {
    // Synced once the first list has been delivered, so a controller that waited for sync
    // has every existing object's key queued already.
    absl::MutexLock lock(&mu_);
    synced_ = true;
    if (options_.resync_period > absl::ZeroDuration()) {
      next_resync_ = clock_.Now() + options_.resync_period;
    }
  }
  PHX_LOG(INFO) << "informer " << resource_.Qualified() << ": listed " << items.size()
                << " objects at resourceVersion " << resource_version;
  return absl::OkStatus();
}

Informer::WatchEnd Informer::WatchOnce(bool& progressed) {
  WatchOptions watch_options{.resource_version = last_resource_version(),
                             .label_selector = options_.label_selector,
                             .field_selector = options_.field_selector,
                             .allow_bookmarks = true,
                             .server_timeout = options_.server_timeout};
  absl::StatusOr<std::unique_ptr<WatchStream>> stream =
      client_.Watch(resource_, options_.namespace_, watch_options);
  if (!stream.ok()) {
    PHX_LOG(WARNING) << "informer " << resource_.Qualified()
                     << ": watch failed: " << stream.status();
    return absl::IsOutOfRange(stream.status()) ? WatchEnd::kRelist : WatchEnd::kRewatch;
  }
  const absl::Time opened = absl::Now();
  const absl::Time presumed_dead = opened + options_.server_timeout + kWatchSlack;
  while (true) {
    if (Stopping()) return WatchEnd::kStopped;
    ActivatePendingHandlers();
    MaybeResync();
    absl::StatusOr<std::optional<WatchEventData>> next = (*stream)->Next(options_.poll_interval);
    if (absl::Now() - opened >= kHealthyWatch) progressed = true;
    if (!next.ok()) {
      if (absl::IsOutOfRange(next.status())) {
        PHX_LOG(INFO) << "informer " << resource_.Qualified() << ": resourceVersion expired, "
                      << "relisting: " << next.status();
        return WatchEnd::kRelist;
      }
      if (!absl::IsUnavailable(next.status())) {
        PHX_LOG(WARNING) << "informer " << resource_.Qualified()
                         << ": watch ended: " << next.status();
      }
      return WatchEnd::kRewatch;
    }
    if (!next->has_value()) {
      if (absl::Now() >= presumed_dead) {
        PHX_LOG(WARNING) << "informer " << resource_.Qualified()
                         << ": watch silent past its server timeout, reconnecting";
        return WatchEnd::kRewatch;
      }
      continue;
    }
    progressed = true;
    const WatchEventData& event = **next;
    if (event.type == "ERROR") {
      const int code = ErrorEventCode(event.object);
      PHX_LOG(INFO) << "informer " << resource_.Qualified() << ": watch ERROR event "
                    << event.object.serialize();
      return code == 410 ? WatchEnd::kRelist : WatchEnd::kRewatch;
    }
    ApplyEvent(event);
  }
}

void Informer::ApplyEvent(const WatchEventData& event) {
  std::vector<Delivery> deliveries;
  Json object = event.object;
  if (options_.transform && event.type != "BOOKMARK") options_.transform(object);
  {
    absl::MutexLock lock(&mu_);
    if (event.type == "ADDED" || event.type == "MODIFIED") {
      Json previous;
      if (UpsertLocked(KeyOf(object), object, &previous)) {
        deliveries.push_back({Delivery::Kind::kUpdate, std::move(previous), std::move(object)});
      } else {
        deliveries.push_back({Delivery::Kind::kAdd, Json(), std::move(object)});
      }
    } else if (event.type == "DELETED") {
      const std::string key = KeyOf(object);
      if (objects_.contains(key)) {
        deliveries.push_back({Delivery::Kind::kDelete, Json(), object});
        EraseLocked(key);
      }
    } else if (event.type != "BOOKMARK") {
      PHX_LOG(WARNING) << "informer " << resource_.Qualified() << ": ignoring watch event type "
                       << event.type;
    }
    // Every event (a BOOKMARK only does this) moves the point a re-watch starts from.
    if (!event.resource_version.empty()) resource_version_ = event.resource_version;
  }
  Deliver(deliveries);
}

void Informer::ActivatePendingHandlers() {
  std::vector<const ResourceEventHandler*> activated;
  std::vector<CachedObject> snapshot;
  {
    absl::MutexLock lock(&mu_);
    if (pending_handlers_.empty()) return;
    for (auto& handler : pending_handlers_) {
      activated.push_back(handler.get());
      handlers_.push_back(std::move(handler));
    }
    pending_handlers_.clear();
    // Copied under the lock, parsed after it (as reads are): only this thread changes the
    // cache, so the copy is still what the late handlers must see first.
    for (const auto& [key, cached] : objects_) snapshot.push_back(cached);
  }
  std::vector<Json> objects;
  for (const CachedObject& cached : snapshot) objects.push_back(Unpack(cached));
  for (const ResourceEventHandler* handler : activated) {
    if (!handler->on_add) continue;
    for (const Json& object : objects) {
      try {
        handler->on_add(object);
      } catch (const std::exception& e) {
        PHX_LOG(ERROR) << "informer " << resource_.Qualified() << ": handler threw: " << e.what();
      }
    }
  }
}

void Informer::MaybeResync() {
  if (options_.resync_period <= absl::ZeroDuration()) return;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_.Now();
    if (!synced_ || now < next_resync_) return;
    next_resync_ = now + options_.resync_period;
  }
  std::vector<Delivery> deliveries;
  for (const CachedObject& cached : Snapshot()) {
    Json object = Unpack(cached);
    deliveries.push_back({Delivery::Kind::kUpdate, object, std::move(object)});
  }
  Deliver(deliveries);
}

std::vector<const ResourceEventHandler*> Informer::HandlersSnapshot() const {
  absl::MutexLock lock(&mu_);
  std::vector<const ResourceEventHandler*> out;
  out.reserve(handlers_.size());
  for (const auto& handler : handlers_) out.push_back(handler.get());
  return out;
}

void Informer::Deliver(const std::vector<Delivery>& deliveries) {
  if (deliveries.empty()) return;
  const std::vector<const ResourceEventHandler*> handlers = HandlersSnapshot();
  for (const Delivery& d : deliveries) {
    for (const ResourceEventHandler* handler : handlers) {
      // Handlers run JSON code that may throw; one bad handler must not end the informer.
      try {
        switch (d.kind) {
          case Delivery::Kind::kAdd:
            if (handler->on_add) handler->on_add(d.object);
            break;
          case Delivery::Kind::kUpdate:
            if (handler->on_update) handler->on_update(d.old_object, d.object);
            break;
          case Delivery::Kind::kDelete:
            if (handler->on_delete) handler->on_delete(d.object);
            break;
        }
      } catch (const std::exception& e) {
        PHX_LOG(ERROR) << "informer " << resource_.Qualified() << ": handler threw: " << e.what();
      }
    }
  }
}

Informer::CachedObject Informer::Pack(const Json& object) {
  CachedObject cached{.text = object.serialize(),
                      .resource_version = MetaString(object, "resourceVersion")};
  cached.text.shrink_to_fit();
  return cached;
}

Json Informer::Unpack(const CachedObject& cached) {
  // The text is the informer's own serialization of a JSON value, so it always parses.
  return Json::parse(cached.text);
}

bool Informer::UpsertLocked(const std::string& key, const Json& object, Json* previous) {
  ++changes_;
  auto it = objects_.find(key);
  const bool replaced = it != objects_.end();
  if (replaced) {
    Json old = Unpack(it->second);
    IndexLocked(key, old, /*add=*/false);
    if (previous != nullptr) *previous = std::move(old);
    it->second = Pack(object);
  } else {
    objects_.emplace(key, Pack(object));
  }
  IndexLocked(key, object, /*add=*/true);
  return replaced;
}

void Informer::EraseLocked(const std::string& key) {
  auto it = objects_.find(key);
  if (it == objects_.end()) return;
  ++changes_;
  IndexLocked(key, Unpack(it->second), /*add=*/false);
  objects_.erase(it);
}

void Informer::IndexLocked(const std::string& key, const Json& object, bool add) {
  for (const auto& [name, index_func] : index_funcs_) {
    auto& index = indexes_[name];
    for (const std::string& value : index_func(object)) {
      if (add) {
        index[value].insert(key);
        continue;
      }
      auto it = index.find(value);
      if (it == index.end()) continue;
      it->second.erase(key);
      if (it->second.empty()) index.erase(it);
    }
  }
}

}  // namespace phalanx::kube
