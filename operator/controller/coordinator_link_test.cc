// CoordinatorLink against a real coordination service and its gRPC server on 127.0.0.1 (port 0),
// each on its own FakeClock: the coordinator's declares tasks failed (Tick), the link's runs the
// poll back-off, so every step is taken by the test, and only gRPC itself runs on real time.
#include "operator/controller/coordinator_link.h"

#include <atomic>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/auth/tls_issuer.h"
#include "common/testing/eventually.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "runtime/coordination/coordinator_server.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/service.h"

namespace phalanx::op {
namespace {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::FakeClock;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr char kToken[] = "job-token";
constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(3);
// Bounds the real-time waits on gRPC; a healthy run needs a small fraction of it.
constexpr absl::Duration kWait = absl::Seconds(20);

// One job's coordinator: the service and its gRPC server, on the coordinator's FakeClock.
// Destroying it is the coordinator going away; another on the same port is it coming back.
class Coordinator {
 public:
  // `tls`: serve TLS only, with this certificate and key.
  Coordinator(FakeClock& clock, int port = 0, const auth::TlsKeyPair& tls = {}) : clock_(clock) {
    coord::CoordinationService::Options options;
    options.job = "j";
    options.num_tasks = 4;
    options.heartbeat_interval = absl::Seconds(1);
    options.heartbeat_timeout = kHeartbeatTimeout;
    service_ = *coord::CoordinationService::Create(options, clock_, metrics_);
    coord::CoordinatorServer::Options server_options;
    server_options.listen_address = absl::StrCat("127.0.0.1:", port);
    server_options.token = kToken;
    server_options.tls_cert_pem = tls.cert_pem;
    server_options.tls_key_pem = tls.key_pem;
    auto server = coord::CoordinatorServer::Start(server_options, *service_, metrics_, clock_);
    EXPECT_THAT(server, IsOk());
    server_ = *std::move(server);
  }
  ~Coordinator() {
    service_->Stop();
    server_->Shutdown(absl::Milliseconds(100));
  }
  int port() const { return server_->port(); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port()); }
  coord::CoordinationService& service() { return *service_; }

  // `task` registers as `incarnation` and never opens its session: one heartbeat timeout later
  // the coordinator declares it failed ("no session opened within 3s").
  void FailSilently(int task, base::Incarnation incarnation) {
    ASSERT_THAT(service_->Register({task, incarnation}), IsOk());
    clock_.Advance(kHeartbeatTimeout + absl::Seconds(1));
    service_->Tick(clock_.Now());
  }

 private:
  FakeClock& clock_;
  prometheus::Registry registry_;
  coord::CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<coord::CoordinationService> service_;
  std::unique_ptr<coord::CoordinatorServer> server_;
};

int ThreadsInThisProcess() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    int threads = 0;
    if (line.rfind("Threads:", 0) == 0 && absl::SimpleAtoi(line.substr(8), &threads)) {
      return threads;
    }
  }
  return -1;
}

class CoordinatorLinkTest : public ::testing::Test {
 protected:
  int Wakes(const std::string& key) {
    absl::MutexLock lock(&mu_);
    return wakes_[key];
  }
  bool ShowsFailed(const std::string& key, int task) {
    return link_.FailedTasks(key).contains(task);
  }
  // Waits until the link's timer thread waits on the clock for exactly `deadlines`.
  bool BacksOffUntil(std::vector<absl::Time> deadlines) {
    return clock_.WaitForWaiters(std::move(deadlines), kWait);
  }

  FakeClock coordinator_clock_;
  FakeClock clock_;  // the link's
  absl::Mutex mu_;
  std::map<std::string, int> wakes_ ABSL_GUARDED_BY(mu_);
  CoordinatorLink link_{clock_, [this](const std::string& key) {
                          absl::MutexLock lock(&mu_);
                          ++wakes_[key];
                        }};
};

