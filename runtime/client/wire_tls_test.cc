// The session wire over TLS (ADR 0006) between the real client and the real coordinator on
// 127.0.0.1: what crosses the network, and what each side says when the other has no TLS or
// the wrong certificate. The wire's framing and state machine are wire_session_test.cc's.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/auth/tls_issuer.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/client/coordination_client_impl.h"
#include "runtime/client/test_coordinator.h"
#include "runtime/coordination/wire_format.h"

namespace phalanx::client {
namespace {

using ::phalanx::client::testing::Coordinator;
using ::phalanx::client::testing::kToken;
using ::phalanx::client::testing::SessionConfig;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

// A TCP proxy on 127.0.0.1 that forwards every connection to `target_port` and keeps a copy of
// every byte that crossed, both ways: what someone watching the pod network would see.
class RecordingProxy {
 public:
  explicit RecordingProxy(int target_port) : target_port_(target_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(listen(listen_fd_, 16), 0);
    socklen_t length = sizeof(address);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~RecordingProxy() {
    shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    {
      absl::MutexLock lock(&mu_);
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& pump : pumps_) pump.join();
    for (int fd : fds_) close(fd);
    close(listen_fd_);
  }
  int port() const { return port_; }
  std::string seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  void Accept() {
    while (true) {
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      const int upstream = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(target_port_);
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      connect(upstream, reinterpret_cast<sockaddr*>(&address), sizeof(address));
      {
        absl::MutexLock lock(&mu_);
        fds_.push_back(client);
        fds_.push_back(upstream);
      }
      pumps_.emplace_back([this, client, upstream] { Pump(client, upstream); });
      pumps_.emplace_back([this, client, upstream] { Pump(upstream, client); });
    }
  }
  void Pump(int from, int to) {
    char buffer[16 << 10];
    while (true) {
      const ssize_t n = recv(from, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      {
        absl::MutexLock lock(&mu_);
        seen_.append(buffer, n);
      }
      if (send(to, buffer, n, MSG_NOSIGNAL) != n) break;
    }
    shutdown(to, SHUT_WR);
  }

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  std::vector<std::thread> pumps_;  // written by the acceptor only, joined after it
  absl::Mutex mu_;
  std::vector<int> fds_ ABSL_GUARDED_BY(mu_);
  std::string seen_ ABSL_GUARDED_BY(mu_);
};

constexpr char kCoordinatorName[] = "test-coordinator.team.svc";

// A coordinator serving a leaf for kCoordinatorName from a fresh CA, as the operator makes them.
struct TlsCoordinator {
  auth::TlsKeyPair ca = *auth::MakeCertificateAuthority("test CA", absl::Hours(1));
  auth::TlsKeyPair leaf = *auth::IssueServerCertificate(ca, {kCoordinatorName}, absl::Hours(1));
  static coord::CoordinatorServer::Options Server(const auth::TlsKeyPair& leaf) {
    coord::CoordinatorServer::Options options = Coordinator::ServerOptions();
    options.tls_cert_pem = leaf.cert_pem;
    options.tls_key_pem = leaf.key_pem;
    return options;
  }
  Coordinator coordinator{1, Server(leaf)};
  CoordinatorTls ClientTls() const { return {ca.cert_pem, kCoordinatorName}; }
};

TEST(SessionWireTls, ATaskWithTheJobsCa_UsesTheWireOverTls_AndNoSecretCrossesInTheClear) {
  TlsCoordinator tls;
  RecordingProxy proxy(tls.coordinator.port());
  // Dialled by IP (as tasks dial a coordinator's pod IP): the name checked is the Service's.
  ClientConfig config = SessionConfig(proxy.port(), ClientConfig::SessionTransport::kWire);
  config.tls = tls.ClientTls();
  auto client = *CoordinationClientImpl::Create(config);
  ASSERT_THAT(client->Connect(absl::Seconds(20)), IsOk());
  EXPECT_EQ(tls.coordinator.Metric("phalanx_coordinator_wire_streams"), 1);
  const std::string value = "a-value-only-the-job-may-read";
  EXPECT_THAT(client->KvInsert("secret-key", value, false), IsOk());  // a gRPC call
  EXPECT_THAT(client->KvGet("secret-key", absl::Seconds(5)),
              ::phalanx::testing::IsOkAndHolds(value));
  EXPECT_THAT(client->Barrier("b", absl::Seconds(5)), IsOk());  // a session call: the wire
  ASSERT_THAT(client->Shutdown(absl::Seconds(10)), IsOk());
  const std::string seen = proxy.seen();
  EXPECT_GT(seen.size(), 1000u);
  EXPECT_EQ(seen.find(kToken), std::string::npos);
  EXPECT_EQ(seen.find(value), std::string::npos);
  EXPECT_EQ(seen.find("secret-key"), std::string::npos);
  EXPECT_NE(seen.find(coord::kWireTlsMagicView), std::string::npos);  // the wire, asking for TLS
}

TEST(SessionWireTls, ACleartextTask_IsToldTheCoordinatorWantsTls) {
  TlsCoordinator tls;
  auto client = *CoordinationClientImpl::Create(
      SessionConfig(tls.coordinator.port(), ClientConfig::SessionTransport::kWire));
  EXPECT_THAT(client->Connect(absl::Seconds(20)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("PHALANX_TLS_CA_FILE")));
}

TEST(SessionWireTls, ATaskAskingForTls_IsToldTheCoordinatorHasNone) {
  TlsCoordinator tls;
  Coordinator cleartext(1);
  ClientConfig config = SessionConfig(cleartext.port(), ClientConfig::SessionTransport::kWire);
  config.tls = tls.ClientTls();
  auto client = *CoordinationClientImpl::Create(config);
  EXPECT_THAT(client->Connect(absl::Seconds(20)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("without TLS")));
}

TEST(SessionWireTls, ACoordinatorCertificateForAnotherName_OrFromAnotherCa_IsRefused) {
  TlsCoordinator tls;
  ClientConfig config =
      SessionConfig(tls.coordinator.port(), ClientConfig::SessionTransport::kWire);
  config.tls = {tls.ca.cert_pem, "another-coordinator.team.svc"};
  auto wrong_name = *CoordinationClientImpl::Create(config);
  EXPECT_THAT(wrong_name->Connect(absl::Seconds(20)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("does not verify")));
  TlsCoordinator other;
  config.tls = other.ClientTls();
  auto wrong_ca = *CoordinationClientImpl::Create(config);
  EXPECT_THAT(wrong_ca->Connect(absl::Seconds(20)),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("does not verify")));
  EXPECT_EQ(tls.coordinator.service().Snapshot().tasks[0].state, TaskState::kUnregistered);
}

}  // namespace
}  // namespace phalanx::client
