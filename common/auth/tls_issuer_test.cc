#include "common/auth/tls_issuer.h"

#include <gtest/gtest.h>
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"

namespace phalanx::auth {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using Cert = std::unique_ptr<X509, X509Free>;

Cert Parse(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  Cert cert(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  return cert;
}

// Whether `leaf` chains to `ca` for a TLS server, as a client's verification would check it.
bool VerifiesAgainst(X509* leaf, X509* ca) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_SERVER);
  const bool ok = X509_verify_cert(ctx) == 1;
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  return ok;
}

bool MatchesHost(X509* cert, const std::string& name) {
  return X509_check_host(cert, name.data(), name.size(), 0, nullptr) == 1;
}

const std::vector<std::string> kNames = {"j-coordinator.ns.svc",
                                         "j-coordinator.ns.svc.cluster.local", "j-coordinator.ns",
                                         "j-coordinator"};

TEST(TlsIssuer, ACertificateAuthorityIsACaAndSignsItself) {
  absl::StatusOr<TlsKeyPair> ca =
      MakeCertificateAuthority("phalanx operator CA ns", absl::Hours(1));
  ASSERT_THAT(ca, IsOk());
  EXPECT_NE(ca->key_pem.find("BEGIN PRIVATE KEY"), std::string::npos);
  Cert cert = Parse(ca->cert_pem);
  ASSERT_NE(cert, nullptr);
  EXPECT_EQ(X509_check_ca(cert.get()), 1);
  EXPECT_EQ(X509_check_issued(cert.get(), cert.get()), X509_V_OK);
  EXPECT_EQ(X509_verify(cert.get(), X509_get0_pubkey(cert.get())), 1);
  const int constraints = X509_get_ext_by_NID(cert.get(), NID_basic_constraints, -1);
  ASSERT_GE(constraints, 0);
  EXPECT_EQ(X509_EXTENSION_get_critical(X509_get_ext(cert.get(), constraints)), 1);
  EXPECT_EQ(X509_get_key_usage(cert.get()), static_cast<uint32_t>(KU_KEY_CERT_SIGN | KU_CRL_SIGN));
  // Two CAs never share a serial (128 random bits).
  absl::StatusOr<TlsKeyPair> other =
      MakeCertificateAuthority("phalanx operator CA ns", absl::Hours(1));
  ASSERT_THAT(other, IsOk());
  EXPECT_NE(ASN1_INTEGER_cmp(X509_get0_serialNumber(cert.get()),
                             X509_get0_serialNumber(Parse(other->cert_pem).get())),
            0);
}

TEST(TlsIssuer, ALeafVerifiesAgainstItsCaForEachName_AndAgainstNoOtherCa) {
  absl::StatusOr<TlsKeyPair> ca =
      MakeCertificateAuthority("phalanx operator CA ns", absl::Hours(24));
  absl::StatusOr<TlsKeyPair> other =
      MakeCertificateAuthority("phalanx operator CA ns", absl::Hours(24));
  ASSERT_THAT(ca, IsOk());
  ASSERT_THAT(other, IsOk());
  absl::StatusOr<TlsKeyPair> leaf = IssueServerCertificate(*ca, kNames, absl::Hours(1));
  ASSERT_THAT(leaf, IsOk());
  Cert cert = Parse(leaf->cert_pem);
  ASSERT_NE(cert, nullptr);
  EXPECT_TRUE(VerifiesAgainst(cert.get(), Parse(ca->cert_pem).get()));
  EXPECT_FALSE(VerifiesAgainst(cert.get(), Parse(other->cert_pem).get()))
      << "a leaf of one operator's CA must not pass for another's";
  for (const std::string& name : kNames) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(MatchesHost(cert.get(), name));
  }
  EXPECT_FALSE(MatchesHost(cert.get(), "k-coordinator.ns.svc"));
  EXPECT_FALSE(MatchesHost(cert.get(), "j-coordinator.other.svc"));
  EXPECT_EQ(X509_check_ca(cert.get()), 0) << "a leaf must not sign certificates";
  EXPECT_EQ(X509_get_key_usage(cert.get()), static_cast<uint32_t>(KU_DIGITAL_SIGNATURE));
  EXPECT_EQ(X509_get_extended_key_usage(cert.get()), static_cast<uint32_t>(XKU_SSL_SERVER));
  // Its own key, not the CA's.
  EXPECT_NE(leaf->key_pem, ca->key_pem);
  EXPECT_NE(leaf->key_pem.find("BEGIN PRIVATE KEY"), std::string::npos);
}