TEST_F(CoordinatorLinkTest, FailedTask_ShowsWithItsIncarnationAndReason_AndWakesTheJob) {
  Coordinator coordinator(coordinator_clock_);
  link_.Ensure("ns/a", coordinator.address(), kToken, "uid-1");
  coordinator.FailSilently(2, 7);
  ASSERT_TRUE(Eventually([&] { return ShowsFailed("ns/a", 2); }, kWait));
  const std::map<int, CoordinatorLink::FailedTask> failed = link_.FailedTasks("ns/a");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed.at(2).incarnation, 7);
  EXPECT_THAT(failed.at(2).reason, HasSubstr("no session opened within 3s"));
  EXPECT_GE(Wakes("ns/a"), 1);
  EXPECT_TRUE(link_.FailedTasks("ns/other").empty());
}

// What the coordinator registered comes along with the failures (pass.h's NextIncarnation reads
// it): here a forged jump to 1,000,000 for task 1, which the operator did not make.
TEST_F(CoordinatorLinkTest, CarriesTheNewestIncarnationEachTaskRegistered) {
  Coordinator coordinator(coordinator_clock_);
  link_.Ensure("ns/a", coordinator.address(), kToken, "uid-1");
  coordinator.FailSilently(2, 7);  // a change the link hears of
  ASSERT_TRUE(Eventually([&] { return ShowsFailed("ns/a", 2); }, kWait));
  EXPECT_EQ(link_.RegisteredIncarnations("ns/a"), (std::map<int, base::Incarnation>{{2, 7}}));
  coordinator.FailSilently(1, 1'000'000);
  ASSERT_TRUE(Eventually([&] { return ShowsFailed("ns/a", 1); }, kWait));
  EXPECT_EQ(link_.RegisteredIncarnations("ns/a"),
            (std::map<int, base::Incarnation>{{1, 1'000'000}, {2, 7}}));
  EXPECT_TRUE(link_.RegisteredIncarnations("ns/other").empty());
}

TEST_F(CoordinatorLinkTest, CarriesWhenAFailedTaskWasLastHeardAndTheRolledBackTotal) {
  Coordinator coordinator(coordinator_clock_);
  link_.Ensure("ns/a", coordinator.address(), kToken, "uid-1");
  ASSERT_TRUE(Eventually([&] { return link_.RolledBackWork("ns/a").has_value(); }, kWait));
  EXPECT_DOUBLE_EQ(link_.RolledBackWork("ns/a")->seconds, 0);
  ASSERT_THAT(coordinator.service().Register({0, 0}), IsOk());
  ASSERT_THAT(coordinator.service().ReportRolledBack({0, 0}, "e1", absl::Milliseconds(2500)),
              IsOk());
  ASSERT_TRUE(Eventually([&] { return link_.RolledBackWork("ns/a")->seconds == 2.5; }, kWait));
  EXPECT_EQ(link_.RolledBackWork("ns/a")->coordinator_id,
            coordinator.service().Snapshot().coordinator_id);
  const absl::Time registered = coordinator_clock_.Now();
  coordinator.FailSilently(2, 0);  // registered at the clock's now, never heard of again
  ASSERT_TRUE(Eventually([&] { return ShowsFailed("ns/a", 2); }, kWait));
  EXPECT_EQ(link_.FailedTasks("ns/a").at(2).last_heard, registered);
}

TEST_F(CoordinatorLinkTest, CarriesTheWorkersStepping) {
  Coordinator coordinator(coordinator_clock_);
  link_.Ensure("ns/a", coordinator.address(), kToken, "uid-1");
  ASSERT_TRUE(Eventually([&] { return link_.RolledBackWork("ns/a").has_value(); }, kWait));
  EXPECT_EQ(link_.Stepping("ns/a"), SteppingReport{});
  ASSERT_THAT(coordinator.service().Register({0, 0}), IsOk());
  const absl::Time stepped = coordinator_clock_.Now();
  ASSERT_THAT(coordinator.service().ReportStepping({0, 0}), IsOk());
  ASSERT_TRUE(Eventually([&] { return link_.Stepping("ns/a").first_step.has_value(); }, kWait));
  EXPECT_EQ(link_.Stepping("ns/a"), (SteppingReport{stepped, stepped, std::nullopt, false}));
  EXPECT_EQ(link_.Stepping("ns/other"), SteppingReport{});
}

