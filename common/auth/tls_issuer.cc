#include "common/auth/tls_issuer.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"

namespace phalanx::auth {
namespace {

template <auto Free>
struct Deleter {
  template <typename T>
  void operator()(T* p) const {
    Free(p);
  }
};
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free>>;
using BignumPtr = std::unique_ptr<BIGNUM, Deleter<BN_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using CertPtr = std::unique_ptr<X509, Deleter<X509_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES_free>>;

// X.509's upper bound on a commonName (ub-common-name); OpenSSL refuses a longer one.
constexpr size_t kMaxCommonName = 64;

// An Internal error naming `what` and OpenSSL's first queued error; clears the queue, so a
// failure leaves nothing behind for the thread's next OpenSSL call to trip on.
absl::Status OpenSslError(std::string_view what) {
  const unsigned long code = ERR_get_error();
  char text[256] = "unknown error";
  if (code != 0) ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return absl::InternalError(absl::StrCat(absl::string_view(what.data(), what.size()), ": ", text));
}

// Never asks for a passphrase: the operator's keys are stored unencrypted (a Secret is the
// protection), and OpenSSL's default would prompt on the terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

KeyPtr NewP256Key() { return KeyPtr(EVP_EC_gen("P-256")); }

// 128 random bits, read as a non-negative integer (RFC 5280: positive, at most 20 octets).
bool SetRandomSerial(X509* cert) {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return false;
  BignumPtr serial(BN_bin2bn(raw, sizeof(raw), nullptr));
  return serial != nullptr &&
         BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert)) != nullptr;
}

// X.509 v3, a random serial, valid from kCertificateBackdate ago until `validity` from now,
// subject CN=`common_name` (cut at kMaxCommonName bytes), for `key`.
CertPtr NewCertificate(std::string_view common_name, absl::Duration validity, EVP_PKEY* key) {
  CertPtr cert(X509_new());
  if (cert == nullptr || X509_set_version(cert.get(), 2) != 1 || !SetRandomSerial(cert.get()) ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()),
                      -absl::ToInt64Seconds(kCertificateBackdate)) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), absl::ToInt64Seconds(validity)) == nullptr ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return nullptr;
  }
  const std::string_view cn = common_name.substr(0, kMaxCommonName);
  if (X509_NAME_add_entry_by_txt(X509_get_subject_name(cert.get()), "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.data()),
                                 static_cast<int>(cn.size()), -1, 0) != 1) {
    return nullptr;
  }
  return cert;
}

// Adds extension `nid` = `value` (OpenSSL's configuration syntax) to `cert`, issued by `issuer`.
bool AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (extension == nullptr) return false;
  const int added = X509_add_ext(cert, extension, -1);
  X509_EXTENSION_free(extension);
  return added == 1;
}

// subjectAltName with a DNS entry for each of `names`, built as values rather than through the
// configuration syntax, so no name can smuggle in another entry.
bool AddDnsNames(X509* cert, const std::vector<std::string>& names) {
  NamesPtr general_names(sk_GENERAL_NAME_new_null());
  if (general_names == nullptr) return false;
  for (const std::string& name : names) {
    ASN1_IA5STRING* value = ASN1_IA5STRING_new();
    GENERAL_NAME* entry = GENERAL_NAME_new();
    if (value == nullptr || entry == nullptr ||
        ASN1_STRING_set(value, name.data(), static_cast<int>(name.size())) != 1) {
      ASN1_IA5STRING_free(value);
      GENERAL_NAME_free(entry);
      return false;
    }
    GENERAL_NAME_set0_value(entry, GEN_DNS, value);
    if (sk_GENERAL_NAME_push(general_names.get(), entry) == 0) {
      GENERAL_NAME_free(entry);
      return false;
    }
  }
  return X509_add1_ext_i2d(cert, NID_subject_alt_name, general_names.get(), 0,
                           X509V3_ADD_DEFAULT) == 1;
}

