// ParseWarningHeader: the API server's `Warning` headers (RFC 7234 5.5) as RestClient logs them
// and hands them to RestClientOptions::on_warning. The header values below are what kube-apiserver
// v1.26 sends (an unknown field under fieldValidation=Warn; PodSecurity in "warn" mode).
// The client-side QPS limit, and a throttled request's Retry-After, wait on the injected clock.
#include "common/kube/rest_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "fuzz/raw_http_server.h"

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

// One canned answer; Connection: close, since the test server answers one request per connection.
std::string Answer(const std::string& status, const std::string& extra_headers = "") {
  const std::string body = status.rfind("200", 0) == 0 ? R"({"kind":"Pod"})" : R"({})";
  return "HTTP/1.1 " + status + "\r\n" + extra_headers + "Content-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

class RestClientRetryAfter : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.on_response = [this](const std::string&, int code) {
      absl::MutexLock lock(&mu_);
      codes_.push_back(code);
    };
  }
  std::unique_ptr<RestClient> Client() {
    ClusterConfig config;
    config.server = server_.base_url();
    absl::StatusOr<std::unique_ptr<RestClient>> client =
        RestClient::Create(config, options_, clock_);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }
  std::vector<int> Codes() {
    absl::MutexLock lock(&mu_);
    return codes_;
  }

  const Resource pods_{"", "v1", "pods", true};
  fuzz::RawHttpServer server_;
  testing::FakeClock clock_;
  RestClientOptions options_;
  absl::Mutex mu_;
  std::vector<int> codes_ ABSL_GUARDED_BY(mu_);
};

// kube-apiserver's max-in-flight and priority-and-fairness limits answer 429 with Retry-After:
// the request was not acted on, so it goes again after that wait (once cut off here, one 429
// failed a whole reconcile pass).
TEST_F(RestClientRetryAfter, AThrottledRequestIsSentAgainAfterTheWaitTheServerNames) {
  server_.Script({Answer("429 Too Many Requests", "Retry-After: 3\r\n"), Answer("200 OK")});
  std::unique_ptr<RestClient> client = Client();
  ASSERT_NE(client, nullptr);
  const absl::Time start = clock_.Now();
  absl::StatusOr<Json> got;
  std::thread call([&] { got = client->Get(pods_, "ns", "p"); });
  // EXPECT, not ASSERT, while the call's thread runs: it must be joined whatever happens.
  EXPECT_TRUE(clock_.WaitForWaiters({start + absl::Seconds(3)}));
  EXPECT_THAT(Codes(), ElementsAre(429));
  clock_.Advance(absl::Seconds(3));
  call.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->at("kind").as_string(), "Pod");
  EXPECT_THAT(Codes(), ElementsAre(429, 200));
}

// A 5xx with Retry-After was not acted on either; one without may have been, so it is returned.
TEST_F(RestClientRetryAfter, A5xxIsSentAgainOnlyWithARetryAfter) {
  server_.Script({Answer("503 Service Unavailable", "Retry-After: 1\r\n"),
                  Answer("500 Internal Server Error"), Answer("200 OK")});
  std::unique_ptr<RestClient> client = Client();
  ASSERT_NE(client, nullptr);
  const absl::Time start = clock_.Now();
  absl::StatusOr<Json> got;
  std::thread call([&] { got = client->Get(pods_, "ns", "p"); });
  EXPECT_TRUE(clock_.WaitForWaiters({start + absl::Seconds(1)}));
  clock_.Advance(absl::Seconds(1));
  call.join();
  EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Codes(), ElementsAre(503, 500));
}

// Bounded: a server that keeps throttling gets max_throttled_retries more tries, each wait capped
// at max_retry_after however long it asks for; then the caller gets the 429 (Unavailable).
TEST_F(RestClientRetryAfter, RetriesAndTheirWaitsAreBounded) {
  options_.max_throttled_retries = 2;
  options_.max_retry_after = absl::Seconds(5);
  const std::string throttled = Answer("429 Too Many Requests", "Retry-After: 3600\r\n");
  server_.Script({throttled, throttled, throttled, Answer("200 OK")});
  std::unique_ptr<RestClient> client = Client();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<Json> got;
  std::thread call([&] { got = client->Get(pods_, "ns", "p"); });
  for (int wait = 1; wait <= 2; ++wait) {
    EXPECT_TRUE(clock_.WaitForWaiters({clock_.Now() + absl::Seconds(5)})) << "wait " << wait;
    clock_.Advance(absl::Seconds(5));
  }
  call.join();
  EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Codes(), ElementsAre(429, 429, 429));
}

}  // namespace
}  // namespace phalanx::kube
