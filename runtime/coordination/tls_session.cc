#include "runtime/coordination/tls_session.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace phalanx::coord {

namespace {

// OpenSSL's queued errors, oldest first, and clears them (they are per thread).
std::string OpenSslErrors() {
  std::string out;
  while (const unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof(text));
    absl::StrAppend(&out, out.empty() ? "" : "; ", text);
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;

BioPtr ReadOnlyBio(std::string_view pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate in `pem`, in order; reading stops at the first thing that is not one.
std::vector<X509Ptr> ReadCertificates(std::string_view pem) {
  std::vector<X509Ptr> certs;
  BioPtr bio = ReadOnlyBio(pem);
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(cert);
  }
  ERR_clear_error();  // the end of the input reads as an error
  return certs;
}

SSL_CTX* NewContext(const SSL_METHOD* method) {
  SSL_CTX* ctx = SSL_CTX_new(method);
  if (ctx == nullptr) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  // No session tickets: after the handshake a read never makes bytes to send (tls_session.h).
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(ctx, 0);
  // Buffers are kept (no SSL_MODE_RELEASE_BUFFERS): a wire connection is one per process,
  // and freeing them after every record would cost an allocation per frame on the hot path.
  return ctx;
}

bool IsIpLiteral(const std::string& name) {
  unsigned char address[16];
  return inet_pton(AF_INET, name.c_str(), address) == 1 ||
         inet_pton(AF_INET6, name.c_str(), address) == 1;
}

}  // namespace

std::string CertificateDnsName(std::string_view cert_pem) {
  std::vector<X509Ptr> certs = ReadCertificates(cert_pem);
  if (certs.empty()) return "";
  X509* cert = certs[0].get();
  std::string name;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names) && name.empty(); ++i) {
    const GENERAL_NAME* entry = sk_GENERAL_NAME_value(names, i);
    if (entry->type != GEN_DNS) continue;
    const ASN1_IA5STRING* dns = entry->d.dNSName;
    name.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)), ASN1_STRING_length(dns));
  }
  GENERAL_NAMES_free(names);
  if (!name.empty()) return name;
  char common_name[256] = {};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, common_name,
                                sizeof(common_name)) > 0) {
    name = common_name;
  }
  return name;
}

absl::StatusOr<std::shared_ptr<const TlsContext>> TlsContext::ForServer(std::string_view cert_pem,
                                                                        std::string_view key_pem) {
  std::vector<X509Ptr> chain = ReadCertificates(cert_pem);
  if (chain.empty()) {
    return absl::InvalidArgumentError("TLS: the certificate PEM holds no certificate");
  }
  BioPtr key_bio = ReadOnlyBio(key_pem);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS: the private key PEM does not parse: ", OpenSslErrors()));
  }
  SSL_CTX* ctx = NewContext(TLS_server_method());
  std::shared_ptr<const TlsContext> context(new TlsContext(ctx, /*server=*/true));
  if (ctx == nullptr) {
    EVP_PKEY_free(key);
    return absl::InternalError(absl::StrCat("TLS: ", OpenSslErrors()));
  }
  bool ok = SSL_CTX_use_certificate(ctx, chain[0].get()) == 1;
  for (size_t i = 1; ok && i < chain.size(); ++i) {
    ok = SSL_CTX_add1_chain_cert(ctx, chain[i].get()) == 1;
  }
  ok = ok && SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  if (!ok || SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS: the private key does not go with the certificate: ", OpenSslErrors()));
  }
  return context;
}

absl::StatusOr<std::shared_ptr<const TlsContext>> TlsContext::ForClient(std::string_view ca_pem) {
  std::vector<X509Ptr> roots = ReadCertificates(ca_pem);
  if (roots.empty()) {
    return absl::InvalidArgumentError("TLS: the CA PEM holds no certificate");
  }
  SSL_CTX* ctx = NewContext(TLS_client_method());
  std::shared_ptr<const TlsContext> context(new TlsContext(ctx, /*server=*/false));
  if (ctx == nullptr) return absl::InternalError(absl::StrCat("TLS: ", OpenSslErrors()));
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  for (const X509Ptr& root : roots) {
    if (X509_STORE_add_cert(store, root.get()) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("TLS: a CA certificate cannot be used: ", OpenSslErrors()));
    }
  }
  return context;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

