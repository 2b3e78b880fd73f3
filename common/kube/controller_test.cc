#include "common/kube/controller.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/kube/object_meta.h"
#include "common/kube/testing/fake_client.h"
#include "common/kube/testing/object_store.h"
#include "common/testing/eventually.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::kube {
namespace {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

const Resource kJobs{"phalanx.dev", "v1", "trainingjobs", true};
const Resource kPods{"", "v1", "pods", true};
constexpr absl::Duration kControllerWait = absl::Seconds(30);

Json Object(const std::string& name, const std::optional<OwnerReference>& owner = std::nullopt) {
  Json o = Json::object();
  o["metadata"]["name"] = Json::string(name);
  if (owner) {
    Json refs = Json::array();
    refs[0] = owner->ToJson();
    o["metadata"]["ownerReferences"] = refs;
  }
  return o;
}

TEST(ObjectKeyTest, KeyOfAndSplitKey) {
  struct Case {
    const char* name;
    const char* ns;
    const char* object_name;
    const char* key;
  };
  for (const Case& c :
       {Case{"namespaced", "ns", "p", "ns/p"}, Case{"cluster-scoped", "", "n1", "n1"}}) {
    SCOPED_TRACE(c.name);
    Json o = Object(c.object_name);
    if (*c.ns) o["metadata"]["namespace"] = Json::string(c.ns);
    EXPECT_EQ(KeyOf(o), c.key);
    EXPECT_EQ(SplitKey(c.key), std::make_pair(std::string(c.ns), std::string(c.object_name)));
  }
}

TEST(KeysForTest, ControllerOwner_MapsToTheOwnersKey) {
  Json pod = Object("p", OwnerReference{"phalanx.dev/v1", "TrainingJob", "job", "u1", true, true});
  pod["metadata"]["namespace"] = Json::string("ns");
  EXPECT_THAT(KeysForControllerOwner("TrainingJob")(pod), ElementsAre("ns/job"));
  EXPECT_THAT(KeysForControllerOwner()(pod), ElementsAre("ns/job"));
  EXPECT_THAT(KeysForControllerOwner("ReplicaSet")(pod), IsEmpty());
  Json not_controller =
      Object("q", OwnerReference{"phalanx.dev/v1", "TrainingJob", "job", "u1", false, false});
  EXPECT_THAT(KeysForControllerOwner()(not_controller), IsEmpty());
  EXPECT_THAT(KeysForSelf()(pod), ElementsAre("ns/p"));
}

// Counts reconciles per key, thread-safely.
class Calls {
 public:
  int Record(const std::string& key) {
    absl::MutexLock lock(&mu_);
    return ++counts_[key];
  }
  int Count(const std::string& key) {
    absl::MutexLock lock(&mu_);
    return counts_[key];
  }
  std::set<std::string> Keys() {
    absl::MutexLock lock(&mu_);
    std::set<std::string> keys;
    for (const auto& [k, n] : counts_) keys.insert(k);
    return keys;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, int> counts_;
};

// What Options::observe_pass reported, in order.
class Passes {
 public:
  void Record(ReconcileResult result) {
    absl::MutexLock lock(&mu_);
    results_.push_back(result);
  }
  std::vector<ReconcileResult> Get() {
    absl::MutexLock lock(&mu_);
    return results_;
  }

 private:
  absl::Mutex mu_;
  std::vector<ReconcileResult> results_;
};

class ControllerTest : public ::testing::Test {
 protected:
  Controller::Options FastOptions() {
    Controller::Options o;
    o.observe_pass = [this](ReconcileResult result, absl::Duration) { passes_.Record(result); };
    o.workers = 2;
    o.poll_interval = absl::Milliseconds(20);
    o.queue.base_delay = absl::Milliseconds(1);
    o.queue.max_delay = absl::Milliseconds(10);
    o.sync_timeout = kControllerWait;
    return o;
  }
  static Informer::Options FastInformer() {
    Informer::Options o;
    o.poll_interval = absl::Milliseconds(20);
    o.initial_backoff = absl::Milliseconds(10);
    return o;
  }

