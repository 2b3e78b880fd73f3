// The Reconciler over the local cluster's FakeClient (an in-memory API server with fault
// injection): what the API server refuses shows on the TrainingJob (issue 11, item 8) —
// ChildrenReady=False with the server's message, a FailedCreate Event, phase Blocked for a
// permanent refusal — and the job recovers by itself once the create works. Informers run on
// their own threads, so the test waits (bounded) for their caches to catch up between passes.
#include "operator/controller/reconciler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/auth/credentials.h"
#include "common/auth/tls_issuer.h"
#include "common/kube/object_meta.h"
#include "common/kube/testing/fake_client.h"
#include "common/kube/testing/object_store.h"
#include "common/testing/eventually.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "operator/api/codec.h"
#include "operator/controller/children.h"
#include "operator/controller/reconciler_testing.h"

namespace phalanx::op {
namespace {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST_F(ReconcilerTest, ARefusedChildShowsOnTheJobAndTheJobRecovers) {
  CatchUp();
  ASSERT_THAT(reconciler_.Reconcile("ns/j").status(), IsOk());
  CatchUp();
  EXPECT_EQ(DecodeStatus(Stored()).phase, kPhasePending);
  EXPECT_EQ(FindCondition(DecodeStatus(Stored()).conditions, kConditionChildrenReady)->status,
            "True");
  // A pass with nothing to do writes nothing.
  const std::string settled = kube::MetaString(Stored(), "resourceVersion");
  ASSERT_THAT(reconciler_.Reconcile("ns/j").status(), IsOk());
  EXPECT_EQ(kube::MetaString(Stored(), "resourceVersion"), settled);

  // The coordinator pod is gone and the API server refuses its replacement, as PodSecurity
  // does (403).
  ASSERT_THAT(store_.Delete(kPods.Qualified(), "ns", "j-coordinator").status(), IsOk());
  CatchUp();
  const std::string refusal =
      "pods \"j-coordinator\" is forbidden: violates PodSecurity \"restricted:latest\"";
  client_.FailNext(1, absl::PermissionDeniedError(refusal));
  EXPECT_FALSE(reconciler_.Reconcile("ns/j").ok());  // requeued with back-off
  CatchUp();
  TrainingJobStatus status = DecodeStatus(Stored());
  EXPECT_EQ(status.phase, kPhaseBlocked);
  std::optional<Condition> ready = FindCondition(status.conditions, kConditionChildrenReady);
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(ready->status, "False");
  EXPECT_EQ(ready->reason, kReasonFailedCreate);
  EXPECT_THAT(ready->message, HasSubstr(refusal));
  EXPECT_THAT(EventReasons(), ::testing::Contains(kReasonFailedCreate));

  // The same refusal again changes nothing on the job (no write, so no watch event).
  const std::string version = kube::MetaString(Stored(), "resourceVersion");
  client_.FailNext(1, absl::PermissionDeniedError(refusal));
  EXPECT_FALSE(reconciler_.Reconcile("ns/j").ok());
  EXPECT_EQ(kube::MetaString(Stored(), "resourceVersion"), version);

