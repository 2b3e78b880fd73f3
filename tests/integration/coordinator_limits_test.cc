// The real phalanx-coordinator under descriptor pressure (issue 16 item 1): started with a low
// `ulimit -n`, flooded with raw TCP connections and idle HTTP/2 prefaces on 127.0.0.1, it must
// keep serving valid clients once the flood is gone; idle unauthenticated connections are
// closed; grpc.health.v1 answers without a token; /healthz reports whether a loopback RPC
// through the gRPC port answers; a token that is not the job's stops it with a known exit code.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/auth/credentials.h"
#include "common/process/subprocess.h"
#include "common/testing/eventually.h"
#include "common/testing/http_get.h"
#include "gtest/gtest.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::coord {
namespace {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::HttpGet;

constexpr char kToken[] = "limits-test-token";
// Generous for a loaded 2-core machine: the assertions are about "eventually", never speed.
constexpr absl::Duration kTimeout = absl::Seconds(60);

// PHALANX_COORDINATOR_BIN overrides the binary (to run these tests against an older build).
std::string CoordinatorBinary() {
  if (const char* bin = std::getenv("PHALANX_COORDINATOR_BIN")) return bin;
  return std::string(PHALANX_BUILD_DIR) + "/runtime/coordination/phalanx-coordinator";
}

struct Coordinator {
  std::unique_ptr<process::Subprocess> process;
  int grpc_port = 0;
  int http_port = 0;
  std::string log_path;
};

// Starts the coordinator under `ulimits` (a shell fragment such as "ulimit -n 256").
Coordinator StartCoordinator(const std::string& ulimits, std::vector<std::string> extra_flags) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("phalanx-limits-", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string token_path = dir / "token";
  std::ofstream(token_path) << kToken;
  Coordinator c;
  c.log_path = dir / absl::StrCat(info->name(), ".log");
  process::SubprocessOptions options;
  options.argv = {"/bin/bash",
                  "-c",
                  ulimits + " && exec \"$0\" \"$@\"",
                  CoordinatorBinary(),
                  "--job=limits",
                  "--num_tasks=2",
                  "--token_file=" + token_path,
                  "--listen=127.0.0.1:0",
                  "--metrics_listen=127.0.0.1:0"};
  for (std::string& flag : extra_flags) options.argv.push_back(std::move(flag));
  options.stderr_path = c.log_path;
  auto child = process::Subprocess::Start(std::move(options));
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return c;
  c.process = *std::move(child);
  std::optional<std::string> ready = c.process->WaitForLine(
      [](const std::string& line) { return line.rfind("ready ", 0) == 0; }, kTimeout);
  EXPECT_TRUE(ready.has_value()) << "coordinator not ready; log in " << c.log_path;
  if (!ready) return c;
  std::smatch match;
  const std::regex pattern("grpc=[^ ]*:([0-9]+) metrics=[^ ]*:([0-9]+)");
  EXPECT_TRUE(std::regex_search(*ready, match, pattern)) << *ready;
  EXPECT_TRUE(absl::SimpleAtoi(match[1].str(), &c.grpc_port));
  EXPECT_TRUE(absl::SimpleAtoi(match[2].str(), &c.http_port));
  return c;
}

// A TCP connection to 127.0.0.1:port, non-blocking (the connect may still be in progress).
int RawConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  return fd;
}

// The HTTP/2 client preface and an empty SETTINGS frame: a connection that looks like gRPC
// and then says nothing.
void SendHttp2Preface(int fd) {
  static const char kPreface[] =
      "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
  pollfd p{fd, POLLOUT, 0};
  poll(&p, 1, 5000);
  (void)!write(fd, kPreface, sizeof(kPreface) - 1);
}

