// kube::Client: the seam between Phalanx's controllers and a Kubernetes API server. The real
// implementation speaks REST (rest_client.h); FakeClient
// (common/kube/testing/fake_client.h) serves the same calls from an in-memory ObjectStore so
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
#include "common/kube/json.h"
#include "common/kube/watch_decoder.h"

namespace phalanx::kube {

// A resource type: `resource` is the plural ("pods"); `group` is "" for the core group.
struct Resource {
  std::string group;
  std::string version;
  std::string resource;
  bool namespaced = true;

  // The store's name for it: "pods", "trainingjobs.phalanx.dev".
  std::string Qualified() const { return group.empty() ? resource : resource + "." + group; }
};

// Every member has an initializer, so a designated initializer may name only the ones it sets.
struct ListOptions {
  std::string label_selector{};
  std::string field_selector{};  // "spec.nodeName=n1,status.phase!=Failed"
  int64_t limit = 0;
  std::string continue_token{};
};

// How a watch is opened (CONVENTIONS.md "Watches"): from `resource_version` ("" = from now),
// bookmarks on, and a server-side timeout shorter than the client's own read timeout so a
// silently dead connection is noticed. Every member has an initializer, so a designated
// initializer may name only the ones it sets.
struct WatchOptions {
  std::string resource_version{};
  std::string label_selector{};
  std::string field_selector{};
  bool allow_bookmarks = true;
  absl::Duration server_timeout = absl::Minutes(5);
};

enum class PatchType {
  kMerge,  // application/merge-patch+json (RFC 7386)
  kApply,  // server-side apply: the patch is the caller's whole intent for its field manager
};

struct PatchOptions {
  std::string field_manager = "phalanx";
  bool force = false;   // apply: take ownership of conflicting fields
  bool status = false;  // patch the /status subresource
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
  std::string resource_version_precondition;
  std::optional<int64_t> grace_period_seconds;  // unset: the object's own default
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
  // Merge patch or server-side apply of `patch` onto the named object (apply creates it).
  virtual absl::StatusOr<Json> Patch(const Resource& r, const std::string& ns,
                                     const std::string& name, PatchType type, const Json& patch,
                                     const PatchOptions& options) = 0;
  virtual absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                              const DeleteOptions& options) = 0;
  // Events after options.resource_version; ns "" watches every namespace.
  virtual absl::StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& r,
                                                             const std::string& ns,
                                                             const WatchOptions& options) = 0;
};

}  // namespace phalanx::kube
