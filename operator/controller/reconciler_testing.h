// The Reconciler test fixture: the Reconciler over the local cluster's FakeClient (an in-memory
// API server with fault injection) and FakeClock, with informers on their own threads, so tests
// wait (bounded) for the caches to catch up between passes. Test-only.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"
#include "common/kube/testing/fake_client.h"
#include "common/kube/testing/object_store.h"
#include "common/testing/eventually.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "operator/api/codec.h"
#include "operator/controller/reconciler.h"

namespace phalanx::op {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::IsOk;

inline constexpr absl::Duration kWait = absl::Seconds(10);

inline kube::Informer::Options Fast() {
  kube::Informer::Options o;
  o.poll_interval = absl::Milliseconds(20);
  o.initial_backoff = absl::Milliseconds(10);
  return o;
}

class ReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_.EnableStatusSubresource(kTrainingJobs.Qualified());
    for (kube::Informer* i : {&jobs_, &pods_, &services_, &nodes_}) {
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
          for (kube::Informer* i : {&jobs_, &pods_, &services_}) {
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
  void SetPod(const std::string& name, const std::string& phase, std::optional<int> exit_code = {},
              const std::string& ip = "10.0.0.7") {
    absl::StatusOr<Json> pod = store_.Get(kPods.Qualified(), "ns", name);
    ASSERT_THAT(pod.status(), IsOk());
    Json status = Json::object();
    status["phase"] = Json::string(phase);
    status["podIP"] = Json::string(ip);
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

  // A pass that meets a child squatted by someone else: it ends AlreadyExists (retried with
  // back-off), and the job shows ChildrenReady=False/ChildConflict, its message holding every
  // string of `names`, with a ChildConflict Event. Returns the job's status after it.
  TrainingJobStatus PassMeetsAChildConflict(const std::vector<std::string>& names) {
    const absl::Status conflicted = reconciler_.Reconcile("ns/j").status();
    EXPECT_TRUE(absl::IsAlreadyExists(conflicted)) << conflicted;
    CatchUp();
    const TrainingJobStatus status = DecodeStatus(Stored());
    const std::optional<Condition> ready = FindCondition(status.conditions, "ChildrenReady");
    EXPECT_TRUE(ready.has_value());
    if (ready.has_value()) {
      EXPECT_EQ(ready->status, "False");
      EXPECT_EQ(ready->reason, "ChildConflict");
      for (const std::string& name : names) EXPECT_THAT(ready->message, ::testing::HasSubstr(name));
    }
    EXPECT_THAT(EventReasons(), ::testing::Contains("ChildConflict"));
    return status;
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
  kube::Informer nodes_{reader_, clock_, kNodes, Fast()};
  kube::EventRecorder events_{reader_, clock_, "phalanx-operator"};
  Reconciler reconciler_{
      client_, {jobs_, pods_, services_, nodes_}, events_, clock_, nullptr, ReconcilerOptions{}};
};

}  // namespace phalanx::op
