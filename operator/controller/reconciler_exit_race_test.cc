// The exit-code race through the Reconciler, with a CoordinatorLink to a real coordinator
// (service and gRPC server on 127.0.0.1) and the in-memory API server: the coordinator declares
// task 0 failed while its pod still looks Running; the operator keeps the pod and waits for its
// exit status (AwaitingExit, in status so a new operator continues the wait); the pod's
// OOMKilled, which the policy calls fatal, then fails the job.
#include <memory>

#include "common/auth/credentials.h"
#include "operator/controller/coordinator_link.h"
#include "operator/controller/reconciler.h"
#include "operator/controller/reconciler_testing.h"
#include "operator/controller/task_state.h"
#include "prometheus/registry.h"
#include "runtime/coordination/coordinator_server.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/service.h"

namespace phalanx::op {
namespace {

class ExitRaceReconcilerTest : public ReconcilerTest {
 protected:
  void StartCoordinator() {
    coord::CoordinationService::Options options;
    // A constructed string, not `options.job = "j"`: assigning the literal here trips GCC 12's
    // false -Wrestrict (GCC bug 105329).
    options.job = std::string("j");
    options.num_tasks = 2;
    service_ = *coord::CoordinationService::Create(options, clock_, metrics_);
    const std::string token = auth::JobToken("", "ns", "j", kube::MetaString(Stored(), "uid"));
    auto server =
        coord::CoordinatorServer::Start({"127.0.0.1:0", token}, *service_, metrics_, clock_);
    ASSERT_THAT(server, IsOk());
    server_ = *std::move(server);
  }
  void TearDown() override {
    if (service_ != nullptr) service_->Stop();
    if (server_ != nullptr) server_->Shutdown(absl::Milliseconds(100));
  }

  prometheus::Registry registry_;
  coord::CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<coord::CoordinationService> service_;
  std::unique_ptr<coord::CoordinatorServer> server_;
};

TEST_F(ExitRaceReconcilerTest, ACoordinatorReportAheadOfThePod_WaitsForItsOOMKilled) {
  Json job = Stored();
  job["spec"]["failurePolicy"] = Json::parse(R"({"fatalReasons":["OOMKilled"]})");
  ASSERT_THAT(store_.Update(kTrainingJobs.Qualified(), "ns", job, false).status(), IsOk());
  StartCoordinator();
  CoordinatorLink link(clock_, [](const std::string&) {});
  ReconcilerOptions options;
  options.placement.port = server_->port();
  options.placement.address_by_pod_ip = true;
  auto reconciler =
      std::make_unique<Reconciler>(client_, Informers{jobs_, pods_, services_, nodes_}, events_,
                                   clock_, nullptr, options, &link);
  auto pass = [&]() -> absl::Duration {
    absl::StatusOr<kube::Controller::Result> result = reconciler->Reconcile("ns/j");
    EXPECT_THAT(result.status(), IsOk());
    CatchUp();
    return result.ok() ? result->requeue_after : absl::ZeroDuration();
  };
  CatchUp();
  pass();
  SetPod("j-coordinator", "Running", {}, "127.0.0.1");
  CatchUp();
  pass();
  // Task pods once the coordinator has answered the link with the job's token.
  ASSERT_TRUE(Eventually([&] { return link.RolledBackWork("ns/j").has_value(); }, kWait));
  pass();
  SetPod("j-task-0-0", "Running");
  SetPod("j-task-1-0", "Running");
  CatchUp();
  pass();
  ASSERT_EQ(DecodeStatus(Stored()).phase, kPhaseRunning);

  // Task 0 registers, then reports an error: the coordinator declares it failed at once.
  ASSERT_THAT(service_->Register({0, 0}).status(), IsOk());
  ASSERT_THAT(service_->ReportError({0, 0}, "CUDA error: out of memory"), IsOk());
  ASSERT_TRUE(Eventually([&] { return link.FailedTasks("ns/j").contains(0); }, kWait));

  clock_.Advance(absl::Seconds(1));
  const absl::Time reported = clock_.Now();
  EXPECT_EQ(pass(), kExitStatusWait);
  TrainingJobStatus status = DecodeStatus(Stored());
  EXPECT_EQ(status.tasks[0].state, TaskState::kAwaitingExit);
  EXPECT_EQ(status.tasks[0].failure_reported_at, reported);
  EXPECT_EQ(status.restarts, 0);
  EXPECT_THAT(PodNames(), ::testing::Contains("j-task-0-0"));  // not deleted meanwhile
  EXPECT_THAT(EventReasons(), ::testing::Not(::testing::Contains("TaskRestarted")));

  // The operator restarts (a new Reconciler) and the pod's status arrives 2 s later: OOMKilled.
  reconciler = std::make_unique<Reconciler>(client_, Informers{jobs_, pods_, services_, nodes_},
                                            events_, clock_, nullptr, options, &link);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(pass(), kExitStatusWait - absl::Seconds(1));  // the wait is not started again
  Json pod = *store_.Get(kPods.Qualified(), "ns", "j-task-0-0");
  pod["status"]["phase"] = Json::string("Failed");
  pod["status"]["containerStatuses"] =
      Json::parse(R"([{"name":"w","state":{"terminated":{"exitCode":137,"reason":"OOMKilled"}}}])");
  ASSERT_THAT(store_.Update(kPods.Qualified(), "ns", pod, false).status(), IsOk());
  CatchUp();
  clock_.Advance(absl::Seconds(1));
  pass();
  status = DecodeStatus(Stored());
  EXPECT_EQ(status.phase, kPhaseFailed);
  EXPECT_EQ(FindCondition(status.conditions, "Failed")->reason, "FatalFailure");
  EXPECT_EQ(status.tasks[0].last_failure_reason, "OOMKilled");
  EXPECT_EQ(status.tasks[0].last_exit_code, 137);
  // The pod wrote no termination message: the coordinator's words stand in for it.
  EXPECT_THAT(status.tasks[0].last_failure_message, ::testing::HasSubstr("CUDA error"));
  EXPECT_THAT(EventReasons(), ::testing::Contains("FatalFailure"));
}

}  // namespace
}  // namespace phalanx::op