  testing::FakeClock clock_;
  kube::fake::ObjectStore store_{clock_};
  kube::fake::FakeClient client_{store_};
  Calls calls_;
  Passes passes_;
  // Declared before the informers: destroyed after them, so no handler outlives it.
  Controller controller_{"test", clock_, FastOptions()};
  Informer jobs_{client_, clock_, kJobs, FastInformer()};
  Informer pods_{client_, clock_, kPods, FastInformer()};
};

TEST_F(ControllerTest, ReconcilesEveryObject_AndOwnersOfChangedChildren) {
  ASSERT_THAT(client_.Create(kJobs, "ns", Object("j1")), IsOk());
  ASSERT_THAT(client_.Create(kJobs, "ns", Object("j2")), IsOk());
  controller_.Watch(jobs_, KeysForSelf());
  controller_.Watch(pods_, KeysForControllerOwner("TrainingJob"));
  jobs_.Start();
  pods_.Start();
  ASSERT_THAT(controller_.Run([&](const std::string& key) -> absl::StatusOr<Controller::Result> {
    calls_.Record(key);
    return Controller::Result{};
  }),
              IsOk());
  ASSERT_TRUE(Eventually(
      [&] {
        return calls_.Keys() == std::set<std::string>{"ns/j1", "ns/j2"};
      },
      kControllerWait));

  // A pod owned by j1 changes: j1 is reconciled again; an unowned pod enqueues nothing.
  const int before = calls_.Count("ns/j1");
  ASSERT_THAT(client_.Create(kPods, "ns",
                             Object("j1-0", OwnerReference{"phalanx.dev/v1", "TrainingJob", "j1",
                                                           "u", true, true})),
              IsOk());
  ASSERT_THAT(client_.Create(kPods, "ns", Object("stray")), IsOk());
  ASSERT_TRUE(Eventually([&] { return calls_.Count("ns/j1") > before; }, kControllerWait));
  EXPECT_EQ(calls_.Keys(), (std::set<std::string>{"ns/j1", "ns/j2"}));
  EXPECT_GE(controller_.reconciles(), 3);
  EXPECT_EQ(controller_.errors(), 0);
}

TEST_F(ControllerTest, Errors_AreRetriedWithBackoff_ThenForgotten) {
  jobs_.Start();
  ASSERT_THAT(controller_.Run([&](const std::string& key) -> absl::StatusOr<Controller::Result> {
    if (calls_.Record(key) <= 2) return absl::UnavailableError("API server down");
    return Controller::Result{};
  }),
              IsOk());
  controller_.Enqueue("ns/flaky");
  ASSERT_TRUE(Eventually(
      [&] {
        clock_.Advance(absl::Seconds(1));  // the per-key backoff runs on the fake clock
        return calls_.Count("ns/flaky") == 3;
      },
      kControllerWait));
  EXPECT_EQ(controller_.errors(), 2);
  EXPECT_EQ(controller_.conflicts(), 0);
  EXPECT_THAT(passes_.Get(), ::testing::ElementsAre(ReconcileResult::kError,
                                                    ReconcileResult::kError, ReconcileResult::kOk));
}

TEST_F(ControllerTest, Conflict_RequeuesQuietly) {
  ASSERT_THAT(controller_.Run([&](const std::string& key) -> absl::StatusOr<Controller::Result> {
    if (calls_.Record(key) == 1) return absl::AbortedError("the object has been modified");
    return Controller::Result{};
  }),
              IsOk());
  controller_.Enqueue("ns/j");
  ASSERT_TRUE(Eventually(
      [&] {
        clock_.Advance(absl::Seconds(1));  // the per-key backoff runs on the fake clock
        return calls_.Count("ns/j") == 2;
      },
      kControllerWait));
  EXPECT_EQ(controller_.conflicts(), 1);
  EXPECT_EQ(controller_.errors(), 0) << "a conflict is not an error";
  EXPECT_THAT(passes_.Get(),
              ::testing::ElementsAre(ReconcileResult::kConflict, ReconcileResult::kOk));
  EXPECT_STREQ(ReconcileResultName(ReconcileResult::kConflict), "conflict");
}

TEST_F(ControllerTest, RequeueAfter_FollowsTheInjectedClock) {
  ASSERT_THAT(controller_.Run([&](const std::string& key) -> absl::StatusOr<Controller::Result> {
    calls_.Record(key);
    return Controller::Result{.requeue_after = absl::Minutes(5)};
  }),
              IsOk());
  const absl::Time start = clock_.Now();
  controller_.Enqueue("ns/timer");
  ASSERT_TRUE(Eventually([&] { return calls_.Count("ns/timer") == 1; }, kControllerWait));
  // Both workers are back waiting on the fake clock, each until its next poll, none until the
  // key is due: from here nothing can run before the clock moves.
  auto both_idle_since = [&](absl::Time t) {
    return clock_.WaitForWaiters(std::vector<absl::Time>(2, t + FastOptions().poll_interval));
  };
  ASSERT_TRUE(both_idle_since(start));
  EXPECT_EQ(calls_.Count("ns/timer"), 1) << "not due until the fake clock moves";
  // A minute short of due: the workers wake, look at the queue, and wait again.
  clock_.Advance(absl::Minutes(4));
  ASSERT_TRUE(both_idle_since(start + absl::Minutes(4)));
  EXPECT_EQ(calls_.Count("ns/timer"), 1) << "still a minute short of due";
  clock_.Advance(absl::Minutes(1));
  EXPECT_TRUE(Eventually([&] { return calls_.Count("ns/timer") == 2; }, kControllerWait));
}

TEST_F(ControllerTest, OneWorkerPerKey_EvenWhenEnqueuedWhileRunning) {
  Controller::Options options = FastOptions();
  options.workers = 4;
  Controller controller("parallel", clock_, options);
  absl::Mutex mu;
  std::map<std::string, int> in_flight;
  int max_in_flight = 0;
  ASSERT_THAT(controller.Run([&](const std::string& key) -> absl::StatusOr<Controller::Result> {
    {
      absl::MutexLock lock(&mu);
      max_in_flight = std::max(max_in_flight, ++in_flight[key]);
    }
    calls_.Record(key);
    absl::SleepFor(absl::Milliseconds(5));
    absl::MutexLock lock(&mu);
    --in_flight[key];
    return Controller::Result{};
  }),
              IsOk());
  for (int i = 0; i < 50; ++i) {
    controller.Enqueue("ns/hot");
    controller.Enqueue("ns/k" + std::to_string(i % 5));
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(Eventually([&] { return controller.queue_depth() == 0; }, kControllerWait));
  controller.Stop();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(max_in_flight, 1);
  EXPECT_GE(calls_.Count("ns/hot"), 1);
}

TEST_F(ControllerTest, Run_FailsWithDeadlineExceeded_WhenAnInformerNeverSyncs) {
  client_.FailNext(1'000'000, absl::UnavailableError("injected 500"));
  Controller::Options options = FastOptions();
  options.sync_timeout = absl::Milliseconds(200);
  Controller controller("unsynced", clock_, options);
  controller.Watch(jobs_, KeysForSelf());
  jobs_.Start();
  EXPECT_THAT(controller.Run([](const std::string&) { return Controller::Result{}; }),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       ::testing::HasSubstr("trainingjobs.phalanx.dev")));
  jobs_.Stop();
}

TEST_F(ControllerTest, Stop_IsIdempotent_AndRunAfterStopFails) {
  ASSERT_THAT(controller_.Run([](const std::string&) { return Controller::Result{}; }), IsOk());
  EXPECT_THAT(controller_.Run([](const std::string&) { return Controller::Result{}; }),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  controller_.Stop();
  controller_.Stop();
  controller_.Enqueue("ignored");
  EXPECT_EQ(controller_.queue_depth(), 0);
}

TEST_F(ControllerTest, ThrowingReconciler_CountsAsAnError_AndTheWorkerSurvives) {
  ASSERT_THAT(controller_.Run([&](const std::string& key) -> absl::StatusOr<Controller::Result> {
    if (calls_.Record(key) == 1) throw std::runtime_error("bad json");
    return Controller::Result{};
  }),
              IsOk());
  controller_.Enqueue("ns/bad");
  ASSERT_TRUE(Eventually(
      [&] {
        clock_.Advance(absl::Seconds(1));  // the per-key backoff runs on the fake clock
        return calls_.Count("ns/bad") == 2;
      },
      kControllerWait));
  EXPECT_EQ(controller_.errors(), 1);
}

}  // namespace
}  // namespace phalanx::kube
