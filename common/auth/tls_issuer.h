// X.509 certificates for TLS between a job's pods and its coordinator (docs/security.md "TLS by
// default", ADR 0006): the operator's own certificate authority (one per operator install, its
// key in a Secret in the operator's namespace, as the operator key is) and, per job, the
// coordinator's server certificate signed by it. Keys are EC P-256, signatures ECDSA with
// SHA-256, serials 128 random bits. Used by the operator (operator/controller/operator_ca.h makes
// or loads the CA; the reconciler issues a leaf when it writes a job's Secret).
// Thread-safety: pure functions (OpenSSL 3's own state is thread-safe).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace phalanx::auth {

// A certificate and its private key, both PEM (the key PKCS#8, unencrypted).
struct TlsKeyPair {
  std::string cert_pem;
  std::string key_pem;
};

// How far back a certificate's notBefore is set: a peer whose clock runs a little behind the
// issuer's still accepts it at once.
inline constexpr absl::Duration kCertificateBackdate = absl::Minutes(5);

// A self-signed CA: subject and issuer CN=`common_name`, X.509 v3, basicConstraints CA:TRUE
// (critical), keyUsage keyCertSign and cRLSign (critical), valid from kCertificateBackdate ago
// until `validity` from now. The name is cut at 64 bytes (X.509's bound on a commonName).
// InvalidArgument for an empty name or a validity that is not positive;
// Internal when OpenSSL fails.
absl::StatusOr<TlsKeyPair> MakeCertificateAuthority(std::string_view common_name,
                                                    absl::Duration validity);

// OK when `ca` is usable to issue with: a PEM certificate and its own PEM private key, the
// certificate a CA's (basicConstraints CA:TRUE) and not expired. InvalidArgument saying which
// is not.
absl::Status CheckCertificateAuthority(const TlsKeyPair& ca);

// A server certificate signed by `ca` for `dns_names` (CN the first one, a subjectAltName DNS
// entry for each): basicConstraints CA:FALSE, keyUsage digitalSignature (critical),
// extendedKeyUsage serverAuth; valid from kCertificateBackdate ago until `validity` from now,
// but never past the CA's own notAfter. Peers check the subjectAltName; the CN is cut at 64
// bytes like the CA's. InvalidArgument for a CA CheckCertificateAuthority refuses, no names or
// an empty one; Internal when OpenSSL fails.
absl::StatusOr<TlsKeyPair> IssueServerCertificate(const TlsKeyPair& ca,
                                                  const std::vector<std::string>& dns_names,
                                                  absl::Duration validity);

}  // namespace phalanx::auth