// True once the server has closed `fd` (EOF or reset).
bool ClosedByServer(int fd) {
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

std::shared_ptr<grpc::Channel> FreshChannel(int port) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // no reconnect backoff shared between
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

grpc::Status Register(grpc::Channel& channel) {
  auto stub = v1::Coordination::NewStub(std::shared_ptr<grpc::Channel>(&channel, [](auto*) {}));
  grpc::ClientContext context;
  context.AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::RegisterRequest request;
  request.mutable_task()->set_task_id(0);
  request.mutable_task()->set_incarnation(1);
  v1::RegisterResponse response;
  return stub->Register(&context, request, &response);
}

// One grpc.health.v1.Health/Check for "" with no token, decoded by hand.
std::pair<grpc::Status, std::string> HealthCheck(int port) {
  std::shared_ptr<grpc::Channel> channel = FreshChannel(port);
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty;
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();  // bounded by the call's deadline
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (status.ok() && response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices)
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return {status, bytes};
}

int HealthzCode(int http_port) {
  std::optional<::phalanx::testing::HttpResponse> response = HttpGet(http_port, "/healthz");
  return response ? response->code : 0;
}

// The value of a metric series in /metrics (a line starting with `series`), or -1.
double Metric(int http_port, const std::string& series) {
  std::optional<::phalanx::testing::HttpResponse> response = HttpGet(http_port, "/metrics");
  if (!response) return -1;
  std::istringstream lines(response->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

int OpenDescriptors(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

void CloseAll(std::vector<int>& fds) {
  for (int fd : fds) close(fd);
  fds.clear();
}

TEST(CoordinatorLimits, ConnectionFloodPastTheFdLimit_ThenAValidClientRegistersWithinSeconds) {
  Coordinator c = StartCoordinator("ulimit -n 256", {});
  ASSERT_NE(c.grpc_port, 0);
  std::vector<int> flood;
  for (int i = 0; i < 600; ++i) {
    flood.push_back(RawConnect(c.grpc_port));
    if (i % 2 == 1) SendHttp2Preface(flood.back());
  }
  // The flood has reached the server: it shut the oldest unauthenticated ones down for newer
  // ones (their share of the slots is full), refused some, or ran out of descriptors.
  EXPECT_TRUE(Eventually(
      [&] {
        return Metric(c.http_port, R"(phalanx_coordinator_connections_closed_total{reason=)"
                                   R"("unauthenticated_share"})") > 0 ||
               Metric(c.http_port,
                      R"(phalanx_coordinator_connections_closed_total{reason="limit"})") > 0 ||
               OpenDescriptors(c.process->pid()) >= 250;
      },
      kTimeout))
      << "log in " << c.log_path;
  CloseAll(flood);
  EXPECT_TRUE(Eventually(
      [&] {
        std::shared_ptr<grpc::Channel> channel = FreshChannel(c.grpc_port);
        return Register(*channel).ok();
      },
      kTimeout))
      << "the coordinator no longer answers after the flood; log in " << c.log_path;
  EXPECT_TRUE(Eventually([&] { return HealthzCode(c.http_port) == 200; }, kTimeout));
}

// A connection limit above what the descriptors allow: the accept loop runs out of
// descriptors, sheds and pauses instead of stopping for good.
TEST(CoordinatorLimits, FloodWithTheLimitAboveTheFdLimit_AcceptsAgainOnceDescriptorsFree) {
  Coordinator c = StartCoordinator("ulimit -n 256", {"--max_connections=5000"});
  ASSERT_NE(c.grpc_port, 0);
  std::vector<int> flood;
  for (int i = 0; i < 600; ++i) flood.push_back(RawConnect(c.grpc_port));
  EXPECT_TRUE(Eventually(
      [&] {
        return Metric(
                   c.http_port,
                   R"(phalanx_coordinator_connections_closed_total{reason="out_of_descriptors"})") >
               0;
      },
      kTimeout))
      << "log in " << c.log_path;
  CloseAll(flood);
  EXPECT_TRUE(Eventually(
      [&] {
        std::shared_ptr<grpc::Channel> channel = FreshChannel(c.grpc_port);
        return Register(*channel).ok();
      },
      kTimeout))
      << "the coordinator no longer answers after the flood; log in " << c.log_path;
}

TEST(CoordinatorLimits, StartUp_RaisesTheSoftFdLimitToTheHardLimit) {
  Coordinator c = StartCoordinator("ulimit -Sn 256 && ulimit -Hn 700", {});
  ASSERT_NE(c.grpc_port, 0);
  std::ifstream limits(absl::StrCat("/proc/", c.process->pid(), "/limits"));
  std::string line;
  while (std::getline(limits, line) && line.rfind("Max open files", 0) != 0) {
  }
  EXPECT_TRUE(std::regex_search(line, std::regex("Max open files +700 +700"))) << line;
}

// A token Secret squatted by someone else gives the coordinator a token that is not the job's:
// it refuses to serve, with the exit code the operator turns into a ChildConflict (it may not
// read Secrets itself), and says why on stderr (the pod's termination message).
TEST(CoordinatorLimits, StartUp_ATokenThatIsNotTheJobsExitsWithTheTokenMismatchCode) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("phalanx-limits-", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string token_path = dir / "squatted-token";
  std::ofstream(token_path) << "the-squatters-token";
  process::SubprocessOptions options;
  options.argv = {CoordinatorBinary(),
                  "--job=limits",
                  "--num_tasks=2",
                  "--token_file=" + token_path,
                  "--token_sha256=" + auth::Sha256Hex(kToken),  // what the operator expects
                  "--listen=127.0.0.1:0",
                  "--metrics_listen=127.0.0.1:0"};
  options.stderr_path = dir / "token-mismatch.log";
  auto child = process::Subprocess::Start(std::move(options));
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE((*child)->Wait(kTimeout).has_value()) << "the coordinator kept running";
  EXPECT_EQ((*child)->ExitCode(), auth::kExitTokenMismatch);
  std::ifstream log(dir / "token-mismatch.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("does not match --token_sha256"), std::string::npos) << text;

  // The right token with its fingerprint starts as usual.
  Coordinator ok = StartCoordinator("true", {"--token_sha256=" + auth::Sha256Hex(kToken)});
  EXPECT_NE(ok.grpc_port, 0);
}

TEST(CoordinatorLimits, IdleUnauthenticatedConnections_AreClosed_AuthenticatedOnesStay) {
  Coordinator c = StartCoordinator("ulimit -n 256", {"--unauthenticated_timeout=1s"});
  ASSERT_NE(c.grpc_port, 0);
  std::shared_ptr<grpc::Channel> task = FreshChannel(c.grpc_port);
  ASSERT_TRUE(Register(*task).ok());
  std::vector<int> idle = {RawConnect(c.grpc_port), RawConnect(c.grpc_port)};
  SendHttp2Preface(idle[1]);
  EXPECT_TRUE(Eventually([&] { return ClosedByServer(idle[0]); }, kTimeout)) << "raw TCP";
  EXPECT_TRUE(Eventually([&] { return ClosedByServer(idle[1]); }, kTimeout)) << "HTTP/2 preface";
  EXPECT_EQ(task->GetState(false), GRPC_CHANNEL_READY) << "the registered task was cut off";
  EXPECT_GE(Metric(c.http_port,
                   R"(phalanx_coordinator_connections_closed_total{reason="unauthenticated"})"),
            2);
  CloseAll(idle);
}

TEST(CoordinatorLimits, HealthService_AnswersServingWithoutAToken) {
  Coordinator c = StartCoordinator("ulimit -n 256", {});
  ASSERT_NE(c.grpc_port, 0);
  auto [status, bytes] = HealthCheck(c.grpc_port);
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_EQ(bytes, std::string("\x08\x01", 2)) << "HealthCheckResponse{status: SERVING}";
  EXPECT_TRUE(Eventually([&] { return HealthzCode(c.http_port) == 200; }, kTimeout));
}

TEST(CoordinatorLimits, Healthz_Is503WhileTheGrpcPortTakesNoConnections_And200After) {
  Coordinator c =
      StartCoordinator("ulimit -n 256", {"--max_connections=2", "--unauthenticated_timeout=10m"});
  ASSERT_NE(c.grpc_port, 0);
  // Two authenticated clients fill the port. (Unauthenticated ones no longer can: past their
  // share of the slots a newcomer shuts the oldest of them down, so the health check would
  // get in.)
  std::vector<std::shared_ptr<grpc::Channel>> hogs = {FreshChannel(c.grpc_port),
                                                      FreshChannel(c.grpc_port)};
  for (auto& hog : hogs) ASSERT_TRUE(Register(*hog).ok());
  ASSERT_TRUE(Eventually(
      [&] { return Metric(c.http_port, "phalanx_coordinator_connections_open") == 2; }, kTimeout));
  // Stable while the two stay open, so waiting for it tests no speed.
  EXPECT_TRUE(Eventually([&] { return HealthzCode(c.http_port) == 503; }, kTimeout))
      << "log in " << c.log_path;
  hogs.clear();
  EXPECT_TRUE(Eventually([&] { return HealthzCode(c.http_port) == 200; }, kTimeout));
}

// The most the flood test lets the coordinator's peak RSS be: ASan's shadow memory and
// quarantine (the asan preset builds the coordinator with it too) multiply what it holds.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kFloodPeakLimitMiB = 1024;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr double kFloodPeakLimitMiB = 1024;
#else
constexpr double kFloodPeakLimitMiB = 160;
#endif
#else
constexpr double kFloodPeakLimitMiB = 160;
#endif

// The coordinator's peak resident memory (VmHWM) in MiB, or -1.
double PeakRssMiB(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  return -1;
}

// Issue 30: a thousand peers that never authenticate, each parking what it can, cost the
// coordinator a small, fixed amount; a task connected before keeps being served and a new one
// registers meanwhile, with the descriptors of `ulimit -n 1024`. Half of them open
// the session wire and send 2 MiB of a frame announced at nearly 4 MiB; the other half open
// gRPC with an HTTP/2 preface; 8 more send 24 MiB gRPC messages without a token. Before, each
// wire peer could park up to 4 MiB: 100 took the coordinator from 21 MB to 435 MB, past its
// pod's 256 MiB limit.
TEST(CoordinatorLimits, AThousandUnauthenticatedPeersParkingBytes_CostLittle_AndAClientRegisters) {
  // 1024 descriptors: 448 connection slots, a quarter of them for the unauthenticated.
  // No timeout frees a slot meanwhile: what keeps room for the new client is the share.
  Coordinator c = StartCoordinator("ulimit -n 1024", {"--unauthenticated_timeout=10m"});
  ASSERT_NE(c.grpc_port, 0);
  const pid_t pid = c.process->pid();
  // A task connected before the flood keeps being served through it.
  std::shared_ptr<grpc::Channel> task = FreshChannel(c.grpc_port);
  ASSERT_TRUE(Register(*task).ok());
  // A frame header announcing nearly the 4 MiB a frame may have, on stream 1, then 2 MiB of it.
  std::string parked("\xf0PW\x03", 4);
  const uint32_t announced = (4 << 20) - 64;
  for (int shift : {24, 16, 8, 0}) parked.push_back(static_cast<char>((announced >> shift) & 0xff));
  parked.append(std::string("\x00\x00\x00\x01", 4));
  parked.append(2 << 20, 'x');
  std::vector<int> flood;
  for (int i = 0; i < 500; ++i) {
    const int fd = RawConnect(c.grpc_port);
    std::string_view rest = parked;
    for (int waits = 0; !rest.empty() && waits < 20; ++waits) {  // at most ~2 s per peer
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 100);
      const ssize_t n = send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
      if (n > 0) rest.remove_prefix(n);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;  // refused and closed
    }
    flood.push_back(fd);
    flood.push_back(RawConnect(c.grpc_port));
    SendHttp2Preface(flood.back());
  }
  std::vector<std::thread> big_calls;
  for (int i = 0; i < 8; ++i) {
    big_calls.emplace_back([&] {
      auto stub = v1::Coordination::NewStub(FreshChannel(c.grpc_port));
      grpc::ClientContext context;  // no token
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      v1::KeyValueInsertRequest request;
      request.set_key("big");
      request.set_value(std::string(24 << 20, 'v'));
      v1::KeyValueInsertResponse response;
      const grpc::Status refused = stub->KeyValueInsert(&context, request, &response);
      EXPECT_FALSE(refused.ok());
    });
  }
  // Meanwhile the task connected before is still served, and a new one with the token
  // registers.
  const grpc::Status again = Register(*task);
  EXPECT_TRUE(again.ok()) << again.error_message();
  EXPECT_TRUE(Eventually(
      [&] {
        std::shared_ptr<grpc::Channel> channel = FreshChannel(c.grpc_port);
        return Register(*channel).ok();
      },
      absl::Seconds(30)))
      << "log in " << c.log_path;
  for (std::thread& call : big_calls) call.join();
  const double peak = PeakRssMiB(pid);
  EXPECT_GT(peak, 0);
  EXPECT_LT(peak, kFloodPeakLimitMiB) << "MiB at the peak; the pod's limit is 256 Mi";
  std::cerr << "coordinator peak RSS under the flood: " << peak << " MiB\n";
  CloseAll(flood);
}

}  // namespace
}  // namespace phalanx::coord
