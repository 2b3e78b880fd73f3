#include "operator/controller/operator_key.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/auth/credentials.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"

namespace phalanx::op {
namespace {

using kube::Json;

constexpr size_t kMinKeyLength = 32;

absl::StatusOr<std::string> KeyOf(const Json& secret, const std::string& ns,
                                  const std::string& name) {
  const Json& encoded = kube::FieldOrNull(kube::FieldOrNull(secret, "data"), kOperatorKeyField);
  std::string key;
  if (!encoded.is_string() || !absl::Base64Unescape(encoded.as_string(), &key) ||
      key.size() < kMinKeyLength) {
    return absl::FailedPreconditionError(
        absl::StrCat("Secret ", ns, "/", name, " has no data.", kOperatorKeyField, " of at least ",
                     kMinKeyLength, " bytes: delete it (every job token changes) or fix it"));
  }
  return key;
}

// An Opaque Secret ns/name holding `encoded` (base64) as data.key, owned by `owners`.
Json KeySecret(const std::string& ns, const std::string& name,
               const std::vector<kube::OwnerReference>& owners, const std::string& encoded) {
  Json secret = Json::object();
  secret["apiVersion"] = Json::string("v1");
  secret["kind"] = Json::string("Secret");
  kube::ObjectMeta{.name = name, .namespace_ = ns, .owner_references = owners}.EncodeInto(secret);
  secret["type"] = Json::string("Opaque");
  secret["data"] = Json::object();
  secret["data"][kOperatorKeyField] = Json::string(encoded);
  return secret;
}

}  // namespace

absl::StatusOr<std::string> LoadOrCreateOperatorKey(
    kube::Client& client, const std::string& ns, const std::string& name,
    const std::vector<kube::OwnerReference>& owners) {
  absl::StatusOr<Json> existing = client.Get(kube::kSecrets, ns, name);
  if (existing.ok()) return KeyOf(*existing, ns, name);
  if (!absl::IsNotFound(existing.status())) return existing.status();
  const std::string key = auth::RandomHex(32);
  absl::StatusOr<Json> created =
      client.Create(kube::kSecrets, ns, KeySecret(ns, name, owners, absl::Base64Escape(key)));
  if (created.ok()) return key;
  if (!absl::IsAlreadyExists(created.status())) return created.status();
  existing = client.Get(kube::kSecrets, ns, name);  // another replica won the race
  if (!existing.ok()) return existing.status();
  return KeyOf(*existing, ns, name);
}

absl::Status EnsureAgentCliqueKeySecret(kube::Client& client, const std::string& ns,
                                        const std::string& name, const std::string& agent_key,
                                        const std::vector<kube::OwnerReference>& owners) {
  const std::string encoded = absl::Base64Escape(agent_key);
  absl::StatusOr<Json> existing = client.Get(kube::kSecrets, ns, name);
  if (existing.ok()) {
    const Json& held = kube::FieldOrNull(kube::FieldOrNull(*existing, "data"), kOperatorKeyField);
    if (held.is_string() && held.as_string() == encoded) return absl::OkStatus();
    Json updated = *existing;
    if (!updated.has_field("data") || !updated.at("data").is_object()) {
      updated["data"] = Json::object();
    }
    updated["data"][kOperatorKeyField] = Json::string(encoded);
    return client.Update(kube::kSecrets, ns, updated).status();  // a 409 is retried by the caller
  }
  if (!absl::IsNotFound(existing.status())) return existing.status();
  absl::StatusOr<Json> created =
      client.Create(kube::kSecrets, ns, KeySecret(ns, name, owners, encoded));
  if (created.ok() || absl::IsAlreadyExists(created.status())) {
    // A replica that won the race wrote the same key (both derive it from one operator key).
    return absl::OkStatus();
  }
  return created.status();
}

}  // namespace phalanx::op
