// Issue 16 item 3: the Reconciler with a CoordinatorLink to a real coordinator (service and
// gRPC server on 127.0.0.1): a preemption round survives the coordinator's restart.
#include <memory>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "common/auth/credentials.h"
#include "operator/controller/coordinator_link.h"
#include "operator/controller/reconciler.h"
#include "operator/controller/reconciler_testing.h"
#include "prometheus/registry.h"
#include "runtime/coordination/coordinator_server.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/service.h"

namespace phalanx::op {
namespace {

// A job's coordinator (the service and its gRPC server on 127.0.0.1) whose rounds a test can
// see; destroying it is the coordinator process dying with everything it knew.
class Coordinator {
 public:
  Coordinator(base::Clock& clock, const std::string& token, int port) {
    coord::CoordinationService::Options options;
    // Constructed, not a literal assigned: GCC 12's -Wrestrict false positive (GCC bug 105329).
    options.job = std::string("j");
    options.num_tasks = 2;
    service_ = *coord::CoordinationService::Create(options, clock, metrics_);
    auto server = coord::CoordinatorServer::Start({absl::StrCat("127.0.0.1:", port), token},
                                                  *service_, metrics_, clock);
    EXPECT_THAT(server, IsOk());
    server_ = *std::move(server);
  }
  ~Coordinator() {
    service_->Stop();
    server_->Shutdown(absl::Milliseconds(100));
  }
  int port() const { return server_->port(); }
  // Whether a preemption round is open (a probe notice joins it rather than opening one).
  bool RoundOpen() {
    auto joined = service_->NotifyPreemption(
        {.reason = "probe", .deadline = absl::InfiniteFuture(), .affected_tasks = {1}});
    return joined.ok() && joined->second;
  }

 private:
  prometheus::Registry registry_;
  coord::CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<coord::CoordinationService> service_;
  std::unique_ptr<coord::CoordinatorServer> server_;
};

// Issue 16 item 3: the coordinator dies right after the operator opened a preemption round on
// it. Its replacement (a new coordinator pod, same address) must get the round too; the
// operator does not count the old coordinator's acknowledgement for the new one. And the job's
// Events say a round was opened only once a coordinator accepted it.
TEST_F(ReconcilerTest, ARestartedCoordinatorGetsTheOpenPreemptionRoundAgain) {
  CatchUp();
  // The job token the operator derives (its key is empty in these tests).
  const std::string kToken = auth::JobToken("", "ns", "j", kube::MetaString(Stored(), "uid"));
  auto coordinator = std::make_unique<Coordinator>(clock_, kToken, 0);
  const int port = coordinator->port();
  CoordinatorLink link(clock_, [](const std::string&) {});
  ReconcilerOptions options;
  options.placement.port = port;
  options.placement.address_by_pod_ip = true;
  Reconciler reconciler(client_, {jobs_, pods_, services_, nodes_}, events_, clock_, nullptr,
                        options, &link);
  auto pass = [&] {
    ASSERT_THAT(reconciler.Reconcile("ns/j").status(), IsOk());
    CatchUp();
  };
  CatchUp();
  pass();
  SetPod("j-coordinator", "Running", {}, "127.0.0.1");
  CatchUp();
  pass();  // the coordinator's address is known: the link asks it
  ASSERT_TRUE(Eventually([&] { return link.RolledBackWork("ns/j").has_value(); }, kWait));
  pass();  // it answered with the job's token: the task pods
  SetPod("j-task-0-0", "Running");
  SetPod("j-task-1-0", "Running");
  CatchUp();
  pass();
  ASSERT_EQ(DecodeStatus(Stored()).phase, kPhaseRunning);

  // Task 0's pod is disrupted: the operator opens a round on the coordinator.
  Json pod = *store_.Get(kPods.Qualified(), "ns", "j-task-0-0");
  pod["status"]["conditions"][1] = Json::parse(R"({"type":"DisruptionTarget","status":"True"})");
  ASSERT_THAT(store_.Update(kPods.Qualified(), "ns", pod, false).status(), IsOk());
  CatchUp();
  clock_.Advance(absl::Seconds(1));
  pass();
  EXPECT_EQ(DecodeStatus(Stored()).tasks[0].state, TaskState::kPreempting);
  EXPECT_TRUE(coordinator->RoundOpen());
  EXPECT_THAT(EventReasons(), ::testing::Contains("CheckpointRoundOpened"));

  // The coordinator dies with its round; its pod is replaced by a new one at the same address.
  coordinator.reset();
  coordinator = std::make_unique<Coordinator>(clock_, kToken, port);
  ASSERT_THAT(store_.Delete(kPods.Qualified(), "ns", "j-coordinator").status(), IsOk());
  CatchUp();
  clock_.Advance(absl::Seconds(1));
  ASSERT_THAT(reconciler.Reconcile("ns/j").status(), IsOk());  // recreates the coordinator pod
  CatchUp();
  SetPod("j-coordinator", "Running", {}, "127.0.0.1");
  CatchUp();
  clock_.Advance(absl::Seconds(1));
  pass();
  EXPECT_TRUE(coordinator->RoundOpen()) << "the new coordinator never got the open round";
}

// Issue 30 item 8: a coordinator that does not answer with the job's token (one started with a
// squatted Secret's token refuses the operator's) gets no task pods: they would mount that
// Secret's credentials. Once the job's own coordinator answers, the link wakes the job and the
// task pods are created.
TEST_F(ReconcilerTest, TaskPodsWaitForTheCoordinatorToAnswerWithTheJobsToken) {
  CatchUp();
  const std::string kToken = auth::JobToken("", "ns", "j", kube::MetaString(Stored(), "uid"));
  auto coordinator = std::make_unique<Coordinator>(clock_, "a-squatters-token", 0);
  const int port = coordinator->port();
  absl::Mutex mu;
  int wakes = 0;
  CoordinatorLink link(clock_, [&](const std::string&) {
    absl::MutexLock lock(&mu);
    ++wakes;
  });
  ReconcilerOptions options;
  options.placement.port = port;
  options.placement.address_by_pod_ip = true;
  Reconciler reconciler(client_, {jobs_, pods_, services_, nodes_}, events_, clock_, nullptr,
                        options, &link);
  auto pass = [&] {
    ASSERT_THAT(reconciler.Reconcile("ns/j").status(), IsOk());
    CatchUp();
  };
  auto task_pods = [&] {
    int n = 0;
    for (const std::string& pod : PodNames()) n += absl::StrContains(pod, "-task-");
    return n;
  };
  CatchUp();
  pass();
  SetPod("j-coordinator", "Running", {}, "127.0.0.1");
  CatchUp();
  for (int i = 0; i < 3; ++i) {
    pass();
    clock_.Advance(absl::Seconds(2));  // the link's retries
  }
  EXPECT_EQ(task_pods(), 0) << "task pods for a coordinator that refused the job's token";
  EXPECT_FALSE(link.RolledBackWork("ns/j").has_value());

  // The job's own coordinator: the link's next try gets an answer, which wakes the job.
  coordinator.reset();
  coordinator = std::make_unique<Coordinator>(clock_, kToken, port);
  ASSERT_TRUE(Eventually(
      [&] {
        clock_.Advance(absl::Seconds(1));
        return link.RolledBackWork("ns/j").has_value();
      },
      kWait));
  {
    absl::MutexLock lock(&mu);
    EXPECT_GT(wakes, 0);
  }
  pass();
  EXPECT_EQ(task_pods(), 2);
}

}  // namespace
}  // namespace phalanx::op
