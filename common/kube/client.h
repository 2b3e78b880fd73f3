// kube::Client: the seam between Phalanx's controllers and a Kubernetes API server. The real
// implementation speaks REST (cpprestsdk, to come with issue 3); FakeClient
// (tests/localcluster/fake_client.h) serves the same calls from an in-memory ObjectStore so
// operator and agent logic can be tested without a server. Objects are JSON. Implementations
// are thread-safe. Errors follow the table in api_status.h (NotFound, AlreadyExists, Aborted
// for a conflict, OutOfRange for an expired resourceVersion, Unavailable to retry, ...).
#pragma once

#include <cpprest/json.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/kube/watch_decoder.h"

namespace phalanx::kube {

using Json = web::json::value;

// A resource type: `resource` is the plural ("pods"); `group` is "" for the core group.
struct Resource {
  std::string group;
  std::string version;
  std::string resource;
  bool namespaced = true;

  // The store's name for it: "pods", "trainingjobs.phalanx.dev".
  std::string Qualified() const { return group.empty() ? resource : resource + "." + group; }
};

struct ListOptions {
  std::string label_selector;
  int64_t limit = 0;
  std::string continue_token;
};

struct ObjectList {
  std::vector<Json> items;
  std::string resource_version;
  std::string continue_token;
};

enum class PropagationPolicy { kBackground, kForeground, kOrphan };

struct DeleteOptions {
  PropagationPolicy propagation = PropagationPolicy::kBackground;
  std::string uid_precondition;
};

// One open watch. Next waits up to `max_wait` for an event: nullopt when none came; an error
// ends the stream (OutOfRange: the resourceVersion expired, relist; Unavailable: reconnect).
class WatchStream {
 public:
  virtual ~WatchStream() = default;
  virtual absl::StatusOr<std::optional<WatchEventData>> Next(absl::Duration max_wait) = 0;
};

class Client {
 public:
  virtual ~Client() = default;

  virtual absl::StatusOr<Json> Get(const Resource& r, const std::string& ns,
                                   const std::string& name) = 0;
  virtual absl::StatusOr<ObjectList> List(const Resource& r, const std::string& ns,
                                          const ListOptions& options) = 0;
  virtual absl::StatusOr<Json> Create(const Resource& r, const std::string& ns,
                                      const Json& object) = 0;
  // Replaces the object; its metadata.resourceVersion (if set) must be current.
  virtual absl::StatusOr<Json> Update(const Resource& r, const std::string& ns,
                                      const Json& object) = 0;
  // The /status subresource.
  virtual absl::StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns,
                                            const Json& object) = 0;
  virtual absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                              const DeleteOptions& options) = 0;
  // Events after `resource_version` ("" = from now).
  virtual absl::StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r,
                                                             const std::string& ns,
                                                             const std::string& resource_version,
                                                             const std::string& label_selector) = 0;
};

}  // namespace phalanx::kube
