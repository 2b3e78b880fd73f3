// Per-task credentials and transport security over real gRPC on 127.0.0.1 (issue 16, items 8
// and 9): a task's credential acts only as its own task; the job token acts for any; absurd
// incarnations are refused; TLS with a certificate generated at run time.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "common/auth/credentials.h"
#include "common/testing/status_matchers.h"
#include "prometheus/registry.h"
#include "runtime/client/client_config.h"
#include "runtime/client/coordination_client_impl.h"
#include "runtime/coordination/coordinator_server.h"
#include "runtime/coordination/service.h"
#include "runtime/coordination/token_auth.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::coord {
namespace {

namespace pb = ::phalanx::coord::v1;
using ::phalanx::testing::IsOk;

constexpr char kJobToken[] = "job-token-for-the-test";

class TaskCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }

  void Start(CoordinatorServer::Options options) {
    CoordinationService::Options o;
    o.job = "j";
    o.num_tasks = 3;
    service_ = *CoordinationService::Create(o, base::RealClock::Get(), metrics_);
    options.listen_address = "127.0.0.1:0";
    options.token = kJobToken;
    auto server = CoordinatorServer::Start(options, *service_, metrics_, base::RealClock::Get());
    ASSERT_THAT(server, IsOk());
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (service_) service_->Stop();
    if (server_) server_->Shutdown(absl::Milliseconds(100));
  }

  std::unique_ptr<pb::Coordination::Stub> Stub(
      std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials(),
      const std::string& host = "127.0.0.1") {
    return pb::Coordination::NewStub(
        grpc::CreateChannel(host + ":" + std::to_string(server_->port()), creds));
  }
  static void Auth(grpc::ClientContext& ctx, const std::string& credential) {
    ctx.AddMetadata(kAuthorizationHeader, "Bearer " + credential);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  }
  grpc::Status Register(const std::string& credential, int task, base::Incarnation incarnation) {
    grpc::ClientContext ctx;
    Auth(ctx, credential);
    pb::RegisterRequest req;
    req.mutable_task()->set_task_id(task);
    req.mutable_task()->set_incarnation(incarnation);
    pb::RegisterResponse resp;
    return Stub()->Register(&ctx, req, &resp);
  }
  // Opens a Session for `task` and returns how the server ends it (OK if it stays open until
  // the client closes it after the first event).
  grpc::Status OpenSession(const std::string& credential, int task) {
    grpc::ClientContext ctx;
    Auth(ctx, credential);
    auto stub = Stub();
    auto stream = stub->Session(&ctx);
    pb::SessionRequest open;
    open.mutable_open()->set_task_id(task);
    stream->Write(open);
    pb::SessionEvent event;
    if (stream->Read(&event)) {
      stream->WritesDone();
      ctx.TryCancel();
      return grpc::Status::OK;  // the server answered with its first event: the session opened
    }
    return stream->Finish();
  }

  std::string Cred(int task) { return auth::TaskCredential(kJobToken, task); }

  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<CoordinatorServer> server_;
};

TEST_F(TaskCredentialsTest, TaskCredential_RegistersItsOwnTaskButNotAnother) {
  EXPECT_TRUE(Register(Cred(0), 0, 0).ok());
  grpc::Status hijack = Register(Cred(0), 1, 0);
  EXPECT_EQ(hijack.error_code(), grpc::StatusCode::PERMISSION_DENIED) << hijack.error_message();
  // Task 1 itself is untouched: it registers at incarnation 0 (a hijack would have bumped it).
  EXPECT_TRUE(Register(Cred(1), 1, 0).ok());
}

TEST_F(TaskCredentialsTest, TaskCredential_CannotOpenAnotherTasksSession) {
  ASSERT_TRUE(Register(Cred(1), 1, 0).ok());
  grpc::Status hijack = OpenSession(Cred(0), 1);
  EXPECT_EQ(hijack.error_code(), grpc::StatusCode::PERMISSION_DENIED) << hijack.error_message();
  EXPECT_TRUE(OpenSession(Cred(1), 1).ok());
}

