// The session wire's TLS codec in memory: two sessions fed each other's bytes, as the
// coordinator's loop and a client's reader feed them what their sockets read.
#include "runtime/coordination/tls_session.h"

#include <string>

#include "common/auth/tls_issuer.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::coord {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kName[] = "job-coordinator.team.svc";

struct Pki {
  auth::TlsKeyPair ca;
  auth::TlsKeyPair leaf;
};
Pki MakePki() {
  Pki pki;
  pki.ca = *auth::MakeCertificateAuthority("test CA", absl::Hours(1));
  pki.leaf = *auth::IssueServerCertificate(pki.ca, {kName}, absl::Hours(1));
  return pki;
}

// Moves what each side has to send to the other, `chunk` bytes at a time, until neither has
// anything; collects each side's plaintext. The first error of either side stops it.
absl::Status Pump(TlsSession& client, TlsSession& server, std::string& client_in,
                  std::string& server_in, size_t chunk = 1 << 20) {
  for (int round = 0; round < 100; ++round) {
    std::string to_server, to_client;
    client.TakeOutput(to_server);
    server.TakeOutput(to_client);
    if (to_server.empty() && to_client.empty()) return absl::OkStatus();
    for (size_t at = 0; at < to_server.size(); at += chunk) {
      if (absl::Status s = server.Receive(std::string_view(to_server).substr(at, chunk), server_in);
          !s.ok()) {
        return s;
      }
    }
    for (size_t at = 0; at < to_client.size(); at += chunk) {
      if (absl::Status s = client.Receive(std::string_view(to_client).substr(at, chunk), client_in);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::InternalError("the sessions never went quiet");
}

TEST(TlsSession, AHandshake_CarriesPlaintextBothWays_EvenFedAByteAtATime) {
  const Pki pki = MakePki();
  auto server_context = TlsContext::ForServer(pki.leaf.cert_pem, pki.leaf.key_pem);
  auto client_context = TlsContext::ForClient(pki.ca.cert_pem);
  ASSERT_THAT(server_context, IsOk());
  ASSERT_THAT(client_context, IsOk());
  auto server = TlsSession::Accept(**server_context);
  auto client = TlsSession::Connect(**client_context, kName);
  ASSERT_THAT(server, IsOk());
  ASSERT_THAT(client, IsOk());
  // Sent before the handshake is done: held, then encrypted.
  ASSERT_THAT((*client)->Send("hello from the task"), IsOk());
  ASSERT_THAT((*server)->Send("hello from the coordinator"), IsOk());
  std::string client_in, server_in;
  ASSERT_THAT(Pump(**client, **server, client_in, server_in, /*chunk=*/1), IsOk());
  EXPECT_TRUE((*client)->established());
  EXPECT_TRUE((*server)->established());
  EXPECT_EQ(server_in, "hello from the task");
  EXPECT_EQ(client_in, "hello from the coordinator");

  // A frame bigger than one record (16 KiB) arrives whole, and what crosses is not it.
  const std::string big(100 << 10, 'x');
  ASSERT_THAT((*client)->Send(big), IsOk());
  std::string wire;
  (*client)->TakeOutput(wire);
  EXPECT_EQ(wire.find("xxxxxxxx"), std::string::npos);
  server_in.clear();
  ASSERT_THAT((*server)->Receive(wire, server_in), IsOk());
  EXPECT_EQ(server_in, big);
}

TEST(TlsSession, ACertificateFromAnotherCa_IsRefusedByTheClient) {
  const Pki pki = MakePki();
  const Pki other = MakePki();
  auto server =
      TlsSession::Accept(**TlsContext::ForServer(other.leaf.cert_pem, other.leaf.key_pem));
  auto client = TlsSession::Connect(**TlsContext::ForClient(pki.ca.cert_pem), kName);
  std::string client_in, server_in;
  EXPECT_THAT(Pump(**client, **server, client_in, server_in),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("does not verify")));
}

TEST(TlsSession, ACertificateForAnotherName_IsRefusedByTheClient) {
  const Pki pki = MakePki();
  auto server = TlsSession::Accept(**TlsContext::ForServer(pki.leaf.cert_pem, pki.leaf.key_pem));
  auto client =
      TlsSession::Connect(**TlsContext::ForClient(pki.ca.cert_pem), "other-coordinator.team.svc");
  std::string client_in, server_in;
  EXPECT_THAT(Pump(**client, **server, client_in, server_in),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("does not verify")));
}

TEST(TlsSession, BytesThatAreNotTls_FailTheServersHandshake) {
  const Pki pki = MakePki();
  auto server = TlsSession::Accept(**TlsContext::ForServer(pki.leaf.cert_pem, pki.leaf.key_pem));
  std::string plaintext;
  EXPECT_THAT((*server)->Receive(std::string(64, '\0') + "GET / HTTP/1.1\r\n\r\n", plaintext),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_TRUE(plaintext.empty());
}

TEST(TlsSession, BadPem_AndAKeyOfAnotherCertificate_AreRefusedWhenTheContextIsMade) {
  const Pki pki = MakePki();
  const Pki other = MakePki();
  EXPECT_THAT(TlsContext::ForServer("not pem", pki.leaf.key_pem),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(TlsContext::ForServer(pki.leaf.cert_pem, other.leaf.key_pem),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not go with")));
  EXPECT_THAT(TlsContext::ForClient("garbage"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(TlsSession::Connect(**TlsContext::ForClient(pki.ca.cert_pem), ""),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace phalanx::coord