namespace {

// A session over two memory BIOs; reading an empty one asks for more instead of ending.
SSL* NewMemorySession(const TlsContext& context, BIO** in, BIO** out) {
  SSL* ssl = SSL_new(context.get());
  if (ssl == nullptr) return nullptr;
  *in = BIO_new(BIO_s_mem());
  *out = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(*in, -1);
  BIO_set_mem_eof_return(*out, -1);
  SSL_set_bio(ssl, *in, *out);
  return ssl;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsSession>> TlsSession::Accept(const TlsContext& context) {
  if (!context.is_server()) return absl::InvalidArgumentError("TLS: not a server context");
  BIO* in = nullptr;
  BIO* out = nullptr;
  SSL* ssl = NewMemorySession(context, &in, &out);
  if (ssl == nullptr) return absl::InternalError(absl::StrCat("TLS: ", OpenSslErrors()));
  SSL_set_accept_state(ssl);
  return std::unique_ptr<TlsSession>(new TlsSession(ssl, in, out));
}

absl::StatusOr<std::unique_ptr<TlsSession>> TlsSession::Connect(const TlsContext& context,
                                                                const std::string& server_name) {
  if (context.is_server()) return absl::InvalidArgumentError("TLS: not a client context");
  if (server_name.empty()) return absl::InvalidArgumentError("TLS: no server name to verify");
  BIO* in = nullptr;
  BIO* out = nullptr;
  SSL* ssl = NewMemorySession(context, &in, &out);
  if (ssl == nullptr) return absl::InternalError(absl::StrCat("TLS: ", OpenSslErrors()));
  std::unique_ptr<TlsSession> session(new TlsSession(ssl, in, out));
  SSL_set_connect_state(ssl);
  bool named;
  if (IsIpLiteral(server_name)) {
    named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), server_name.c_str()) == 1;
  } else {
    named = SSL_set_tlsext_host_name(ssl, server_name.c_str()) == 1 &&
            SSL_set1_host(ssl, server_name.c_str()) == 1;
  }
  if (!named) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS: '", server_name, "' cannot be a server name: ", OpenSslErrors()));
  }
  if (absl::Status started = session->Handshake(); !started.ok()) return started;
  return session;
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

absl::Status TlsSession::Handshake() {
  const int result = SSL_do_handshake(ssl_);
  if (result == 1) {
    established_ = true;
    const std::string held = std::move(held_);
    held_.clear();
    return Send(held);
  }
  const int error = SSL_get_error(ssl_, result);
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) return absl::OkStatus();
  std::string why = OpenSslErrors();
  if (const long verify = SSL_get_verify_result(ssl_); verify != X509_V_OK) {
    why = absl::StrCat("the peer's certificate does not verify: ",
                       X509_verify_cert_error_string(verify), " (", why, ")");
  }
  return absl::UnauthenticatedError(absl::StrCat("TLS handshake failed: ", why));
}

absl::Status TlsSession::Receive(std::string_view ciphertext, std::string& plaintext) {
  while (!ciphertext.empty()) {
    const int chunk = static_cast<int>(std::min<size_t>(ciphertext.size(), INT_MAX));
    if (BIO_write(in_, ciphertext.data(), chunk) != chunk) {
      return absl::ResourceExhaustedError("TLS: cannot buffer what the peer sent");
    }
    ciphertext.remove_prefix(chunk);
  }
  if (!established_) {
    if (absl::Status shaken = Handshake(); !shaken.ok()) return shaken;
    if (!established_) return absl::OkStatus();
  }
  char buffer[16 << 10];
  while (true) {
    const int n = SSL_read(ssl_, buffer, sizeof(buffer));
    if (n > 0) {
      plaintext.append(buffer, n);
      continue;
    }
    const int error = SSL_get_error(ssl_, n);
    if (error == SSL_ERROR_WANT_READ) return absl::OkStatus();
    if (error == SSL_ERROR_ZERO_RETURN) {
      return absl::UnavailableError("the peer ended its TLS session");
    }
    return absl::DataLossError(absl::StrCat("TLS: a record does not decrypt: ", OpenSslErrors()));
  }
}

absl::Status TlsSession::Send(std::string_view plaintext) {
  if (plaintext.empty()) return absl::OkStatus();
  if (!established_) {
    held_.append(plaintext);
    return absl::OkStatus();
  }
  size_t written = 0;
  // Into a memory BIO a write is whole: it fails only when memory does.
  if (SSL_write_ex(ssl_, plaintext.data(), plaintext.size(), &written) != 1 ||
      written != plaintext.size()) {
    return absl::InternalError(absl::StrCat("TLS: cannot encrypt: ", OpenSslErrors()));
  }
  return absl::OkStatus();
}

void TlsSession::TakeOutput(std::string& out) {
  const size_t pending = BIO_ctrl_pending(out_);
  if (pending == 0) return;
  const size_t at = out.size();
  out.resize(at + pending);
  const int n = BIO_read(out_, out.data() + at, static_cast<int>(pending));
  out.resize(at + (n > 0 ? static_cast<size_t>(n) : 0));
}

bool TlsSession::HasOutput() const { return BIO_ctrl_pending(out_) > 0; }

}  // namespace phalanx::coord