  // The cause is gone: the create works, ChildrenReady flips, and the next pass leaves Blocked.
  ASSERT_THAT(reconciler_.Reconcile("ns/j").status(), IsOk());
  CatchUp();
  EXPECT_EQ(FindCondition(DecodeStatus(Stored()).conditions, kConditionChildrenReady)->status,
            "True");
  ASSERT_THAT(reconciler_.Reconcile("ns/j").status(), IsOk());
  CatchUp();
  EXPECT_EQ(DecodeStatus(Stored()).phase, kPhasePending);
}

TEST_F(ReconcilerTest, AnInvalidSpecIsBlockedWithACondition) {
  Json job = Stored();
  job["spec"]["template"]["spec"]["containers"][0].as_object().erase("image");
  ASSERT_THAT(store_.Update(kTrainingJobs.Qualified(), "ns", job, false).status(), IsOk());
  CatchUp();
  ASSERT_THAT(reconciler_.Reconcile("ns/j").status(), IsOk());
  CatchUp();
  TrainingJobStatus status = DecodeStatus(Stored());
  EXPECT_EQ(status.phase, kPhaseBlocked);
  EXPECT_EQ(FindCondition(status.conditions, kConditionInvalidSpec)->message,
            "spec.template.spec.containers[0].image: required");
  EXPECT_THAT(EventReasons(), ::testing::Contains("InvalidSpec"));
  EXPECT_TRUE(pods_.List().empty());
}

// A job's life through the Reconciler: created, Running, a task fails and is replaced by its
// next incarnation alone, Running again, Succeeded. Between the steps an idle pass writes
// nothing (idempotence).
TEST_F(ReconcilerTest, AJobRunsLosesATaskToAFailureAndSucceeds) {
  CatchUp();
  Pass();
  EXPECT_THAT(PodNames(), ElementsAre("j-coordinator", "j-task-0-0", "j-task-1-0"));
  ASSERT_THAT(store_.Get(kSecrets.Qualified(), "ns", "j-token").status(), IsOk());
  ASSERT_TRUE(services_.Get("ns", "j-tasks").has_value());
  ASSERT_TRUE(services_.Get("ns", "j-coordinator").has_value());
  EXPECT_EQ(DecodeStatus(Stored()).phase, kPhasePending);
  ExpectIdlePassWritesNothing();

  for (const char* pod : {"j-coordinator", "j-task-0-0", "j-task-1-0"}) SetPod(pod, "Running");
  CatchUp();
  clock_.Advance(absl::Seconds(5));
  Pass();
  TrainingJobStatus status = DecodeStatus(Stored());
  EXPECT_EQ(status.phase, kPhaseRunning);
  EXPECT_EQ(status.ready_tasks, 2);
  EXPECT_EQ(status.start_time, clock_.Now());
  ASSERT_EQ(status.tasks.size(), 2u);
  EXPECT_EQ(status.tasks[1].state, TaskState::kRunning);
  ExpectIdlePassWritesNothing();

  // Task 1's process exits with code 1: only it is replaced, as incarnation 1.
  SetPod("j-task-1-0", "Failed", 1);
  CatchUp();
  clock_.Advance(absl::Seconds(5));
  Pass();
  // Its failed pod stays for its logs (failurePolicy.keepFailedPods).
  EXPECT_THAT(PodNames(), ElementsAre("j-coordinator", "j-task-0-0", "j-task-1-0", "j-task-1-1"));
  status = DecodeStatus(Stored());
  EXPECT_EQ(status.phase, kPhaseRestarting);
  EXPECT_EQ(status.restarts, 1);
  EXPECT_EQ(status.tasks[0].incarnation, 0);
  EXPECT_EQ(status.tasks[1].incarnation, 1);
  EXPECT_EQ(status.tasks[1].state, TaskState::kRestarting);
  EXPECT_EQ(status.tasks[1].last_exit_code, 1);
  EXPECT_EQ(status.tasks[1].last_failure_reason, "Error");
  EXPECT_THAT(EventReasons(), ::testing::Contains("TaskRestarted"));
  const Json replacement = *pods_.Get("ns", "j-task-1-1");
  EXPECT_EQ(kube::LabelsOf(replacement)[kIncarnationLabel], "1");
  EXPECT_THAT(replacement.serialize(), HasSubstr(R"({"name":"PHALANX_INCARNATION","value":"1"})"));

  SetPod("j-task-1-1", "Running");
  CatchUp();
  clock_.Advance(absl::Seconds(5));
  Pass();
  EXPECT_EQ(DecodeStatus(Stored()).phase, kPhaseRunning);
  ExpectIdlePassWritesNothing();

  // Both tasks finish: the job succeeded and its coordinator goes.
  SetPod("j-task-0-0", "Succeeded", 0);
  SetPod("j-task-1-1", "Succeeded", 0);
  CatchUp();
  clock_.Advance(absl::Seconds(5));
  Pass();
  status = DecodeStatus(Stored());
  EXPECT_EQ(status.phase, kPhaseSucceeded);
  EXPECT_EQ(status.completion_time, clock_.Now());
  EXPECT_EQ(status.restarts, 1);
  EXPECT_EQ(FindCondition(status.conditions, "Succeeded")->status, "True");
  EXPECT_THAT(PodNames(), ElementsAre("j-task-0-0", "j-task-1-0", "j-task-1-1"));
  EXPECT_EQ(status.tasks[1].state, TaskState::kSucceeded);
  EXPECT_EQ(FindCondition(status.conditions, "Suspended")->reason, "NotSuspended");
  EXPECT_THAT(EventReasons(), ::testing::Contains("Completed"));
  ExpectIdlePassWritesNothing();
}

// ADR 0006: the first pods' credentials are bound to incarnation 0, in the job's Secret; a
// replacement gets its own Secret, bound to its incarnation and owned by the pod; and an operator
// that restarted between a replacement's create and its Secret's writes the Secret again.
TEST_F(ReconcilerTest, EachTaskPodsCredentialIsBoundToItsIncarnation) {
  CatchUp();
  Pass();
  const std::string token = auth::JobToken("", "ns", "j", kube::MetaString(Stored(), "uid"));
  EXPECT_EQ(DecodeStatus(Stored()).incarnation_bound_credentials, true);
  const Json job_secret = *store_.Get(kSecrets.Qualified(), "ns", "j-token");
  for (int task : {0, 1}) {
    EXPECT_EQ(job_secret.at("stringData").at(TaskCredentialKey(task)).as_string(),
              auth::TaskCredential(token, task, 0, 0));
    EXPECT_FALSE(store_.Get(kSecrets.Qualified(), "ns", absl::StrCat("j-task-", task, "-0")).ok());
  }
  ExpectIdlePassWritesNothing();

  // Task 1's replacement, incarnation 1, gets its own Secret with a credential for 1 only.
  for (const char* pod : {"j-coordinator", "j-task-0-0", "j-task-1-0"}) SetPod(pod, "Running");
  CatchUp();
  clock_.Advance(absl::Seconds(5));
  Pass();
  SetPod("j-task-1-0", "Failed", 1);
  CatchUp();
  clock_.Advance(absl::Seconds(5));
  Pass();
  absl::StatusOr<Json> replacement = store_.Get(kSecrets.Qualified(), "ns", "j-task-1-1");
  ASSERT_THAT(replacement.status(), IsOk());
  EXPECT_EQ(replacement->at("stringData").at("token").as_string(),
            auth::TaskCredential(token, 1, 1, 1));
  EXPECT_EQ(replacement->at("metadata").at("ownerReferences").at(0).at("uid").as_string(),
            kube::MetaString(*pods_.Get("ns", "j-task-1-1"), "uid"));
  EXPECT_THAT(pods_.Get("ns", "j-task-1-1")->serialize(),
              HasSubstr(R"("secretName":"j-task-1-1")"));

  // The operator restarts after creating the pod but before its Secret: a new reconciler writes
  // the Secret of every replacement that has not started, once.
  ASSERT_THAT(store_.Delete(kSecrets.Qualified(), "ns", "j-task-1-1").status(), IsOk());
  CatchUp();
  Reconciler restarted(client_, {jobs_, pods_, services_, nodes_}, events_, clock_, nullptr,
                       ReconcilerOptions{});
  ASSERT_THAT(restarted.Reconcile("ns/j").status(), IsOk());
  CatchUp();
  EXPECT_THAT(store_.Get(kSecrets.Qualified(), "ns", "j-task-1-1").status(), IsOk());
  // A started pod's Secret is not written again (it has it, or it could not have started).
  SetPod("j-task-1-1", "Running");
  ASSERT_THAT(store_.Delete(kSecrets.Qualified(), "ns", "j-task-1-1").status(), IsOk());
  CatchUp();
  Reconciler restarted_again(client_, {jobs_, pods_, services_, nodes_}, events_, clock_, nullptr,
                             ReconcilerOptions{});
  ASSERT_THAT(restarted_again.Reconcile("ns/j").status(), IsOk());
  CatchUp();
  EXPECT_FALSE(store_.Get(kSecrets.Qualified(), "ns", "j-task-1-1").ok());
}

// Another writer got there first (409 on the status write): the pass ends with Aborted, which
// the controller requeues quietly (kube::Controller), having acted on nothing; the next pass,
// on the newer job, does the work once.
TEST_F(ReconcilerTest, AConflictEndsThePassWithoutActingAndTheNextPassConverges) {
  CatchUp();
  client_.FailNext(
      1, absl::AbortedError("Operation cannot be fulfilled on trainingjobs.phalanx.dev \"j\": the "
                            "object has been modified; please apply your changes to the latest "
                            "version and try again"));
  const absl::Status conflicted = reconciler_.Reconcile("ns/j").status();
  EXPECT_TRUE(absl::IsAborted(conflicted)) << conflicted;
  EXPECT_TRUE(PodNames().empty());  // status is written first: nothing was created
  EXPECT_TRUE(EventReasons().empty());
  EXPECT_EQ(DecodeStatus(Stored()).observed_generation, 0);

  Pass();
  EXPECT_THAT(PodNames(), ElementsAre("j-coordinator", "j-task-0-0", "j-task-1-0"));
  EXPECT_EQ(DecodeStatus(Stored()).restarts, 0);
  ExpectIdlePassWritesNothing();
}

// A pod named like task 1's, which the job does not control (a squatter, here with the job's
// labels so the caches see it): never adopted. The job shows the conflict (ChildrenReady=False,
// ChildConflict, a Warning Event), task 1 does not run against it, and once it is gone the
// job's own pod is created.
TEST_F(ReconcilerTest, ASquattingTaskPodIsNeverAdopted) {
  Json squatter = Json::parse(R"({"apiVersion":"v1","kind":"Pod",
      "metadata":{"name":"j-task-1-0","namespace":"ns",
                  "labels":{"phalanx.dev/job":"j","phalanx.dev/role":"task",
                            "phalanx.dev/task":"1","phalanx.dev/incarnation":"0"}},
      "spec":{"containers":[{"name":"x","image":"attacker.example/x:1"}]}})");
  ASSERT_THAT(store_.Create(kPods.Qualified(), "ns", squatter).status(), IsOk());
  CatchUp();
  TrainingJobStatus status = PassMeetsAChildConflict({"j-task-1-0", "no controller"});
  EXPECT_FALSE(kube::ControllerOf(*store_.Get(kPods.Qualified(), "ns", "j-task-1-0")).has_value());