TEST_F(CoordinatorLinkTest, NotifyPreemption_OpensARoundOnTheCoordinator) {
  Coordinator coordinator(coordinator_clock_);
  link_.Ensure("ns/a", coordinator.address(), kToken, "uid-1");
  const absl::Time deadline = absl::FromUnixSeconds(1'800'000'000);
  ASSERT_THAT(link_.NotifyPreemption("ns/a", {0, 3}, deadline, "node maintenance"), IsOk());
  // The round is open: a later notice joins it, and the link's notice set its terms.
  auto joined = coordinator.service().NotifyPreemption(
      {.reason = "probe", .deadline = deadline + absl::Hours(1), .affected_tasks = {0}});
  ASSERT_THAT(joined, IsOk());
  EXPECT_TRUE(joined->second) << "the link's notice opened the round";
  EXPECT_EQ(joined->first.reason, "node maintenance");
  EXPECT_EQ(joined->first.deadline, deadline);
  EXPECT_THAT(joined->first.affected_tasks, UnorderedElementsAre(0, 3));
}

TEST_F(CoordinatorLinkTest, NotifyPreemption_ForAJobNotWatched_IsUnavailable) {
  EXPECT_THAT(link_.NotifyPreemption("ns/none", {0}, absl::InfiniteFuture(), "x"),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(CoordinatorLinkTest, WrongToken_IsRefusedAndRetriedWithBackoff_ANewTokenStartsOver) {
  Coordinator coordinator(coordinator_clock_);
  coordinator.FailSilently(1, 1);
  const absl::Time start = clock_.Now();
  link_.Ensure("ns/a", coordinator.address(), "not-the-token", "uid-1");
  ASSERT_TRUE(BacksOffUntil({start + absl::Seconds(1)}));
  EXPECT_TRUE(link_.FailedTasks("ns/a").empty());
  // The job's Secret changed: a new watch with the new token, polled at once.
  link_.Ensure("ns/a", coordinator.address(), kToken, "uid-1");
  ASSERT_TRUE(Eventually([&] { return ShowsFailed("ns/a", 1); }, kWait));
  EXPECT_TRUE(clock_.PendingDeadlines().empty()) << "the old watch's back-off went with it";
}

// docs/security.md "TLS by default": the link dials the coordinator pod's IP and verifies its
// certificate as the job's Service name, against the operator's CA; a coordinator whose
// certificate another CA signed (another operator's, a forger's) is refused.
TEST_F(CoordinatorLinkTest, ATlsCoordinatorIsVerifiedByTheOperatorsCaAsItsServiceName) {
  absl::StatusOr<auth::TlsKeyPair> ca = auth::MakeCertificateAuthority("ca", absl::Hours(1));
  absl::StatusOr<auth::TlsKeyPair> other = auth::MakeCertificateAuthority("ca", absl::Hours(1));
  ASSERT_THAT(ca, IsOk());
  ASSERT_THAT(other, IsOk());
  const std::vector<std::string> names = {"j-coordinator.ns.svc", "j-coordinator"};
  absl::StatusOr<auth::TlsKeyPair> leaf = auth::IssueServerCertificate(*ca, names, absl::Hours(1));
  ASSERT_THAT(leaf, IsOk());
  Coordinator coordinator(coordinator_clock_, 0, *leaf);
  coordinator.FailSilently(1, 1);

  CoordinatorLink link(
      clock_, [](const std::string&) {}, ca->cert_pem);
  link.Ensure("ns/j", coordinator.address(), kToken, "uid-1", "j-coordinator.ns.svc");
  ASSERT_TRUE(Eventually([&] { return link.FailedTasks("ns/j").contains(1); }, kWait));

  // Another CA's link, the right CA for another name, or cleartext get no answer (until its
  // first answer a watch waits for its channel to connect, so the handshake's refusal shows as
  // silence): a second of it, against the tens of milliseconds the answer above took.
  CoordinatorLink foreign(
      clock_, [](const std::string&) {}, other->cert_pem);
  foreign.Ensure("ns/j", coordinator.address(), kToken, "uid-1", "j-coordinator.ns.svc");
  link.Ensure("ns/j", coordinator.address(), kToken, "uid-1", "k-coordinator.ns.svc");
  link_.Ensure("ns/j", coordinator.address(), kToken, "uid-1");
  EXPECT_FALSE(Eventually(
      [&] {
        return !foreign.FailedTasks("ns/j").empty() || !link.FailedTasks("ns/j").empty() ||
               !link_.FailedTasks("ns/j").empty();
      },
      absl::Seconds(1)));
  // The right name again: a new watch, answered.
  link.Ensure("ns/j", coordinator.address(), kToken, "uid-1", "j-coordinator.ns.svc");
  EXPECT_TRUE(Eventually([&] { return link.FailedTasks("ns/j").contains(1); }, kWait));
}

TEST_F(CoordinatorLinkTest, CoordinatorGoneAndBack_IsRePolledWithDoublingBackoff) {
  auto coordinator = std::make_unique<Coordinator>(coordinator_clock_);
  const int port = coordinator->port();
  link_.Ensure("ns/a", coordinator->address(), kToken, "uid-1");
  coordinator->FailSilently(1, 1);
  ASSERT_TRUE(Eventually([&] { return ShowsFailed("ns/a", 1); }, kWait));

  coordinator.reset();  // gone: every poll now fails at once
  absl::Time t = clock_.Now();
  for (absl::Duration delay : {absl::Seconds(1), absl::Seconds(2), absl::Seconds(4)}) {
    SCOPED_TRACE(absl::FormatDuration(delay));
    ASSERT_TRUE(BacksOffUntil({t + delay}));
    clock_.Advance(delay);
    t += delay;
  }
  ASSERT_TRUE(BacksOffUntil({t + absl::Seconds(8)}));
  EXPECT_TRUE(ShowsFailed("ns/a", 1)) << "the last answer stands while the coordinator is away";

  // Back on the same port, with another task failed. The channel may still be between its own
  // reconnect attempts (real time), so step through the back-offs until a poll gets through.
  coordinator = std::make_unique<Coordinator>(coordinator_clock_, port);
  coordinator->FailSilently(0, 2);
  ASSERT_TRUE(Eventually(
      [&] {
        if (ShowsFailed("ns/a", 0)) return true;
        const std::vector<absl::Time> pending = clock_.PendingDeadlines();
        if (!pending.empty()) clock_.Advance(pending.front() - clock_.Now());
        return false;
      },
      kWait));
  // Last heard of when it registered, before FailSilently's wait.
  const absl::Time registered = coordinator_clock_.Now() - kHeartbeatTimeout - absl::Seconds(1);
  EXPECT_THAT(link_.FailedTasks("ns/a"),
              ElementsAre(std::pair(
                  0, CoordinatorLink::FailedTask{2, "no session opened within 3s", registered})));

  // An answer resets the back-off: the next outage starts again at 1 s.
  coordinator.reset();
  ASSERT_TRUE(BacksOffUntil({clock_.Now() + absl::Seconds(1)}));
}

TEST_F(CoordinatorLinkTest, RecreatedCoordinatorPod_GetsAFreshChannel_PolledWithoutBackoff) {
  auto coordinator = std::make_unique<Coordinator>(coordinator_clock_);
  const int port = coordinator->port();
  const std::string address = coordinator->address();  // e.g. a Service name: it stays
  link_.Ensure("ns/a", address, kToken, "uid-1");
  coordinator->FailSilently(1, 1);
  ASSERT_TRUE(Eventually([&] { return ShowsFailed("ns/a", 1); }, kWait));
  coordinator.reset();
  ASSERT_TRUE(BacksOffUntil({clock_.Now() + absl::Seconds(1)}));

  // The new pod (new UID) listens at the same address; the link's clock never moves.
  coordinator = std::make_unique<Coordinator>(coordinator_clock_, port);
  coordinator->FailSilently(3, 5);
  link_.Ensure("ns/a", address, kToken, "uid-2");
  ASSERT_TRUE(Eventually([&] { return ShowsFailed("ns/a", 3); }, kWait));
  EXPECT_EQ(link_.FailedTasks("ns/a").at(3).incarnation, 5);
  EXPECT_TRUE(clock_.PendingDeadlines().empty()) << "the old watch's back-off went with it";
}

TEST_F(CoordinatorLinkTest, Forget_EndsThePollAtOnce) {
  Coordinator coordinator(coordinator_clock_);
  link_.Ensure("ns/a", coordinator.address(), kToken, "uid-1");
  coordinator.FailSilently(1, 1);
  ASSERT_TRUE(Eventually([&] { return ShowsFailed("ns/a", 1); }, kWait));
  // A long poll is in flight that the coordinator will not answer (its clock does not move),
  // for 35 s of real time until gRPC's deadline; Forget cancels it and returns.
  std::atomic<bool> forgotten{false};
  std::thread forget([&] {
    link_.Forget("ns/a");
    forgotten = true;
  });
  EXPECT_TRUE(Eventually([&] { return forgotten.load(); }, absl::Seconds(10)));
  forget.join();
  EXPECT_TRUE(link_.FailedTasks("ns/a").empty());
  EXPECT_THAT(link_.NotifyPreemption("ns/a", {0}, absl::InfiniteFuture(), "x"),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(CoordinatorLinkTest, ManyJobs_ShareAFewThreads_AndStopEndsEveryPoll) {
  Coordinator coordinator(coordinator_clock_);
  auto link = std::make_unique<CoordinatorLink>(clock_, [](const std::string&) {});
  auto shows_failed = [&](const std::string& key) { return link->FailedTasks(key).contains(1); };
  // Warm up: gRPC starts its shared threads with the first calls.
  link->Ensure("ns/warm", coordinator.address(), kToken, "uid");
  coordinator.FailSilently(1, 1);
  ASSERT_TRUE(Eventually([&] { return shows_failed("ns/warm"); }, kWait));
  const int before = ThreadsInThisProcess();

  constexpr int kJobs = 200;
  auto key = [](int i) { return absl::StrCat("ns/job-", i); };
  for (int i = 0; i < kJobs; ++i) link->Ensure(key(i), coordinator.address(), kToken, "uid");
  // Every job's poll has been answered (each on its own channel) and is polling again.
  ASSERT_TRUE(Eventually(
      [&] {
        for (int i = 0; i < kJobs; ++i) {
          if (!shows_failed(key(i))) return false;
        }
        return true;
      },
      kWait));
  const int with_jobs = ThreadsInThisProcess();
  RecordProperty("threads_with_1_job", before);
  RecordProperty("threads_with_201_jobs", with_jobs);
  EXPECT_LT(with_jobs - before, 32) << before << " threads with 1 job, " << with_jobs << " with "
                                    << kJobs + 1 << ": no thread per job";

  // Stopping the link cancels every long poll (the coordinator would answer none of them).
  std::atomic<bool> stopped{false};
  std::thread stop([&] {
    link.reset();
    stopped = true;
  });
  EXPECT_TRUE(Eventually([&] { return stopped.load(); }, absl::Seconds(10)));
  stop.join();
}

}  // namespace
}  // namespace phalanx::op
