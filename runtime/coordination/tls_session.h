// TLS for the session wire (ADR 0006), as a codec without I/O: bytes received from the peer go
// in, plaintext comes out; plaintext goes in, bytes to send come out. The coordinator's epoll
// loop and the client's reader thread keep doing their own reads and writes (non-blocking on one
// side, blocking on the other), and each keeps its framing and its write coalescing: only the
// bytes that cross the socket change.
//
// A connection asks for TLS with its magic (wire_format.h kWireTlsMagic, sent in the clear),
// then runs a TLS 1.3 handshake: the client verifies the coordinator's certificate against the
// job's CA and the name the operator gives it (PHALANX_TLS_SERVER_NAME), whatever address it
// dialled. Session tickets are off, so after the handshake neither side's reads make bytes to
// send: a write only ever follows the caller's own plaintext.
//
// Thread-safety: TlsContext is immutable once made (shared by every connection). A TlsSession is
// not thread-safe: its owner serialises Receive, Send and TakeOutput.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct bio_st BIO;

namespace phalanx::coord {

// The first DNS name of the certificate's subjectAltName (else its CN), or "" when `cert_pem`
// does not parse or names nothing: what a client of this server would ask for.
std::string CertificateDnsName(std::string_view cert_pem);

class TlsContext {
 public:
  // The coordinator's side: its certificate chain and private key (PEM). InvalidArgument for
  // PEM that does not parse or a key that does not match the certificate.
  static absl::StatusOr<std::shared_ptr<const TlsContext>> ForServer(std::string_view cert_pem,
                                                                     std::string_view key_pem);
  // A client's side: the CA certificates (PEM) the coordinator's certificate must chain to.
  static absl::StatusOr<std::shared_ptr<const TlsContext>> ForClient(std::string_view ca_pem);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  bool is_server() const { return server_; }
  SSL_CTX* get() const { return ctx_; }

 private:
  TlsContext(SSL_CTX* ctx, bool server) : ctx_(ctx), server_(server) {}
  SSL_CTX* const ctx_;
  const bool server_;
};

class TlsSession {
 public:
  // The server's end of a connection.
  static absl::StatusOr<std::unique_ptr<TlsSession>> Accept(const TlsContext& context);
  // The client's end: the coordinator's certificate must name `server_name` (a DNS name, or an
  // IP address literal). Its first bytes to send (the ClientHello) are ready at once.
  static absl::StatusOr<std::unique_ptr<TlsSession>> Connect(const TlsContext& context,
                                                             const std::string& server_name);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Feeds `ciphertext` from the peer and appends the plaintext it completes to `plaintext`,
  // advancing the handshake meanwhile (its answers wait in TakeOutput). Errors end the session:
  // Unauthenticated when the handshake fails (a certificate that does not verify, a peer that
  // does not speak TLS), DataLoss for a record that does not decrypt, Unavailable when the peer
  // closed its side (close_notify).
  absl::Status Receive(std::string_view ciphertext, std::string& plaintext);
  // Encrypts `plaintext`; before the handshake is done it is held and encrypted then.
  absl::Status Send(std::string_view plaintext);
  // Appends the bytes to send to the peer (handshake messages and records, in order) to `out`.
  void TakeOutput(std::string& out);
  bool HasOutput() const;
  bool established() const { return established_; }

 private:
  explicit TlsSession(SSL* ssl, BIO* in, BIO* out) : ssl_(ssl), in_(in), out_(out) {}
  // Drives the handshake; encrypts the held plaintext once it is done.
  absl::Status Handshake();

  SSL* const ssl_;
  BIO* const in_;   // owned by ssl_: ciphertext from the peer
  BIO* const out_;  // owned by ssl_: ciphertext for the peer
  bool established_ = false;
  std::string held_;  // plaintext sent before the handshake was done
};

}  // namespace phalanx::coord