  // The squatter "runs": it is not task 1, so the job is not Running.
  for (const char* pod : {"j-coordinator", "j-task-0-0", "j-task-1-0"}) SetPod(pod, "Running");
  CatchUp();
  EXPECT_FALSE(reconciler_.Reconcile("ns/j").ok());
  CatchUp();
  status = DecodeStatus(Stored());
  EXPECT_NE(status.phase, kPhaseRunning);
  EXPECT_EQ(status.ready_tasks, 1);
  EXPECT_NE(status.tasks[1].state, TaskState::kRunning);

  ASSERT_THAT(store_.Delete(kPods.Qualified(), "ns", "j-task-1-0").status(), IsOk());
  CatchUp();
  Pass();
  const std::optional<kube::OwnerReference> owner =
      kube::ControllerOf(*store_.Get(kPods.Qualified(), "ns", "j-task-1-0"));
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->uid, kube::MetaString(Stored(), "uid"));
  EXPECT_EQ(FindCondition(DecodeStatus(Stored()).conditions, kConditionChildrenReady)->status,
            "True");
}

// Issue 16 item 5: in port-hash mode (pods share one network namespace, as on the local
// cluster) two jobs whose UIDs hash to the same slot got the same coordinator port, and the
// second coordinator exited 2 at start ("cannot listen") however often it was recreated. The
// second job's coordinator now gets a port no other coordinator pod holds, and keeps it.
TEST_F(ReconcilerTest, TwoJobsWhoseUidsShareAPortSlotGetDifferentCoordinatorPorts) {
  ReconcilerOptions options;
  options.coordinator_port_base = 20000;
  options.coordinator_port_span = 4;  // two slots: of three jobs, two share one
  Reconciler reconciler(client_, {jobs_, pods_, services_, nodes_}, events_, clock_, nullptr,
                        options);
  std::map<size_t, std::vector<std::string>> by_slot;
  by_slot[std::hash<std::string>{}(kube::MetaString(Stored(), "uid")) % 2].push_back("j");
  for (const char* name : {"a", "b"}) {
    Json job = Stored();
    job["metadata"] = Json::parse(absl::StrCat(R"({"name":")", name, R"(","namespace":"ns"})"));
    if (job.has_field("status")) job.as_object().erase("status");
    absl::StatusOr<Json> created = store_.Create(kTrainingJobs.Qualified(), "ns", job);
    ASSERT_THAT(created.status(), IsOk());
    by_slot[std::hash<std::string>{}(kube::MetaString(*created, "uid")) % 2].push_back(name);
  }
  const std::vector<std::string>& same =
      by_slot.begin()->second.size() >= 2 ? by_slot.begin()->second : by_slot.rbegin()->second;
  ASSERT_GE(same.size(), 2u);
  std::set<int> ports;
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(Eventually([&] { return jobs_.Get("ns", same[i]).has_value(); }, kWait));
    ASSERT_THAT(reconciler.Reconcile("ns/" + same[i]).status(), IsOk());
    ASSERT_TRUE(
        Eventually([&] { return pods_.Get("ns", same[i] + "-coordinator").has_value(); }, kWait));
    const Json pod = *store_.Get(kPods.Qualified(), "ns", same[i] + "-coordinator");
    ports.insert(ViewOfPod(pod).grpc_port);
  }
  EXPECT_EQ(ports.size(), 2u) << ::testing::PrintToString(ports);
  // A later pass keeps each job's port (its tasks were told it). Each pass starts from caches
  // that hold the previous pass's writes: a pass on a cache that has not seen the job's own
  // status write yet is refused with a conflict (Aborted), as on a real API server.
  const Json before = *store_.Get(kPods.Qualified(), "ns", same[1] + "-coordinator");
  for (int pass = 0; pass < 2; ++pass) {
    CatchUp();
    ASSERT_THAT(reconciler.Reconcile("ns/" + same[1]).status(), IsOk());
  }
  EXPECT_EQ(ViewOfPod(*store_.Get(kPods.Qualified(), "ns", same[1] + "-coordinator")).grpc_port,
            ViewOfPod(before).grpc_port);
  const Json task = *store_.Get(kPods.Qualified(), "ns", same[1] + "-task-0-0");
  EXPECT_THAT(task.serialize(), HasSubstr(absl::StrCat(".svc:", ViewOfPod(before).grpc_port)));
}

