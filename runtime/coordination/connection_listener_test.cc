// ConnectionListener over real 127.0.0.1 sockets with a FakeClock for the unauthenticated
// deadline; the test stands in for gRPC by keeping each handed-off descriptor.
#include "runtime/coordination/connection_listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/testing/eventually.h"
#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "runtime/coordination/fd_limit.h"

namespace phalanx::coord {
namespace {

using ::phalanx::testing::Eventually;

constexpr absl::Duration kWait = absl::Seconds(30);  // real-time bound for socket events only

class ListenerTest : public ::testing::Test {
 protected:
  // `unauthenticated_share` -1: none (any slot may be unauthenticated), which the tests of
  // other rules assume.
  void Start(int max_connections, int unauthenticated_share = -1) {
    ConnectionListener::Options options;
    options.max_connections = max_connections;
    options.max_unauthenticated_connections = unauthenticated_share;
    options.unauthenticated_timeout = absl::Seconds(5);
    auto listener = ConnectionListener::Listen(options, clock_, metrics_);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    listener_->Start([this](int, int fd) {
      absl::MutexLock lock(&mu_);
      handed_off_.push_back(fd);
    });
  }
  void TearDown() override {
    if (listener_) listener_->Stop();
    absl::MutexLock lock(&mu_);
    for (int fd : handed_off_) close(fd);
    for (int fd : clients_) close(fd);
  }

  // Connects a client and returns its descriptor.
  int Connect() {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(listener_->port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    clients_.push_back(fd);
    return fd;
  }
  // How gRPC names the server side of `client`'s connection.
  static std::string PeerOf(int client) {
    sockaddr_in local{};
    socklen_t length = sizeof(local);
    getsockname(client, reinterpret_cast<sockaddr*>(&local), &length);
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
    return absl::StrCat("ipv4:", text, ":", ntohs(local.sin_port));
  }
  static bool ClosedByServer(int client) {
    char byte;
    const ssize_t n = recv(client, &byte, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }
  int HandedOff() {
    absl::MutexLock lock(&mu_);
    return handed_off_.size();
  }

  testing::FakeClock clock_;
  prometheus::Registry registry_;
  CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<ConnectionListener> listener_;
  absl::Mutex mu_;
  std::vector<int> handed_off_ ABSL_GUARDED_BY(mu_);
  std::vector<int> clients_;
};

TEST_F(ListenerTest, Unauthenticated_ClosedExactlyAtTheTimeout_AuthenticatedNever) {
  Start(10);
  const int idle = Connect();
  const int task = Connect();
  ASSERT_TRUE(Eventually([&] { return listener_->open_connections() == 2; }, kWait));
  listener_->MarkAuthenticated(PeerOf(task));

  listener_->Tick(clock_.Now() + absl::Seconds(5) - absl::Milliseconds(1));
  EXPECT_FALSE(ClosedByServer(idle));
  listener_->Tick(clock_.Now() + absl::Seconds(5));
  EXPECT_TRUE(Eventually([&] { return ClosedByServer(idle); }, kWait));
  listener_->Tick(clock_.Now() + absl::Hours(1));
  EXPECT_FALSE(ClosedByServer(task));
  // The closed one is forgotten once its socket hangs up (the test's "gRPC" still holds its
  // descriptor, so only the listener's own shutdown ended it).
  EXPECT_TRUE(Eventually([&] { return listener_->open_connections() == 1; }, kWait));
}

TEST_F(ListenerTest, OverTheLimit_AcceptedAndClosedAtOnce_AndASlotFreesWhenOneEnds) {
  Start(2);
  const int first = Connect();
  Connect();
  ASSERT_TRUE(Eventually([&] { return listener_->open_connections() == 2; }, kWait));
  const int refused = Connect();
  EXPECT_TRUE(Eventually([&] { return ClosedByServer(refused); }, kWait));
  EXPECT_EQ(HandedOff(), 2);

  // The client hangs up: its slot frees without any tick.
  close(first);
  clients_.erase(clients_.begin());
  EXPECT_TRUE(Eventually([&] { return listener_->open_connections() == 1; }, kWait));
  const int later = Connect();
  EXPECT_TRUE(Eventually([&] { return HandedOff() == 3; }, kWait));
  EXPECT_FALSE(ClosedByServer(later));
}

// A flood of connections that never authenticate takes at most its share of the slots: each new
// one past the share shuts the oldest unauthenticated one down, and an authenticated connection
// is never touched (with `ulimit -n 1024`, such a flood once kept every legitimate call out).
TEST_F(ListenerTest, UnauthenticatedShare_ANewOneShutsTheOldest_AuthenticatedKeepTheirSlots) {
  Start(/*max_connections=*/6, /*unauthenticated_share=*/2);
  const int task = Connect();
  ASSERT_TRUE(Eventually([&] { return listener_->open_connections() == 1; }, kWait));
  listener_->MarkAuthenticated(PeerOf(task));
  std::vector<int> flood;
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Milliseconds(1));  // accepted one after another: the first is oldest
    flood.push_back(Connect());
    ASSERT_TRUE(Eventually([&] { return HandedOff() == i + 2; }, kWait));
  }
  EXPECT_TRUE(Eventually([&] { return ClosedByServer(flood[0]); }, kWait));
  EXPECT_FALSE(ClosedByServer(flood[1]));
  EXPECT_FALSE(ClosedByServer(flood[2]));
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(absl::Milliseconds(1));
    flood.push_back(Connect());
  }
  // Every one was admitted (none refused for the limit: the task's slot and the flood's share
  // are apart), and never more than the share stays unauthenticated: the task and two of the
  // flood remain, the newest among them (a new client always gets its chance to say hello).
  ASSERT_TRUE(Eventually([&] { return HandedOff() == 14; }, kWait)) << HandedOff();
  EXPECT_TRUE(Eventually([&] { return listener_->open_connections() == 3; }, kWait));
  EXPECT_FALSE(ClosedByServer(flood.back()));
  EXPECT_FALSE(ClosedByServer(task));
  double shed = 0;
  for (const auto& family : registry_.Collect()) {
    if (family.name != "phalanx_coordinator_connections_closed_total") continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.value == "unauthenticated_share") shed = metric.counter.value;
      }
    }
  }
  EXPECT_EQ(shed, 11);  // each of the flood but the two newest
}

