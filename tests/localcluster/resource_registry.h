// ResourceRegistry: the resource types the local cluster serves (the built-in kinds the operator,
// the agent, Helm charts and kubectl use, plus the resources of every applied CRD) and the
// discovery documents kubectl reads to map kinds to URLs (/api, /apis, /api/v1, /apis/G/V).
// Thread-safe.
#pragma once

#include <cpprest/json.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "tests/localcluster/schema_validator.h"
#include "tests/localcluster/table_printer.h"

namespace phalanx::localcluster {

struct ResourceType {
  std::string group;  // "" for core
  std::string version;
  std::string plural;
  std::string singular;
  std::string kind;
  bool namespaced = true;
  bool status_subresource = false;
  std::vector<std::string> short_names;
  // CRD resources: the version's openAPIV3Schema (null: no validation) and printer columns.
  Json schema;
  std::vector<PrinterColumn> columns;
  std::string crd_name;  // set for CRD-defined resources

  std::string StoreKey() const { return group.empty() ? plural : plural + "." + group; }
  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
};

class ResourceRegistry {
 public:
  ResourceRegistry();  // the built-in kinds

  std::optional<ResourceType> Find(const std::string& group, const std::string& version,
                                   const std::string& plural) const;
  // Every served type.
  std::vector<ResourceType> All() const;
  // Every served type whose store key is `store_key` (one per served version).
  std::vector<ResourceType> ByStoreKey(const std::string& store_key) const;

  // Registers (or re-registers) the served versions of a CustomResourceDefinition object.
  // InvalidArgument naming the field when the CRD is malformed.
  absl::Status RegisterCrd(const Json& crd);
  void UnregisterCrd(const std::string& crd_name);

  Json CoreApiVersions(const std::string& server_address) const;  // GET /api
  Json GroupList() const;                                         // GET /apis
  // GET /api/v1 or /apis/G/V; nullopt when no such group/version is served.
  std::optional<Json> ResourceList(const std::string& group, const std::string& version) const;

 private:
  void AddLocked(ResourceType type) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // group/version → plural → type
  std::map<std::string, std::map<std::string, ResourceType>> types_ ABSL_GUARDED_BY(mu_);
};

// CRD validation of the CRD object itself (names, group, versions, scope): the 422 causes.
std::vector<FieldError> ValidateCrd(const Json& crd);

}  // namespace phalanx::localcluster