// A Secret named <job>-token that the job does not control (chosen by an attacker, or left by
// an earlier job of the same name) is never read, adopted or overwritten: the operator has no
// right to read Secrets (ADR 0003). It is never used either: the coordinator pod is told the
// SHA-256 of the job's real token (derived from the operator key) and refuses any other.
TEST_F(ReconcilerTest, ASquattingSecretIsNeverAdoptedAndTheCoordinatorKnowsTheRealToken) {
  Json squatter = Json::parse(
      R"({"apiVersion":"v1","kind":"Secret","metadata":{"name":"j-token","namespace":"ns",
          "labels":{"phalanx.dev/job":"j"}},"data":{"token":"YXR0YWNrZXI="}})");
  ASSERT_THAT(store_.Create(kSecrets.Qualified(), "ns", squatter).status(), IsOk());
  CatchUp();
  Pass();
  const Json secret = *store_.Get(kSecrets.Qualified(), "ns", "j-token");
  EXPECT_FALSE(kube::ControllerOf(secret).has_value());             // not adopted
  EXPECT_EQ(kube::StringAt(secret, "data.token"), "YXR0YWNrZXI=");  // not overwritten
  const std::string token = auth::JobToken("", "ns", "j", kube::MetaString(Stored(), "uid"));
  const std::string coordinator = store_.Get(kPods.Qualified(), "ns", "j-coordinator")->serialize();
  EXPECT_THAT(coordinator, HasSubstr("--token_sha256=" + auth::Sha256Hex(token)));
  EXPECT_THAT(coordinator, ::testing::Not(HasSubstr(auth::Sha256Hex("attacker"))));
  // The job's NetworkPolicy was created with its coordinator.
  EXPECT_THAT(store_.Get(kNetworkPolicies.Qualified(), "ns", "j-coordinator").status(), IsOk());

  // The coordinator reads the squatter's token and refuses it (its exit code says so): the
  // operator, which may not read the Secret, reports the conflict on it like any other squatter.
  SetPod("j-coordinator", "Failed", auth::kExitTokenMismatch);
  CatchUp();
  const TrainingJobStatus status = PassMeetsAChildConflict({"Secret j-token", "Delete it"});
  EXPECT_EQ(status.coordinator.last_exit_code, auth::kExitTokenMismatch);
  // While the coordinator backs off (it is gone, none runs) the conflict stays on the job.
  EXPECT_FALSE(store_.Get(kPods.Qualified(), "ns", "j-coordinator").ok());
  EXPECT_TRUE(absl::IsAlreadyExists(reconciler_.Reconcile("ns/j").status()));
  CatchUp();
  // While the refusal stands the job is Blocked, not Running, and no task pod is created to
  // mount the squatter's token: not even a replacement for a task that failed (the pods made
  // before the refusal was known stay).
  EXPECT_EQ(DecodeStatus(Stored()).phase, kPhaseBlocked);
  const std::vector<std::string> pods_at_refusal = PodNames();
  SetPod("j-task-0-0", "Failed", 1);
  CatchUp();
  EXPECT_TRUE(absl::IsAlreadyExists(reconciler_.Reconcile("ns/j").status()));
  CatchUp();
  EXPECT_EQ(DecodeStatus(Stored()).phase, kPhaseBlocked);
  for (const std::string& pod : PodNames()) {
    EXPECT_TRUE(absl::c_linear_search(pods_at_refusal, pod))
        << pod << " was created while the Secret is not the operator's";
  }

  // The user deletes the squatter: the operator writes its own Secret and a new coordinator,
  // which starts; the conflict clears.
  ASSERT_THAT(store_.Delete(kSecrets.Qualified(), "ns", "j-token").status(), IsOk());
  clock_.Advance(kCoordinatorMaxBackoff);
  CatchUp();
  Pass();
  const Json ours = *store_.Get(kSecrets.Qualified(), "ns", "j-token");
  ASSERT_TRUE(kube::ControllerOf(ours).has_value());
  EXPECT_EQ(kube::ControllerOf(ours)->uid, kube::MetaString(Stored(), "uid"));
  SetPod("j-coordinator", "Running");
  CatchUp();
  Pass();
  const std::optional<Condition> ready =
      FindCondition(DecodeStatus(Stored()).conditions, kConditionChildrenReady);
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(ready->status, "True");
  EXPECT_NE(DecodeStatus(Stored()).phase, kPhaseBlocked);
  EXPECT_THAT(PodNames(), ::testing::Contains(HasSubstr("-task-")));
}

