// The operator's certificate authority: the CA that signs each job coordinator's TLS
// certificate (docs/security.md "TLS by default", ADR 0006). Like the operator key
// (operator_key.h) it lives in one Secret in the operator's own namespace, keys `ca.crt` and
// `ca.key`, created on first start, so every replica and every restart signs with the same CA and
// the operator reads no Secret but its own (RBAC: get on that name, create in its namespace).
// Rotation: delete the Secret and restart the operator (docs/security.md). Used by
// operator/main.cc at start-up. Thread-safety: a function; the client must be thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/auth/tls_issuer.h"
#include "common/kube/client.h"
#include "common/kube/object_meta.h"

namespace phalanx::op {

inline constexpr char kCaCertField[] = "ca.crt";
inline constexpr char kCaKeyField[] = "ca.key";
// The CA's life: its rotation is by hand (a deleted Secret), so it must outlive any install.
inline constexpr absl::Duration kOperatorCaValidity = absl::Hours(24 * 3650);

// The subject CN of the CA made for the operator in namespace `ns`.
std::string OperatorCaName(const std::string& ns);

// The CA in Secret `ns`/`name`, creating it (auth::MakeCertificateAuthority, OperatorCaName(ns),
// kOperatorCaValidity) when there is none; a replica racing to create it reads the winner's.
// FailedPrecondition when the Secret exists without a usable CA (auth::CheckCertificateAuthority:
// PEM that does not parse, a key that is not the certificate's, an expired CA), saying how to fix
// it; other API errors as the client returns them (429/5xx Unavailable: the caller retries). A
// Secret it creates carries `owners` (the operator's ServiceAccount: `helm uninstall` removes it).
absl::StatusOr<auth::TlsKeyPair> LoadOrCreateOperatorCa(
    kube::Client& client, const std::string& ns, const std::string& name,
    const std::vector<kube::OwnerReference>& owners = {});

}  // namespace phalanx::op
