// The operator key: the one secret every job token is derived from (common/auth/credentials.h,
// ADR 0003). It lives in one Secret in the operator's own namespace, created on first start
// with 32 random bytes, so the operator needs to read no Secret but that one (RBAC: get on that
// name, create in its namespace). Every replica and every restart reads the same key, so job
// tokens survive operator restarts and leader changes. Used by operator/main.cc at start-up.
// Thread-safety: a function; the client must be thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/kube/client.h"
#include "common/kube/object_meta.h"

namespace phalanx::op {

inline constexpr char kOperatorKeyField[] = "key";

// Secret `ns`/`name` as stored: the existing one, else one created now as an Opaque Secret
// owned by `owners` whose data (field -> raw bytes, base64-encoded here) `make_data` makes only
// then, else (a replica won the race to create it) the winner's. API errors as the client
// returns them; `make_data`'s own. What the operator keeps in its own namespace (its key, its
// CA) is made this way.
absl::StatusOr<kube::Json> LoadOrCreateOwnSecret(
    kube::Client& client, const std::string& ns, const std::string& name,
    const std::vector<kube::OwnerReference>& owners,
    absl::FunctionRef<absl::StatusOr<std::map<std::string, std::string>>()> make_data);
// data[field] of a stored Secret, decoded; "" when it is missing or not base64.
std::string SecretDataField(const kube::Json& secret, const char* field);

// The key in Secret `ns`/`name`, creating the Secret when there is none (a replica racing to
// create it reads the winner's). FailedPrecondition when the Secret exists without a usable
// key (at least 32 characters); other API errors as the client returns them. A Secret it creates
// carries `owners` (the operator's ServiceAccount, so that `helm uninstall` removes the key too).
absl::StatusOr<std::string> LoadOrCreateOperatorKey(
    kube::Client& client, const std::string& ns, const std::string& name,
    const std::vector<kube::OwnerReference>& owners = {});

// Makes Secret `ns`/`name` hold `agent_key` (common/auth/clique_ticket.h: the key the node
// agents verify clique tickets with) as data.key: created when missing, replaced when it holds
// another (the operator key changed). The agent DaemonSet mounts it; it never holds the operator
// key itself, so a node's credentials reveal no job's token. API errors as the client returns
// them (RBAC: get and update on that name, create in the namespace).
absl::Status EnsureAgentCliqueKeySecret(kube::Client& client, const std::string& ns,
                                        const std::string& name, const std::string& agent_key,
                                        const std::vector<kube::OwnerReference>& owners = {});

}  // namespace phalanx::op