// A Service named like the coordinator's that the job does not control would receive the tasks'
// traffic: it is a conflict, and no pod is created until it is gone.
TEST_F(ReconcilerTest, ASquattingCoordinatorServiceStopsPodCreationUntilItIsGone) {
  Json squatter = Json::parse(R"({"apiVersion":"v1","kind":"Service",
      "metadata":{"name":"j-coordinator","namespace":"ns"},
      "spec":{"ports":[{"name":"grpc","port":8470}]}})");
  ASSERT_THAT(store_.Create(kServices.Qualified(), "ns", squatter).status(), IsOk());
  CatchUp();
  const absl::Status conflicted = reconciler_.Reconcile("ns/j").status();
  EXPECT_TRUE(absl::IsAlreadyExists(conflicted)) << conflicted;
  CatchUp();
  EXPECT_TRUE(PodNames().empty());
  EXPECT_EQ(FindCondition(DecodeStatus(Stored()).conditions, kConditionChildrenReady)->reason,
            kReasonChildConflict);
  EXPECT_THAT(EventReasons(), ::testing::Contains(kReasonChildConflict));
  ASSERT_THAT(store_.Delete(kServices.Qualified(), "ns", "j-coordinator").status(), IsOk());
  CatchUp();
  Pass();
  EXPECT_THAT(PodNames(), ElementsAre("j-coordinator", "j-task-0-0", "j-task-1-0"));
  EXPECT_EQ(kube::ControllerOf(*store_.Get(kServices.Qualified(), "ns", "j-coordinator"))->uid,
            kube::MetaString(Stored(), "uid"));
}

}  // namespace
}  // namespace phalanx::op

