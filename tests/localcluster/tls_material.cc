#include "tests/localcluster/tls_material.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace phalanx::localcluster {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Bio = std::unique_ptr<BIO, BioFree>;

absl::Status OpenSslError(const char* what) {
  return absl::InternalError(absl::StrCat("generating TLS material: ", what, " failed"));
}

std::string BioToString(BIO* bio) {
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(len));
}

bool AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

enum class CertKind { kCa, kServer, kClient };

// A certificate for `key`, named `common_name` (and `organization`, a client's group), signed
// by `issuer_key` (self-signed when `issuer` is null); a server's names are `sans`.
absl::StatusOr<Cert> MakeCert(EVP_PKEY* key, const char* common_name, X509* issuer,
                              EVP_PKEY* issuer_key, CertKind kind, const std::string& sans = "",
                              const char* organization = nullptr) {
  Cert cert(X509_new());
  if (!cert) return OpenSslError("X509_new");
  X509_set_version(cert.get(), 2);
  unsigned char serial_bytes[16];
  RAND_bytes(serial_bytes, sizeof(serial_bytes));
  serial_bytes[0] &= 0x7f;  // positive
  BIGNUM* serial = BN_bin2bn(serial_bytes, sizeof(serial_bytes), nullptr);
  BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(cert.get()));
  BN_free(serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);  // tolerate small clock differences
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 365L * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name), -1, -1, 0);
  if (organization != nullptr) {
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(organization), -1, -1, 0);
  }
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  const bool ext_ok =
      kind == CertKind::kCa
          ? AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE") &&
                AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign") &&
                AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash")
          : AddExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE") &&
                AddExtension(cert.get(), signer, NID_key_usage,
                             "critical,digitalSignature,keyEncipherment") &&
                (kind == CertKind::kClient
                     ? AddExtension(cert.get(), signer, NID_ext_key_usage, "clientAuth")
                     : AddExtension(cert.get(), signer, NID_ext_key_usage, "serverAuth") &&
                           AddExtension(cert.get(), signer, NID_subject_alt_name, sans.c_str()));
  if (!ext_ok) return OpenSslError("adding certificate extensions");
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return OpenSslError("X509_sign");
  return cert;
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return OpenSslError("PEM_write_bio_X509");
  return BioToString(bio.get());
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return OpenSslError("PEM_write_bio_PrivateKey");
  }
  return BioToString(bio.get());
}

}  // namespace

absl::StatusOr<TlsMaterial> GenerateTlsMaterial(const std::vector<std::string>& extra_sans) {
  Pkey ca_key(EVP_EC_gen("P-256"));
  Pkey server_key(EVP_EC_gen("P-256"));
  Pkey kubelet_client_key(EVP_EC_gen("P-256"));
  if (!ca_key || !server_key || !kubelet_client_key) return OpenSslError("EVP_EC_gen");
  absl::StatusOr<Cert> ca =
      MakeCert(ca_key.get(), "phalanx-localcluster-ca", nullptr, ca_key.get(), CertKind::kCa);
  if (!ca.ok()) return ca.status();
  std::string sans = "IP:127.0.0.1,DNS:localhost";
  for (const std::string& san : extra_sans) absl::StrAppend(&sans, ",", san);
  absl::StatusOr<Cert> server = MakeCert(server_key.get(), "phalanx-localcluster", ca->get(),
                                         ca_key.get(), CertKind::kServer, sans);
  if (!server.ok()) return server.status();
  absl::StatusOr<Cert> kubelet_client =
      MakeCert(kubelet_client_key.get(), "kube-apiserver-kubelet-client", ca->get(), ca_key.get(),
               CertKind::kClient, "", "system:masters");
  if (!kubelet_client.ok()) return kubelet_client.status();

  TlsMaterial out;
  absl::StatusOr<std::string> ca_pem = CertPem(ca->get());
  absl::StatusOr<std::string> server_pem = CertPem(server->get());
  if (!ca_pem.ok()) return ca_pem.status();
  if (!server_pem.ok()) return server_pem.status();
  out.ca_cert_pem = *ca_pem;
  out.server_cert_pem = *server_pem;
  absl::StatusOr<std::string> server_key_pem = KeyPem(server_key.get());
  absl::StatusOr<std::string> client_pem = CertPem(kubelet_client->get());
  absl::StatusOr<std::string> client_key_pem = KeyPem(kubelet_client_key.get());
  for (const auto* s : {&server_key_pem, &client_pem, &client_key_pem}) {
    if (!s->ok()) return s->status();
  }
  out.server_key_pem = *server_key_pem;
  out.kubelet_client_cert_pem = *client_pem;
  out.kubelet_client_key_pem = *client_key_pem;
  Pkey sa_key(EVP_EC_gen("P-256"));
  if (!sa_key) return OpenSslError("service account key");
  absl::StatusOr<std::string> sa_pem = KeyPem(sa_key.get());
  if (!sa_pem.ok()) return sa_pem.status();
  out.service_account_key_pem = *sa_pem;
  Bio sa_public_bio(BIO_new(BIO_s_mem()));
  if (!sa_public_bio || PEM_write_bio_PUBKEY(sa_public_bio.get(), sa_key.get()) != 1) {
    return OpenSslError("service account public key");
  }
  out.service_account_public_pem = BioToString(sa_public_bio.get());
  return out;
}

}  // namespace phalanx::localcluster
