// ParseWarningHeader: the API server's `Warning` headers (RFC 7234 5.5) as RestClient logs them
// and hands them to RestClientOptions::on_warning. The header values below are what kube-apiserver
// v1.26 sends (an unknown field under fieldValidation=Warn; PodSecurity in "warn" mode).
// The client-side QPS limit waits on the injected clock.
#include "common/kube/rest_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"

namespace phalanx::kube {
namespace {

using ::phalanx::testing::StatusIs;
using ::testing::ElementsAre;

TEST(ParseWarningHeader, ReadsEachWarningsText) {
  struct Case {
    std::string name;
    std::string value;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"unknownField",
       R"(299 - "unknown field \"spec.containers[0].comand\"")",
       {R"(unknown field "spec.containers[0].comand")"}},
      {"twoJoined",
       R"(299 - "first, with a comma", 299 - "second")",
       {"first, with a comma", "second"}},
      {"withDate",
       R"(299 - "dated" "Sat, 25 Aug 2012 23:34:45 GMT", 299 - "next")",
       {"dated", "next"}},
      {"podSecurity",
       R"(299 - "would violate PodSecurity \"restricted:latest\": seccompProfile")",
       {R"(would violate PodSecurity "restricted:latest": seccompProfile)"}},
      {"notTheUsualForm", "something odd", {"something odd"}},
      {"empty", "", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(ParseWarningHeader(c.value), c.want);
  }
}

TEST(RestClientOptions, StrictFieldValidationByDefault) {
  EXPECT_EQ(RestClientOptions{}.field_validation, "Strict");
}

// A loopback port bound but not listening: nobody else gets it, and a connect is refused at once.
class RefusingPort {
 public:
  RefusingPort() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~RefusingPort() { close(fd_); }
  int port() const { return port_; }

 private:
  const int fd_;
  int port_ = 0;
};

TEST(RestClientThrottle, ARequestOverTheBurst_WaitsOnTheInjectedClock) {
  const Resource pods{"", "v1", "pods", true};
  RefusingPort port;
  testing::FakeClock clock;
  std::atomic<int> sent{0};
  RestClientOptions options;
  options.qps = 1;
  options.burst = 1;
  options.on_response = [&sent](const std::string&, int) { ++sent; };
  ClusterConfig config;
  config.server = "http://127.0.0.1:" + std::to_string(port.port());
  absl::StatusOr<std::unique_ptr<RestClient>> client = RestClient::Create(config, options, clock);
  ASSERT_TRUE(client.ok()) << client.status();

  // The burst: the first request goes out at once (and is refused: nothing listens).
  EXPECT_THAT((*client)->Get(pods, "ns", "p").status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(sent.load(), 1);
  const absl::Time start = clock.Now();
  std::thread second([&] { (void)(*client)->Get(pods, "ns", "p"); });
  // At 1 QPS the second waits for its token on the fake clock, a second; it has not gone out.
  ASSERT_TRUE(clock.WaitForWaiters({start + absl::Seconds(1)}));
  EXPECT_EQ(sent.load(), 1);
  clock.Advance(absl::Seconds(1));
  second.join();
  EXPECT_EQ(sent.load(), 2);
}

}  // namespace
}  // namespace phalanx::kube