namespace phalanx::op {
namespace {

// Issue 31 (3): activeDeadlineSeconds fails the job with DeadlineExceeded, and
// ttlSecondsAfterFinished then deletes it (this uid), with Events that say so.
TEST_F(ReconcilerTest, ADeadlineFailsTheJobAndItsTtlDeletesIt) {
  Json job = Stored();
  job["spec"]["activeDeadlineSeconds"] = Json::number(60);
  job["spec"]["ttlSecondsAfterFinished"] = Json::number(30);
  ASSERT_THAT(store_.Update(kTrainingJobs.Qualified(), "ns", job, false).status(), IsOk());
  CatchUp();
  Pass();
  EXPECT_THAT(PodNames(), ElementsAre("j-coordinator", "j-task-0-0", "j-task-1-0"));

  clock_.Advance(absl::Seconds(60));
  Pass();
  TrainingJobStatus status = DecodeStatus(Stored());
  EXPECT_EQ(status.phase, kPhaseFailed);
  const std::optional<Condition> failed = FindCondition(status.conditions, "Failed");
  ASSERT_TRUE(failed.has_value());
  EXPECT_EQ(failed->reason, "DeadlineExceeded");
  EXPECT_THAT(EventReasons(), ::testing::Contains("DeadlineExceeded"));

  clock_.Advance(absl::Seconds(29));
  Pass();
  ASSERT_THAT(store_.Get(kTrainingJobs.Qualified(), "ns", "j").status(), IsOk()) << "too early";
  clock_.Advance(absl::Seconds(1));
  ASSERT_THAT(reconciler_.Reconcile("ns/j").status(), IsOk());
  EXPECT_TRUE(absl::IsNotFound(store_.Get(kTrainingJobs.Qualified(), "ns", "j").status()));
  EXPECT_THAT(EventReasons(), ::testing::Contains("TTLExpired"));
}

}  // namespace
}  // namespace phalanx::op

namespace phalanx::op {
namespace {

using ::testing::HasSubstr;

double CertificatesIssued(prometheus::Registry& registry) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name == "phalanx_operator_coordinator_certificates_issued_total") {
      return family.metric.at(0).counter.value;
    }
  }
  return -1;
}

// phalanx_operator_replacement_latency_seconds runs from the pass's start to its replacement
// pods created: not through what the pass does after them (a second status write, credentials),
// which made the operator bench's "operator's part" of a replacement larger than the whole.
TEST_F(ReconcilerTest, AReplacementsLatencyEndsWhenItsPodIsCreated) {
  CatchUp();
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  Reconciler reconciler(client_, {jobs_, pods_, services_, nodes_}, events_, clock_, &metrics,
                        ReconcilerOptions{});
  auto pass = [&] {
    ASSERT_THAT(reconciler.Reconcile("ns/j").status(), IsOk());
    CatchUp();
  };
  pass();
  for (const char* pod : {"j-coordinator", "j-task-0-0", "j-task-1-0"}) SetPod(pod, "Running");
  CatchUp();
  pass();
  SetPod("j-task-1-0", "Failed", 1);
  CatchUp();

  // Each API call of the pass takes a second of the operator's clock, the Events it records
  // after its creates included (they go through the fixture's reader_; the informers' polls
  // there are LISTs and WATCHes, which take no time). The reconciler's own calls are logged
  // with the time each ended.
  std::vector<std::pair<std::string, absl::Time>> calls;
  client_.BeforeEachCall([&](std::string_view verb) {
    clock_.Advance(absl::Seconds(1));
    calls.emplace_back(std::string(verb), clock_.Now());
  });
  reader_.BeforeEachCall([&](std::string_view verb) {
    if (verb == "CREATE") clock_.Advance(absl::Seconds(1));
  });
  const absl::Time started = clock_.Now();
  pass();
  client_.BeforeEachCall(nullptr);
  reader_.BeforeEachCall(nullptr);

  ASSERT_TRUE(pods_.Get("ns", "j-task-1-1").has_value());
  auto last_create = std::find_if(calls.rbegin(), calls.rend(),
                                  [](const auto& call) { return call.first == "CREATE"; });
  ASSERT_NE(last_create, calls.rend());
  // Execute's last create (the replacement's pod, then its credential's Secret) ends the
  // latency. The pass went on after it (its TaskRestarted Event): otherwise this test could not
  // tell the two ends apart.
  const absl::Time executed = last_create->second;
  ASSERT_GT(clock_.Now(), executed);
  const prometheus::ClientMetric::Histogram* latency = nullptr;
  std::vector<prometheus::MetricFamily> families = registry.Collect();
  for (const prometheus::MetricFamily& family : families) {
    if (family.name == "phalanx_operator_replacement_latency_seconds") {
      latency = &family.metric.at(0).histogram;
    }
  }
  ASSERT_NE(latency, nullptr);
  EXPECT_EQ(latency->sample_count, 1u);
  EXPECT_DOUBLE_EQ(latency->sample_sum, absl::ToDoubleSeconds(executed - started));
  EXPECT_LT(latency->sample_sum, absl::ToDoubleSeconds(clock_.Now() - started));
}

