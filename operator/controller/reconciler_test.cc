// The Reconciler over the local cluster's FakeClient (an in-memory API server with fault
// injection): what the API server refuses shows on the TrainingJob (issue 11, item 8) —
// ChildrenReady=False with the server's message, a FailedCreate Event, phase Blocked for a
// permanent refusal — and the job recovers by itself once the create works. Informers run on
// their own threads, so the test waits (bounded) for their caches to catch up between passes.
#include "operator/controller/reconciler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"
#include "common/kube/testing/fake_client.h"
#include "common/kube/testing/object_store.h"
#include "common/testing/eventually.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "operator/api/codec.h"

namespace phalanx::op {
namespace {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::IsOk;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);

kube::Informer::Options Fast() {
  kube::Informer::Options o;
  o.poll_interval = absl::Milliseconds(20);
  o.initial_backoff = absl::Milliseconds(10);
  return o;
}

class ReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_.EnableStatusSubresource(kTrainingJobs.Qualified());
    for (kube::Informer* i : {&jobs_, &pods_, &services_, &secrets_, &nodes_}) {
      i->Start();
      ASSERT_TRUE(i->WaitForSync(kWait));
    }
    Json job = Json::parse(R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob",
        "metadata":{"name":"j","namespace":"ns"},
        "spec":{"replicas":2,"template":{"spec":{"containers":[
          {"name":"w","image":"example.com/w:1","command":["train"]}]}}}})");
    ASSERT_THAT(store_.Create(kTrainingJobs.Qualified(), "ns", job).status(), IsOk());
  }

  Json Stored() { return *store_.Get(kTrainingJobs.Qualified(), "ns", "j"); }

  // Waits until every informer's cache holds what the store holds.
  void CatchUp() {
    ASSERT_TRUE(Eventually(
        [&] {
          // Every cache holds exactly the stored objects, each at its stored resourceVersion.
          for (kube::Informer* i : {&jobs_, &pods_, &services_, &secrets_}) {
            auto listed = store_.List(i->resource().Qualified(), "", {}, 0, "");
            if (!listed.ok() || listed->items.size() != i->List().size()) return false;
            for (const Json& object : listed->items) {
              std::optional<Json> cached =
                  i->Get(kube::MetaString(object, "namespace"), kube::MetaString(object, "name"));
              if (!cached.has_value() || kube::MetaString(*cached, "resourceVersion") !=
                                             kube::MetaString(object, "resourceVersion")) {
                return false;
              }
            }
          }
          std::optional<Json> cached = jobs_.Get("ns", "j");
          return cached.has_value() && kube::MetaString(*cached, "resourceVersion") ==
                                           kube::MetaString(Stored(), "resourceVersion");
        },
        kWait));
  }

  // Sets what the kubelet would report for pod `name`: its phase, readiness and, once it ended,
  // the container's exit code.
  void SetPod(const std::string& name, const std::string& phase,
              std::optional<int> exit_code = {}) {
    absl::StatusOr<Json> pod = store_.Get(kPods.Qualified(), "ns", name);
    ASSERT_THAT(pod.status(), IsOk());
    Json status = Json::object();
    status["phase"] = Json::string(phase);
    status["podIP"] = Json::string("10.0.0.7");
    status["conditions"] = Json::parse(absl::StrCat(
        R"([{"type":"Ready","status":")", phase == "Running" ? "True" : "False", R"("}])"));
    if (exit_code.has_value()) {
      status["containerStatuses"] = Json::parse(
          absl::StrCat(R"([{"name":"w","state":{"terminated":{"exitCode":)", *exit_code,
                       R"(,"reason":")", *exit_code == 0 ? "Completed" : "Error", R"("}}}])"));
    }
    (*pod)["status"] = status;
    ASSERT_THAT(store_.Update(kPods.Qualified(), "ns", *pod, false).status(), IsOk());
  }

  std::vector<std::string> PodNames() {
    std::vector<std::string> names;
    auto pods = store_.List(kPods.Qualified(), "ns", {}, 0, "");
    if (pods.ok()) {
      for (const Json& p : pods->items) names.push_back(kube::MetaString(p, "name"));
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  // One pass that must succeed, then the caches catch up with what it wrote.
  void Pass() {
    ASSERT_THAT(reconciler_.Reconcile("ns/j").status(), IsOk());
    CatchUp();
  }

  // A pass with nothing new to act on writes nothing: not the job, not a child.
  void ExpectIdlePassWritesNothing() {
    const std::string job_version = kube::MetaString(Stored(), "resourceVersion");
    const std::vector<std::string> pods = PodNames();
    const size_t events = EventReasons().size();
    ASSERT_THAT(reconciler_.Reconcile("ns/j").status(), IsOk());
    EXPECT_EQ(kube::MetaString(Stored(), "resourceVersion"), job_version);
    EXPECT_EQ(PodNames(), pods);
    EXPECT_EQ(EventReasons().size(), events);
  }

  std::vector<std::string> EventReasons() {
    std::vector<std::string> out;
    auto events = store_.List("events", "ns", {}, 0, "");
    if (!events.ok()) return out;
    for (const Json& e : events->items) out.push_back(kube::StringAt(e, "reason"));
    return out;
  }

  testing::FakeClock clock_;
  kube::fake::ObjectStore store_{clock_, 1000};
  // The reconciler's writes go through client_, whose faults the tests inject; the informers
  // and the Event recorder have their own client on the same store, so a fault hits the
  // create or status write it is meant for, not a watch poll.
  kube::fake::FakeClient client_{store_};
  kube::fake::FakeClient reader_{store_};
  kube::Informer jobs_{reader_, clock_, kTrainingJobs, Fast()};
  kube::Informer pods_{reader_, clock_, kPods, Fast()};
  kube::Informer services_{reader_, clock_, kServices, Fast()};
  kube::Informer secrets_{reader_, clock_, kSecrets, Fast()};
  kube::Informer nodes_{reader_, clock_, kNodes, Fast()};
  kube::EventRecorder events_{reader_, clock_, "phalanx-operator"};
  Reconciler reconciler_{client_, {jobs_, pods_, services_, secrets_, nodes_},
                         events_, clock_,
                         nullptr, ReconcilerOptions{}};
};

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
  ASSERT_TRUE(secrets_.Get("ns", "j-token").has_value());
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
  EXPECT_THAT(PodNames(), ElementsAre("j-coordinator", "j-task-0-0", "j-task-1-1"));
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
  EXPECT_THAT(PodNames(), ElementsAre("j-task-0-0", "j-task-1-1"));
  EXPECT_THAT(EventReasons(), ::testing::Contains("Completed"));
  ExpectIdlePassWritesNothing();
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
  const absl::Status conflicted = reconciler_.Reconcile("ns/j").status();
  EXPECT_TRUE(absl::IsAlreadyExists(conflicted)) << conflicted;  // retried with back-off
  CatchUp();
  TrainingJobStatus status = DecodeStatus(Stored());
  std::optional<Condition> ready = FindCondition(status.conditions, kConditionChildrenReady);
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(ready->status, "False");
  EXPECT_EQ(ready->reason, kReasonChildConflict);
  EXPECT_THAT(ready->message, HasSubstr("j-task-1-0"));
  EXPECT_THAT(ready->message, HasSubstr("no controller"));
  EXPECT_THAT(EventReasons(), ::testing::Contains(kReasonChildConflict));
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

// A Secret named <job>-token that the job does not control — unowned (chosen by an attacker)
// or left by an earlier job of the same name — is never the job's token: no pod is created
// while it is there (each would read it), the conflict shows on the job, and the job's own
// Secret with a fresh token replaces it once it is gone.
TEST_F(ReconcilerTest, ASquattingSecretIsNeverUsedAsTheToken) {
  for (const char* owner : {"", R"(,"ownerReferences":[{"apiVersion":"phalanx.dev/v1alpha1",
        "kind":"TrainingJob","name":"j","uid":"uid-of-an-earlier-j","controller":true}])"}) {
    SCOPED_TRACE(owner);
    Json squatter = Json::parse(absl::StrCat(
        R"({"apiVersion":"v1","kind":"Secret","metadata":{"name":"j-token","namespace":"ns",
            "labels":{"phalanx.dev/job":"j"})",
        owner, R"(},"data":{"token":"YXR0YWNrZXI="}})"));
    ASSERT_THAT(store_.Create(kSecrets.Qualified(), "ns", squatter).status(), IsOk());
    CatchUp();
    const absl::Status conflicted = reconciler_.Reconcile("ns/j").status();
    EXPECT_TRUE(absl::IsAlreadyExists(conflicted)) << conflicted;
    CatchUp();
    EXPECT_TRUE(PodNames().empty());
    std::optional<Condition> ready =
        FindCondition(DecodeStatus(Stored()).conditions, kConditionChildrenReady);
    ASSERT_TRUE(ready.has_value());
    EXPECT_EQ(ready->reason, kReasonChildConflict);
    EXPECT_THAT(ready->message, HasSubstr("j-token"));
    ASSERT_THAT(store_.Delete(kSecrets.Qualified(), "ns", "j-token").status(), IsOk());
  }
  EXPECT_THAT(EventReasons(), ::testing::Contains(kReasonChildConflict));
  CatchUp();
  Pass();
  EXPECT_THAT(PodNames(), ElementsAre("j-coordinator", "j-task-0-0", "j-task-1-0"));
  const Json secret = *store_.Get(kSecrets.Qualified(), "ns", "j-token");
  EXPECT_EQ(kube::ControllerOf(secret)->uid, kube::MetaString(Stored(), "uid"));
  EXPECT_THAT(secret.serialize(), ::testing::Not(HasSubstr("YXR0YWNrZXI=")));
}

}  // namespace
}  // namespace phalanx::op