std::optional<std::string> BioText(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  if (size <= 0 || data == nullptr) return std::nullopt;
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<TlsKeyPair> ToPem(X509* cert, EVP_PKEY* key) {
  BioPtr cert_bio(BIO_new(BIO_s_mem()));
  BioPtr key_bio(BIO_new(BIO_s_mem()));
  if (cert_bio == nullptr || key_bio == nullptr || PEM_write_bio_X509(cert_bio.get(), cert) != 1 ||
      PEM_write_bio_PrivateKey(key_bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return OpenSslError("writing PEM");
  }
  std::optional<std::string> cert_pem = BioText(cert_bio.get());
  std::optional<std::string> key_pem = BioText(key_bio.get());
  if (!cert_pem.has_value() || !key_pem.has_value()) return OpenSslError("writing PEM");
  return TlsKeyPair{*std::move(cert_pem), *std::move(key_pem)};
}

BioPtr ReadOnlyBio(std::string_view text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

struct ParsedCa {
  CertPtr cert;
  KeyPtr key;
};

// `ca` parsed and checked: a certificate and its own key, a CA's (basicConstraints), not expired.
absl::StatusOr<ParsedCa> ParseCa(const TlsKeyPair& ca) {
  BioPtr cert_bio = ReadOnlyBio(ca.cert_pem);
  BioPtr key_bio = ReadOnlyBio(ca.key_pem);
  ParsedCa parsed;
  if (cert_bio != nullptr) {
    parsed.cert.reset(PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassphrase, nullptr));
  }
  if (key_bio != nullptr) {
    parsed.key.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  }
  ERR_clear_error();  // a parse failure queues errors; the status says what matters
  if (parsed.cert == nullptr) {
    return absl::InvalidArgumentError("the CA certificate is not a PEM X.509 certificate");
  }
  if (parsed.key == nullptr) {
    return absl::InvalidArgumentError("the CA key is not a PEM private key");
  }
  if (X509_check_private_key(parsed.cert.get(), parsed.key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the CA key is not the CA certificate's");
  }
  if (X509_check_ca(parsed.cert.get()) < 1) {
    return absl::InvalidArgumentError("the CA certificate is not a CA's (basicConstraints)");
  }
  if (X509_cmp_current_time(X509_get0_notAfter(parsed.cert.get())) <= 0) {
    return absl::InvalidArgumentError("the CA certificate has expired");
  }
  return parsed;
}

}  // namespace

absl::Status CheckCertificateAuthority(const TlsKeyPair& ca) { return ParseCa(ca).status(); }

absl::StatusOr<TlsKeyPair> MakeCertificateAuthority(std::string_view common_name,
                                                    absl::Duration validity) {
  if (common_name.empty()) return absl::InvalidArgumentError("a CA needs a common name");
  if (validity <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("a CA's validity must be positive");
  }
  KeyPtr key = NewP256Key();
  if (key == nullptr) return OpenSslError("generating the CA's P-256 key");
  CertPtr cert = NewCertificate(common_name, validity, key.get());
  if (cert == nullptr || X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1 ||
      !AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE") ||
      !AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash") ||
      X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0) {
    return OpenSslError("making the CA certificate");
  }
  return ToPem(cert.get(), key.get());
}

absl::StatusOr<TlsKeyPair> IssueServerCertificate(const TlsKeyPair& ca,
                                                  const std::vector<std::string>& dns_names,
                                                  absl::Duration validity) {
  if (dns_names.empty()) return absl::InvalidArgumentError("a server certificate needs a name");
  for (const std::string& name : dns_names) {
    if (name.empty()) return absl::InvalidArgumentError("empty DNS name");
  }
  if (validity <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("a certificate's validity must be positive");
  }
  absl::StatusOr<ParsedCa> parsed = ParseCa(ca);
  if (!parsed.ok()) return parsed.status();
  X509* const ca_cert = parsed->cert.get();
  EVP_PKEY* const ca_key = parsed->key.get();

  KeyPtr key = NewP256Key();
  if (key == nullptr) return OpenSslError("generating the server's P-256 key");
  CertPtr cert = NewCertificate(dns_names.front(), validity, key.get());
  if (cert == nullptr) return OpenSslError("making the server certificate");
  // A leaf outliving its CA would only fail verification later, and less clearly.
  if (ASN1_TIME_compare(X509_get0_notAfter(cert.get()), X509_get0_notAfter(ca_cert)) > 0 &&
      X509_set1_notAfter(cert.get(), X509_get0_notAfter(ca_cert)) != 1) {
    return OpenSslError("bounding the server certificate by the CA's life");
  }
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert)) != 1 ||
      !AddExtension(cert.get(), ca_cert, NID_basic_constraints, "critical,CA:FALSE") ||
      !AddExtension(cert.get(), ca_cert, NID_key_usage, "critical,digitalSignature") ||
      !AddExtension(cert.get(), ca_cert, NID_ext_key_usage, "serverAuth") ||
      !AddExtension(cert.get(), ca_cert, NID_subject_key_identifier, "hash") ||
      !AddExtension(cert.get(), ca_cert, NID_authority_key_identifier, "keyid:always") ||
      !AddDnsNames(cert.get(), dns_names) || X509_sign(cert.get(), ca_key, EVP_sha256()) <= 0) {
    return OpenSslError("making the server certificate");
  }
  return ToPem(cert.get(), key.get());
}

}  // namespace phalanx::auth