// A counter by reason born at 1 would hide its first event from increase(): every reason is a
// series at 0 before anything happened.
TEST(CoordinatorMetricsReasons, EveryFailureAndCloseReasonIsASeriesFromTheStart) {
  prometheus::Registry registry;
  CoordinatorMetrics metrics(registry);
  std::map<std::string, std::set<std::string>> zero;  // family -> reasons at 0
  for (const auto& family : registry.Collect()) {
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "reason" && metric.counter.value == 0)
          zero[family.name].insert(label.value);
      }
    }
  }
  EXPECT_EQ(zero["phalanx_coordinator_task_failures_total"],
            (std::set<std::string>{"session_broken", "heartbeat_timeout", "reported_error",
                                   "superseded"}));
  EXPECT_EQ(zero["phalanx_coordinator_connections_closed_total"],
            (std::set<std::string>{"limit", "unauthenticated", "unauthenticated_share",
                                   "out_of_descriptors", "unread_output"}));
  std::set<std::string> budgets;
  for (const auto& family : registry.Collect()) {
    if (family.name != "phalanx_coordinator_wire_refusals_total") continue;
    for (const auto& metric : family.metric) {
      if (metric.counter.value == 0) budgets.insert(metric.label.at(0).value);
    }
  }
  EXPECT_EQ(budgets, (std::set<std::string>{"streams_per_connection", "streams_per_credential"}));
}

TEST(DefaultMaxConnections, LeavesAReserveAndCountsTwoDescriptorsPerConnection) {
  struct Case {
    const char* name;
    uint64_t limit;
    int want;
  };
  for (const Case& c : std::vector<Case>{{"tiny", 10, 1},
                                         {"ulimit 256", 256, 96},
                                         {"usual soft 1024", 1024, 448},
                                         {"container 1048576", 1048576, 458752}}) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(DefaultMaxConnections(c.limit), c.want);
  }
}

}  // namespace
}  // namespace phalanx::coord
