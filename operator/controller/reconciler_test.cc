// The Reconciler over the local cluster's FakeClient (an in-memory API server with fault
// injection): what the API server refuses shows on the TrainingJob (issue 11, item 8) —
// ChildrenReady=False with the server's message, a FailedCreate Event, phase Blocked for a
// permanent refusal — and the job recovers by itself once the create works. Informers run on
// their own threads, so the test waits (bounded) for their caches to catch up between passes.
#include "operator/controller/reconciler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/kube/object_meta.h"
#include "common/testing/eventually.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "operator/api/codec.h"
#include "common/kube/testing/fake_client.h"
#include "common/kube/testing/object_store.h"

namespace phalanx::op {
namespace {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::IsOk;
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
          for (kube::Informer* i : {&jobs_, &pods_, &services_, &secrets_}) {
            auto listed = store_.List(i->resource().Qualified(), "", {}, 0, "");
            if (!listed.ok() || listed->items.size() != i->List().size()) return false;
          }
          std::optional<Json> cached = jobs_.Get("ns", "j");
          return cached.has_value() && kube::MetaString(*cached, "resourceVersion") ==
                                           kube::MetaString(Stored(), "resourceVersion");
        },
        kWait));
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
  Reconciler reconciler_{client_, {jobs_, pods_, services_, secrets_, nodes_}, events_,
                         clock_, nullptr, ReconcilerOptions{}};
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

}  // namespace
}  // namespace phalanx::op
