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
  const std::string key = SecretDataField(secret, kOperatorKeyField);
  if (key.size() < kMinKeyLength) {
    return absl::FailedPreconditionError(
        absl::StrCat("Secret ", ns, "/", name, " has no data.", kOperatorKeyField, " of at least ",
                     kMinKeyLength, " bytes: delete it (every job token changes) or fix it"));
  }
  return key;
}

}  // namespace

std::string SecretDataField(const Json& secret, const char* field) {
  const Json& encoded = kube::FieldOrNull(kube::FieldOrNull(secret, "data"), field);
  std::string decoded;
  if (!encoded.is_string() || !absl::Base64Unescape(encoded.as_string(), &decoded)) return "";
  return decoded;
}

absl::StatusOr<Json> LoadOrCreateOwnSecret(
    kube::Client& client, const std::string& ns, const std::string& name,
    const std::vector<kube::OwnerReference>& owners,
    absl::FunctionRef<absl::StatusOr<std::map<std::string, std::string>>()> make_data) {
  absl::StatusOr<Json> existing = client.Get(kube::kSecrets, ns, name);
  if (existing.ok() || !absl::IsNotFound(existing.status())) return existing;
  absl::StatusOr<std::map<std::string, std::string>> data = make_data();
  if (!data.ok()) return data.status();
  Json secret = Json::object();
  secret["apiVersion"] = Json::string("v1");
  secret["kind"] = Json::string("Secret");
  kube::ObjectMeta{.name = name, .namespace_ = ns, .owner_references = owners}.EncodeInto(secret);
  secret["type"] = Json::string("Opaque");
  secret["data"] = Json::object();
  for (const auto& [field, raw] : *data)
    secret["data"][field] = Json::string(absl::Base64Escape(raw));
  absl::StatusOr<Json> created = client.Create(kube::kSecrets, ns, secret);
  if (created.ok() || !absl::IsAlreadyExists(created.status())) return created;
  return client.Get(kube::kSecrets, ns, name);  // another replica won the race
}

absl::StatusOr<std::string> LoadOrCreateOperatorKey(
    kube::Client& client, const std::string& ns, const std::string& name,
    const std::vector<kube::OwnerReference>& owners) {
  absl::StatusOr<Json> secret = LoadOrCreateOwnSecret(client, ns, name, owners, [] {
    return absl::StatusOr<std::map<std::string, std::string>>(
        std::map<std::string, std::string>{{kOperatorKeyField, auth::RandomHex(32)}});
  });
  if (!secret.ok()) return secret.status();
  return KeyOf(*secret, ns, name);
}

absl::Status EnsureAgentCliqueKeySecret(kube::Client& client, const std::string& ns,
                                        const std::string& name, const std::string& agent_key,
                                        const std::vector<kube::OwnerReference>& owners) {
  // A replica that won the race to create it wrote the same key (both derive it from one
  // operator key).
  absl::StatusOr<Json> secret = LoadOrCreateOwnSecret(client, ns, name, owners, [&] {
    return absl::StatusOr<std::map<std::string, std::string>>(
        std::map<std::string, std::string>{{kOperatorKeyField, agent_key}});
  });
  if (!secret.ok()) return secret.status();
  if (SecretDataField(*secret, kOperatorKeyField) == agent_key) return absl::OkStatus();
  Json updated = *secret;  // it holds another: the operator key changed
  if (!updated.has_field("data") || !updated.at("data").is_object()) {
    updated["data"] = Json::object();
  }
  updated["data"][kOperatorKeyField] = Json::string(absl::Base64Escape(agent_key));
  return client.Update(kube::kSecrets, ns, updated).status();  // a 409 is retried by the caller
}

}  // namespace phalanx::op