TEST_F(TaskCredentialsTest, TaskCredential_CannotReportAnErrorAsAnotherTask) {
  ASSERT_TRUE(Register(Cred(1), 1, 0).ok());
  grpc::ClientContext ctx;
  Auth(ctx, Cred(0));
  pb::ReportErrorRequest req;
  req.mutable_task()->set_task_id(1);
  req.set_message("forged");
  pb::ReportErrorResponse resp;
  grpc::Status s = Stub()->ReportError(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  JobSnapshot state = service_->Snapshot();
  EXPECT_EQ(state.tasks.at(1).state, TaskState::kConnected);  // not failed by the forgery
}

TEST_F(TaskCredentialsTest, JobToken_ActsForAnyTaskAndForeignCredentialsAreUnauthenticated) {
  EXPECT_TRUE(Register(kJobToken, 2, 0).ok());
  const std::string other_job = auth::TaskCredential("another-job-token", 0);
  EXPECT_EQ(Register(other_job, 0, 0).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(TaskCredentialsTest, Register_ImplausibleIncarnationIsRefusedAndDoesNotPoisonTheTask) {
  grpc::Status huge = Register(Cred(0), 0, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(huge.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << huge.error_message();
  EXPECT_TRUE(Register(Cred(0), 0, 3).ok());
  EXPECT_EQ(Register(Cred(0), 0, 3 + kMaxIncarnationStep + 1).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Register(Cred(0), 0, 4).ok());  // the real next incarnation still registers
}

// ADR 0006: a pod's credential is bound to its incarnation, so a zombie (a partitioned process
// of incarnation 3) cannot register as a newer incarnation and take the task from the real one,
// nor push the task's incarnation up so that the operator's next replacement is stale.
TEST_F(TaskCredentialsTest, ABoundCredential_RegistersOnlyItsOwnIncarnation) {
  const std::string third = auth::TaskCredential(kJobToken, 0, 3, 3);
  EXPECT_TRUE(Register(third, 0, 3).ok());
  for (base::Incarnation other :
       {base::Incarnation{4}, base::Incarnation{7}, base::Incarnation{3 + kMaxIncarnationStep}}) {
    grpc::Status zombie = Register(third, 0, other);
    EXPECT_EQ(zombie.error_code(), grpc::StatusCode::PERMISSION_DENIED) << other;
    EXPECT_THAT(zombie.error_message(), ::testing::HasSubstr("incarnation 3"));
  }
  // The real incarnation 7, with its own credential, takes over; the zombie's calls as 3 are
  // those of a superseded incarnation.
  EXPECT_TRUE(Register(auth::TaskCredential(kJobToken, 0, 7, 7), 0, 7).ok());
  EXPECT_FALSE(Register(third, 0, 3).ok());
  // Nor may the zombie write the job's keys: a job-wide call names no incarnation, so the
  // credential's is compared with the task's newest.
  auto insert = [&](const std::string& credential) {
    grpc::ClientContext ctx;
    Auth(ctx, credential);
    pb::KeyValueInsertRequest req;
    req.set_key("k");
    req.set_value("v");
    req.set_allow_overwrite(true);
    pb::KeyValueInsertResponse resp;
    return Stub()->KeyValueInsert(&ctx, req, &resp);
  };
  grpc::Status zombie_write = insert(third);
  EXPECT_EQ(zombie_write.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(zombie_write.error_message(), ::testing::HasSubstr("superseded by incarnation 7"));
  EXPECT_TRUE(insert(auth::TaskCredential(kJobToken, 0, 7, 7)).ok());
  EXPECT_TRUE(insert(Cred(0)).ok());  // an unbound (v1) credential: as before
  // A launcher's range (nprocPerNode > 1) covers its in-place restarts, and nothing above.
  const std::string range = auth::TaskCredential(kJobToken, 1, 2000, 2999);
  EXPECT_TRUE(Register(range, 1, 2000).ok());
  EXPECT_TRUE(Register(range, 1, 2001).ok());
  EXPECT_EQ(Register(range, 1, 3000).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

// A self-signed certificate for 127.0.0.1/localhost, made with the openssl command at run time.
struct TestCert {
  std::string cert_pem, key_pem;
};
std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
std::optional<TestCert> MakeCert() {
  char dir_template[] = "/tmp/phalanx-tls-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) return std::nullopt;
  const std::string d = dir;
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost"
      " -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
      d + "/key.pem -out " + d + "/cert.pem >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return std::nullopt;
  TestCert cert{Slurp(d + "/cert.pem"), Slurp(d + "/key.pem")};
  std::system(("rm -rf " + d).c_str());
  if (cert.cert_pem.empty() || cert.key_pem.empty()) return std::nullopt;
  return cert;
}

TEST_F(TaskCredentialsTest, Tls_ClientTrustingTheCertificateConnectsAndCleartextDoesNot) {
  std::optional<TestCert> cert = MakeCert();
  if (!cert.has_value()) GTEST_SKIP() << "the openssl command is not available";
  TearDown();
  CoordinatorServer::Options options;
  options.tls_cert_pem = cert->cert_pem;
  options.tls_key_pem = cert->key_pem;
  Start(options);

  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = cert->cert_pem;
  {
    grpc::ClientContext ctx;
    Auth(ctx, Cred(0));
    pb::RegisterRequest req;
    req.mutable_task()->set_task_id(0);
    pb::RegisterResponse resp;
    grpc::Status s = Stub(grpc::SslCredentials(ssl), "localhost")->Register(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    Auth(ctx, Cred(1));
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    pb::RegisterRequest req;
    req.mutable_task()->set_task_id(1);
    pb::RegisterResponse resp;
    EXPECT_FALSE(Stub()->Register(&ctx, req, &resp).ok());  // cleartext to a TLS port
  }
}

// The runtime client end to end: PHALANX_TLS_CA_FILE and a task credential from
// PHALANX_TOKEN_FILE, as the operator's pods get them.
TEST_F(TaskCredentialsTest, Tls_RuntimeClientConnectsWithCaFileAndTaskCredentialFile) {
  std::optional<TestCert> cert = MakeCert();
  if (!cert.has_value()) GTEST_SKIP() << "the openssl command is not available";
  TearDown();
  CoordinatorServer::Options options;
  options.tls_cert_pem = cert->cert_pem;
  options.tls_key_pem = cert->key_pem;
  Start(options);
  char dir_template[] = "/tmp/phalanx-tls-client-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  std::ofstream(dir + "/ca.pem") << cert->cert_pem;
  std::ofstream(dir + "/token") << Cred(2) << "\n";
  const std::map<std::string, std::string> env = {
      {"PHALANX_COORDINATOR", "localhost:" + std::to_string(server_->port())},
      {"PHALANX_JOB", "j"},
      {"PHALANX_TASK_ID", "2"},
      {"PHALANX_NUM_TASKS", "3"},
      {"PHALANX_TOKEN_FILE", dir + "/token"},
      {"PHALANX_TLS_CA_FILE", dir + "/ca.pem"}};
  auto config = client::ClientConfig::FromEnv([&](const std::string& name) {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
  std::system(("rm -rf " + dir).c_str());
  ASSERT_THAT(config, IsOk());
  auto c = client::CoordinationClientImpl::Create(*config);
  ASSERT_THAT(c, IsOk());
  EXPECT_THAT((*c)->Connect(absl::Seconds(60)), IsOk());
  EXPECT_THAT((*c)->KvInsert("k", "v", false), IsOk());
}

TEST(CoordinationGrpcServerTls, HalfATlsConfigurationIsRefused) {
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  CoordinationService::Options o;
  o.job = "j";
  o.num_tasks = 1;
  auto service = *CoordinationService::Create(o, base::RealClock::Get(), metrics);
  CoordinatorServer::Options options;
  options.token = kJobToken;
  options.tls_cert_pem = "cert";
  EXPECT_EQ(
      CoordinatorServer::Start(options, *service, metrics, base::RealClock::Get()).status().code(),
      absl::StatusCode::kInvalidArgument);
  service->Stop();
}

}  // namespace
}  // namespace phalanx::coord
