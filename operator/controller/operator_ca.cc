#include "operator/controller/operator_ca.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"
#include "operator/controller/operator_key.h"

namespace phalanx::op {
namespace {

using kube::Json;

absl::StatusOr<auth::TlsKeyPair> CaOf(const Json& secret, const std::string& ns,
                                      const std::string& name) {
  auth::TlsKeyPair ca{SecretDataField(secret, kCaCertField), SecretDataField(secret, kCaKeyField)};
  if (absl::Status usable = auth::CheckCertificateAuthority(ca); !usable.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Secret ", ns, "/", name, " holds no usable CA in data.", kCaCertField, " and data.",
        kCaKeyField, " (", usable.message(),
        "): delete it and the operator makes a new CA (jobs created after that get certificates "
        "of the new CA; running jobs keep theirs: docs/security.md), or fix it"));
  }
  return ca;
}

}  // namespace

std::string OperatorCaName(const std::string& ns) {
  return absl::StrCat("phalanx operator CA ", ns);
}

absl::StatusOr<auth::TlsKeyPair> LoadOrCreateOperatorCa(
    kube::Client& client, const std::string& ns, const std::string& name,
    const std::vector<kube::OwnerReference>& owners) {
  absl::StatusOr<Json> secret = LoadOrCreateOwnSecret(
      client, ns, name, owners, [&]() -> absl::StatusOr<std::map<std::string, std::string>> {
        absl::StatusOr<auth::TlsKeyPair> ca =
            auth::MakeCertificateAuthority(OperatorCaName(ns), kOperatorCaValidity);
        if (!ca.ok()) return ca.status();
        return std::map<std::string, std::string>{{kCaCertField, ca->cert_pem},
                                                  {kCaKeyField, ca->key_pem}};
      });
  if (!secret.ok()) return secret.status();
  return CaOf(*secret, ns, name);
}

}  // namespace phalanx::op