TEST(TlsIssuer, ALeafIsValidAFewMinutesBeforeNow_AndNeverOutlivesItsCa) {
  absl::StatusOr<TlsKeyPair> ca = MakeCertificateAuthority("ca", absl::Hours(2));
  ASSERT_THAT(ca, IsOk());
  absl::StatusOr<TlsKeyPair> leaf = IssueServerCertificate(*ca, kNames, absl::Hours(24 * 365));
  ASSERT_THAT(leaf, IsOk());
  Cert cert = Parse(leaf->cert_pem);
  Cert ca_cert = Parse(ca->cert_pem);
  EXPECT_EQ(ASN1_TIME_compare(X509_get0_notAfter(cert.get()), X509_get0_notAfter(ca_cert.get())),
            0);
  int days = 0;
  int seconds = 0;
  ASSERT_EQ(ASN1_TIME_diff(&days, &seconds, X509_get0_notBefore(cert.get()), nullptr), 1);
  EXPECT_EQ(days, 0);
  EXPECT_GE(seconds, absl::ToInt64Seconds(kCertificateBackdate) - 5);
  EXPECT_LE(seconds, absl::ToInt64Seconds(kCertificateBackdate) + 60);
}

TEST(TlsIssuer, AnUnusableCaIsInvalidArgument) {
  absl::StatusOr<TlsKeyPair> ca = MakeCertificateAuthority("ca", absl::Hours(1));
  absl::StatusOr<TlsKeyPair> other = MakeCertificateAuthority("ca", absl::Hours(1));
  ASSERT_THAT(ca, IsOk());
  ASSERT_THAT(other, IsOk());
  struct Case {
    const char* name;
    TlsKeyPair ca;
  };
  const std::vector<Case> cases = {
      {"garbage", {"not a certificate", "not a key"}},
      {"empty", {"", ""}},
      {"garbage key",
       {ca->cert_pem, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}},
      {"another CA's key", {ca->cert_pem, other->key_pem}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_THAT(CheckCertificateAuthority(c.ca), StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(IssueServerCertificate(c.ca, kNames, absl::Hours(1)).status(),
                StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(CheckCertificateAuthority(*ca), IsOk());
  // A leaf cannot act as a CA.
  absl::StatusOr<TlsKeyPair> leaf = IssueServerCertificate(*ca, kNames, absl::Hours(1));
  ASSERT_THAT(leaf, IsOk());
  EXPECT_THAT(IssueServerCertificate(*leaf, kNames, absl::Hours(1)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(IssueServerCertificate(*ca, {}, absl::Hours(1)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TlsIssuer, LongNamesAreKeptWholeInTheSubjectAltName) {
  absl::StatusOr<TlsKeyPair> ca = MakeCertificateAuthority(
      std::string("phalanx operator CA ") + std::string(63, 'n'), absl::Hours(1));
  ASSERT_THAT(ca, IsOk());
  const std::string name = std::string(63, 'j') + "-coordinator." + std::string(63, 'n') + ".svc";
  absl::StatusOr<TlsKeyPair> leaf = IssueServerCertificate(*ca, {name}, absl::Hours(1));
  ASSERT_THAT(leaf, IsOk());
  EXPECT_TRUE(MatchesHost(Parse(leaf->cert_pem).get(), name));
}

}  // namespace
}  // namespace phalanx::auth