// A pass that starts from a cached job the operator's own status write has replaced would be
// refused (409): it is skipped without an API call and asks to be requeued (own_status_writes.h;
// on a real API server, 3.4 of a job's 26 requests were such conflicts).
TEST_F(ReconcilerTest, APassFromAJobItsOwnWriteReplacedIsSkippedWithoutACall) {
  CatchUp();
  Pass();
  for (const char* pod : {"j-coordinator", "j-task-0-0", "j-task-1-0"}) SetPod(pod, "Running");
  CatchUp();
  // The job cache stops where it is: as a watch that has not yet delivered the write below.
  jobs_.Stop();
  const std::string cached_version = kube::MetaString(*jobs_.Get("ns", "j"), "resourceVersion");
  ASSERT_THAT(reconciler_.Reconcile("ns/j").status(), IsOk());
  const std::string written_version = kube::MetaString(Stored(), "resourceVersion");
  ASSERT_NE(written_version, cached_version) << "the pass wrote the job's status (Running)";
  EXPECT_EQ(DecodeStatus(Stored()).phase, kPhaseRunning);

  int calls = 0;
  client_.BeforeEachCall([&](std::string_view) { ++calls; });
  absl::StatusOr<kube::Controller::Result> skipped = reconciler_.Reconcile("ns/j");
  client_.BeforeEachCall(nullptr);
  // Without the skip this pass would write Running again from the cached version: Aborted.
  ASSERT_THAT(skipped.status(), IsOk());
  EXPECT_GT(skipped->requeue_after, absl::ZeroDuration());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(kube::MetaString(Stored(), "resourceVersion"), written_version);
}

// The operator's options with TLS on (its default), signing with `ca`.
ReconcilerOptions WithTls(const auth::TlsKeyPair& ca) {
  ReconcilerOptions options;
  options.placement.tls = true;
  options.coordinator_ca = ca;
  return options;
}

// docs/security.md "TLS by default": the job's Secret gets the operator CA's certificate and a
// coordinator certificate issued for the job, once, in the pass that creates it; the coordinator
// serves it, the task pods verify it as the coordinator's Service name.
TEST_F(ReconcilerTest, WithTlsTheSecretGetsACoordinatorCertificateIssuedOnlyWhenItIsCreated) {
  CatchUp();
  absl::StatusOr<auth::TlsKeyPair> ca = auth::MakeCertificateAuthority("ca", absl::Hours(24));
  ASSERT_THAT(ca, IsOk());
  const ReconcilerOptions options = WithTls(*ca);
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  Reconciler reconciler(client_, {jobs_, pods_, services_, nodes_}, events_, clock_, &metrics,
                        options);
  auto pass = [&] {
    ASSERT_THAT(reconciler.Reconcile("ns/j").status(), IsOk());
    CatchUp();
  };
  pass();
  EXPECT_EQ(CertificatesIssued(registry), 1);
  const Json secret = *store_.Get(kSecrets.Qualified(), "ns", "j-token");
  const Json& data = secret.at("stringData");
  EXPECT_EQ(data.at("ca.crt").as_string(), ca->cert_pem);
  const auth::TlsKeyPair leaf{data.at("tls.crt").as_string(), data.at("tls.key").as_string()};
  EXPECT_NE(leaf.key_pem, ca->key_pem);
  // The leaf is the CA's, for the job's coordinator names: it could sign nothing itself.
  EXPECT_THAT(auth::CheckCertificateAuthority(leaf),
              ::phalanx::testing::StatusIs(absl::StatusCode::kInvalidArgument));
  const std::string coordinator = store_.Get(kPods.Qualified(), "ns", "j-coordinator")->serialize();
  EXPECT_THAT(coordinator, HasSubstr("--tls_cert_file=/var/run/phalanx/tls/tls.crt"));
  const std::string task = store_.Get(kPods.Qualified(), "ns", "j-task-0-0")->serialize();
  EXPECT_THAT(task,
              HasSubstr(R"({"name":"PHALANX_TLS_SERVER_NAME","value":"j-coordinator.ns.svc"})"));
  EXPECT_THAT(task, ::testing::Not(HasSubstr("tls.key")));

  // Passes while the coordinator stands issue nothing.
  SetPod("j-coordinator", "Running");
  SetPod("j-task-0-0", "Running");
  CatchUp();
  pass();
  pass();
  EXPECT_EQ(CertificatesIssued(registry), 1);

  // A recreated coordinator: the operator cannot read the Secret, so it tries to create it again
  // (with a fresh certificate, which the API server's AlreadyExists discards); the Secret keeps
  // the certificate it was created with, which the new coordinator pod mounts.
  SetPod("j-coordinator", "Failed", 1);
  CatchUp();
  pass();
  clock_.Advance(kCoordinatorMaxBackoff);
  CatchUp();
  pass();
  EXPECT_THAT(store_.Get(kPods.Qualified(), "ns", "j-coordinator").status(), IsOk());
  EXPECT_EQ(CertificatesIssued(registry), 2);
  EXPECT_EQ(store_.Get(kSecrets.Qualified(), "ns", "j-token")->at("stringData").at("tls.crt"),
            Json::string(leaf.cert_pem));
}

