#include "operator/controller/operator_ca.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"

namespace phalanx::op {
namespace {

using kube::Json;

// data[field] decoded, or "" when it is missing or not base64.
std::string DataField(const Json& secret, const char* field) {
  const Json& encoded = kube::FieldOrNull(kube::FieldOrNull(secret, "data"), field);
  std::string decoded;
  if (!encoded.is_string() || !absl::Base64Unescape(encoded.as_string(), &decoded)) return "";
  return decoded;
}

absl::StatusOr<auth::TlsKeyPair> CaOf(const Json& secret, const std::string& ns,
                                      const std::string& name) {
  auth::TlsKeyPair ca{DataField(secret, kCaCertField), DataField(secret, kCaKeyField)};
  if (absl::Status usable = auth::CheckCertificateAuthority(ca); !usable.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Secret ", ns, "/", name, " holds no usable CA in data.", kCaCertField, " and data.",
        kCaKeyField, " (", usable.message(),
        "): delete it and the operator makes a new CA (jobs created after that get certificates "
        "of the new CA; running jobs keep theirs: docs/security.md), or fix it"));
  }
  return ca;
}

Json CaSecret(const std::string& ns, const std::string& name,
              const std::vector<kube::OwnerReference>& owners, const auth::TlsKeyPair& ca) {
  Json secret = Json::object();
  secret["apiVersion"] = Json::string("v1");
  secret["kind"] = Json::string("Secret");
  kube::ObjectMeta{.name = name, .namespace_ = ns, .owner_references = owners}.EncodeInto(secret);
  secret["type"] = Json::string("Opaque");
  secret["data"] = Json::object();
  secret["data"][kCaCertField] = Json::string(absl::Base64Escape(ca.cert_pem));
  secret["data"][kCaKeyField] = Json::string(absl::Base64Escape(ca.key_pem));
  return secret;
}

}  // namespace

std::string OperatorCaName(const std::string& ns) {
  return absl::StrCat("phalanx operator CA ", ns);
}

absl::StatusOr<auth::TlsKeyPair> LoadOrCreateOperatorCa(
    kube::Client& client, const std::string& ns, const std::string& name,
    const std::vector<kube::OwnerReference>& owners) {
  absl::StatusOr<Json> existing = client.Get(kube::kSecrets, ns, name);
  if (existing.ok()) return CaOf(*existing, ns, name);
  if (!absl::IsNotFound(existing.status())) return existing.status();
  absl::StatusOr<auth::TlsKeyPair> ca =
      auth::MakeCertificateAuthority(OperatorCaName(ns), kOperatorCaValidity);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<Json> created = client.Create(kube::kSecrets, ns, CaSecret(ns, name, owners, *ca));
  if (created.ok()) return ca;
  if (!absl::IsAlreadyExists(created.status())) return created.status();
  existing = client.Get(kube::kSecrets, ns, name);  // another replica won the race
  if (!existing.ok()) return existing.status();
  return CaOf(*existing, ns, name);
}

}  // namespace phalanx::op