// --coordinator_tls=false: no certificate, nothing of TLS in the objects.
TEST_F(ReconcilerTest, WithoutTlsNoCertificateIsIssued) {
  CatchUp();
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  ReconcilerOptions options;
  options.placement.tls = false;
  Reconciler reconciler(client_, {jobs_, pods_, services_, nodes_}, events_, clock_, &metrics,
                        options);
  ASSERT_THAT(reconciler.Reconcile("ns/j").status(), IsOk());
  CatchUp();
  EXPECT_EQ(CertificatesIssued(registry), 0);
  EXPECT_FALSE(
      store_.Get(kSecrets.Qualified(), "ns", "j-token")->at("stringData").has_field("tls.crt"));
  EXPECT_THAT(store_.Get(kPods.Qualified(), "ns", "j-coordinator")->serialize(),
              ::testing::Not(HasSubstr("tls")));
}

// An operator upgraded to TLS meets a job whose Secret an operator without TLS wrote (no
// status.coordinator.tls): the job stays cleartext for life, so a recreated coordinator or a
// replacement task never mounts TLS files its Secret lacks.
TEST_F(ReconcilerTest, AJobFromBeforeTlsStaysCleartextUnderATlsOperator) {
  CatchUp();
  {
    Reconciler old(client_, {jobs_, pods_, services_, nodes_}, events_, clock_, nullptr,
                   ReconcilerOptions{});
    ASSERT_THAT(old.Reconcile("ns/j").status(), IsOk());
    CatchUp();
  }
  // What an operator from before TLS recorded: no decision.
  Json job = Stored();
  job["status"]["coordinator"].as_object().erase("tls");
  ASSERT_THAT(store_.Update(kTrainingJobs.Qualified(), "ns", job, true).status(), IsOk());
  SetPod("j-coordinator", "Failed", 1);
  SetPod("j-task-0-0", "Failed", 1);
  CatchUp();

  absl::StatusOr<auth::TlsKeyPair> ca = auth::MakeCertificateAuthority("ca", absl::Hours(24));
  ASSERT_THAT(ca, IsOk());
  const ReconcilerOptions options = WithTls(*ca);
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  Reconciler upgraded(client_, {jobs_, pods_, services_, nodes_}, events_, clock_, &metrics,
                      options);
  for (int i = 0; i < 3; ++i) {
    ASSERT_THAT(upgraded.Reconcile("ns/j").status(), IsOk());
    clock_.Advance(kCoordinatorMaxBackoff);
    CatchUp();
  }
  EXPECT_EQ(DecodeStatus(Stored()).coordinator.tls, false);
  EXPECT_EQ(CertificatesIssued(registry), 0);
  ASSERT_THAT(store_.Get(kPods.Qualified(), "ns", "j-coordinator").status(), IsOk());
  EXPECT_THAT(store_.Get(kPods.Qualified(), "ns", "j-coordinator")->serialize(),
              ::testing::Not(HasSubstr("tls")));
  ASSERT_THAT(store_.Get(kPods.Qualified(), "ns", "j-task-0-1").status(), IsOk());
  EXPECT_THAT(store_.Get(kPods.Qualified(), "ns", "j-task-0-1")->serialize(),
              ::testing::Not(HasSubstr("PHALANX_TLS")));
}

}  // namespace
}  // namespace phalanx::op
