#include "common/kube/informer.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/kube/forwarding_client_test_util.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"
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
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

constexpr absl::Duration kWait = absl::Seconds(30);

Json Pod(const std::string& name, const std::vector<std::string>& owner_uids = {},
         const std::string& app = "a") {
  Json pod = Json::object();
  pod["metadata"]["name"] = Json::string(name);
  pod["metadata"]["labels"]["app"] = Json::string(app);
  if (!owner_uids.empty()) {
    Json refs = Json::array();
    for (const std::string& uid : owner_uids) {
      OwnerReference ref{"phalanx.dev/v1", "TrainingJob", "job-" + uid, uid, true, true};
      refs[refs.size()] = ref.ToJson();
    }
    pod["metadata"]["ownerReferences"] = refs;
  }
  pod["spec"] = Json::object();
  return pod;
}

std::vector<std::string> Keys(const std::vector<Json>& objects) {
  std::vector<std::string> keys;
  for (const Json& o : objects) keys.push_back(KeyOf(o));
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Records what handlers saw, thread-safely.
class Recorder {
 public:
  ResourceEventHandler Handler() {
    ResourceEventHandler h;
    h.on_add = [this](const Json& o) { Push(adds_, KeyOf(o)); };
    h.on_update = [this](const Json& old_object, const Json& new_object) {
      Push(old_object == new_object ? resyncs_ : updates_, KeyOf(new_object));
    };
    h.on_delete = [this](const Json& o) { Push(deletes_, KeyOf(o)); };
    return h;
  }
  std::vector<std::string> adds() { return Read(adds_); }
  std::vector<std::string> updates() { return Read(updates_); }
  std::vector<std::string> resyncs() { return Read(resyncs_); }
  std::vector<std::string> deletes() { return Read(deletes_); }

 private:
  void Push(std::vector<std::string>& v, const std::string& key) {
    absl::MutexLock lock(&mu_);
    v.push_back(key);
  }
  std::vector<std::string> Read(const std::vector<std::string>& v) {
    absl::MutexLock lock(&mu_);
    return v;
  }
  absl::Mutex mu_;
  std::vector<std::string> adds_, updates_, resyncs_, deletes_;
};

class InformerTest : public ::testing::Test {
 protected:
  Informer::Options FastOptions() {
    Informer::Options o;
    o.poll_interval = absl::Milliseconds(20);
    o.initial_backoff = absl::Milliseconds(10);
    o.max_backoff = absl::Milliseconds(100);
    return o;
  }
  void CreatePod(const std::string& ns, const Json& pod) {
    ASSERT_THAT(store_.Create("pods", ns, pod), IsOk());
  }
  std::vector<std::string> StoreKeys() {
    auto list = store_.List("pods", "", {}, 0, "");
    EXPECT_THAT(list, IsOk());
    return Keys(list->items);
  }

  testing::FakeClock clock_;
  kube::fake::ObjectStore store_{clock_, 1000};
  kube::fake::FakeClient client_{store_};
  Recorder recorder_;
};

TEST_F(InformerTest, InitialList_FollowsContinueTokens_AndDeliversAdds) {
  for (int i = 0; i < 7; ++i) CreatePod(i % 2 ? "ns1" : "ns2", Pod("p" + std::to_string(i)));
  Informer::Options options = FastOptions();
  options.page_size = 3;
  Informer informer(client_, clock_, kPods, options);
  informer.AddHandler(recorder_.Handler());
  EXPECT_FALSE(informer.HasSynced());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));

  EXPECT_EQ(Keys(informer.List()), StoreKeys());
  EXPECT_EQ(informer.List().size(), 7u);
  EXPECT_THAT(recorder_.adds(), UnorderedElementsAreArray(StoreKeys()))
      << "every listed object is delivered before HasSynced";
  ASSERT_TRUE(informer.Get("ns1", "p1").has_value());
  EXPECT_EQ(MetaString(*informer.Get("ns1", "p1"), "name"), "p1");
  EXPECT_FALSE(informer.Get("ns2", "p1").has_value());
  EXPECT_EQ(informer.relists(), 0);
}

TEST_F(InformerTest, Watch_AppliesAddUpdateDelete) {
  Informer informer(client_, clock_, kPods, FastOptions());
  informer.AddHandler(recorder_.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));

  ASSERT_THAT(client_.Create(kPods, "ns", Pod("p")), IsOk());
  ASSERT_TRUE(Eventually([&] { return informer.Get("ns", "p").has_value(); }, kWait));
  Json pod = *informer.Get("ns", "p");
  pod["metadata"]["labels"]["app"] = Json::string("b");
  ASSERT_THAT(client_.Update(kPods, "ns", pod), IsOk());
  ASSERT_TRUE(Eventually([&] { return LabelsOf(*informer.Get("ns", "p"))["app"] == "b"; }, kWait));
  ASSERT_THAT(client_.Delete(kPods, "ns", "p", {}), IsOk());
  ASSERT_TRUE(Eventually([&] { return !informer.Get("ns", "p").has_value(); }, kWait));

  EXPECT_THAT(recorder_.adds(), ElementsAre("ns/p"));
  EXPECT_THAT(recorder_.updates(), ElementsAre("ns/p"));
  EXPECT_THAT(recorder_.deletes(), ElementsAre("ns/p"));
  EXPECT_EQ(informer.last_resource_version(), std::to_string(store_.resource_version()));
}

// The cache keeps each object as its JSON text (informer.h, CachedObject): what a read gives back
// must be the object as the API server sent it, and an update's old object the one it replaced.
TEST_F(InformerTest,
       ACachedObjectReadsBackAsItCame_AnUpdateDeliversTheOneItReplaced_AndEachCounts) {
  Informer informer(client_, clock_, kPods, FastOptions());
  std::vector<Json> old_objects;
  absl::Mutex mu;
  informer.AddHandler({.on_update = [&](const Json& old_object, const Json&) {
    absl::MutexLock lock(&mu);
    old_objects.push_back(old_object);
  }});
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));

  Json pod = Pod("p");
  Json& status = pod["status"];
  status["big"] = Json::number(int64_t{9007199254740993});  // above a double's exact range
  status["negative"] = Json::number(int64_t{-42});
  status["fraction"] = Json::number(0.1);
  status["flag"] = Json::boolean(true);
  status["nothing"] = Json::null();
  status["text"] = Json::string("caf\u00e9 \"quoted\" back\\slash\nnew line \u2603");
  status["nested"][0]["deeper"][0] = Json::number(1);
  status["empty_object"] = Json::object();
  status["empty_array"] = Json::array();
  EXPECT_EQ(informer.changes(), 0u);
  ASSERT_THAT(client_.Create(kPods, "ns", pod), IsOk());
  ASSERT_TRUE(Eventually([&] { return informer.Get("ns", "p").has_value(); }, kWait));
  EXPECT_EQ(informer.changes(), 1u);
  absl::StatusOr<Json> stored = client_.Get(kPods, "ns", "p");
  ASSERT_THAT(stored, IsOk());
  EXPECT_EQ(*informer.Get("ns", "p"), *stored);
  EXPECT_EQ(informer.Get("ns", "p")->at("status").at("big").as_number().to_int64(),
            int64_t{9007199254740993});

  Json changed = *stored;
  changed["status"]["flag"] = Json::boolean(false);
  ASSERT_THAT(client_.Update(kPods, "ns", changed), IsOk());
  ASSERT_TRUE(Eventually(
      [&] { return !informer.Get("ns", "p")->at("status").at("flag").as_bool(); }, kWait));
  EXPECT_EQ(informer.changes(), 2u);
  absl::MutexLock lock(&mu);
  ASSERT_EQ(old_objects.size(), 1u);
  EXPECT_EQ(old_objects[0], *stored);
  EXPECT_EQ(informer.List().size(), 1u);
  EXPECT_THAT(Keys(informer.ByIndex(Informer::kNamespaceIndex, "ns")), ElementsAre("ns/p"));
}

TEST_F(InformerTest, ByIndex_OwnerAndNamespace_FollowChanges) {
  CreatePod("ns1", Pod("a", {"u1"}));
  CreatePod("ns1", Pod("b", {"u1", "u2"}));
  CreatePod("ns2", Pod("c", {"u2"}));
  CreatePod("ns2", Pod("d"));
  Informer informer(client_, clock_, kPods, FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));

  EXPECT_THAT(Keys(informer.ByIndex(Informer::kOwnerIndex, "u1")), ElementsAre("ns1/a", "ns1/b"));
  EXPECT_THAT(Keys(informer.ByIndex(Informer::kOwnerIndex, "u2")), ElementsAre("ns1/b", "ns2/c"));
  EXPECT_THAT(Keys(informer.ByIndex(Informer::kNamespaceIndex, "ns2")),
              ElementsAre("ns2/c", "ns2/d"));
  EXPECT_THAT(informer.ByIndex(Informer::kOwnerIndex, "nobody"), IsEmpty());
  EXPECT_THAT(informer.ByIndex("no-such-index", "u1"), IsEmpty());

  // b loses owner u1; a is deleted: the index follows.
  Json b = *informer.Get("ns1", "b");
  Json refs = Json::array();
  refs[0] = b["metadata"]["ownerReferences"][1];
  b["metadata"]["ownerReferences"] = refs;
  ASSERT_THAT(client_.Update(kPods, "ns1", b), IsOk());
  ASSERT_THAT(client_.Delete(kPods, "ns1", "a", {}), IsOk());
  EXPECT_TRUE(
      Eventually([&] { return informer.ByIndex(Informer::kOwnerIndex, "u1").empty(); }, kWait));
  EXPECT_THAT(Keys(informer.ByIndex(Informer::kOwnerIndex, "u2")), ElementsAre("ns1/b", "ns2/c"));
}

TEST_F(InformerTest, CustomIndex_AndLabelSelector) {
  CreatePod("ns", Pod("x", {}, "web"));
  CreatePod("ns", Pod("y", {}, "db"));
  Informer::Options options = FastOptions();
  options.label_selector = "app=web";
  Informer informer(client_, clock_, kPods, options);
  informer.AddIndex("app",
                    [](const Json& o) { return std::vector<std::string>{LabelsOf(o)["app"]}; });
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));
  EXPECT_THAT(Keys(informer.List()), ElementsAre("ns/x"));
  EXPECT_THAT(Keys(informer.ByIndex("app", "web")), ElementsAre("ns/x"));
  ASSERT_THAT(client_.Create(kPods, "ns", Pod("z", {}, "web")), IsOk());
  ASSERT_THAT(client_.Create(kPods, "ns", Pod("w", {}, "db")), IsOk());
  ASSERT_TRUE(Eventually([&] { return informer.List().size() == 2; }, kWait));
  EXPECT_THAT(Keys(informer.List()), ElementsAre("ns/x", "ns/z"));
}

// An index added after Start() files what is cached already (the reconciler adds its own to the
// informers it is handed); IndexValues lists the values in use without copying an object.
TEST_F(InformerTest, AnIndexAddedAfterStart_FilesTheCachedObjects_AndListsItsValues) {
  CreatePod("ns", Pod("x", {}, "web"));
  CreatePod("ns", Pod("y", {}, "db"));
  Informer informer(client_, clock_, kPods, FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));
  auto app = [](const Json& o) { return std::vector<std::string>{LabelsOf(o)["app"]}; };
  informer.AddIndex("app", app);
  EXPECT_THAT(Keys(informer.ByIndex("app", "web")), ElementsAre("ns/x"));
  EXPECT_THAT(informer.IndexValues("app"), UnorderedElementsAre("web", "db"));
  ASSERT_THAT(client_.Delete(kPods, "ns", "y", {}), IsOk());
  ASSERT_THAT(client_.Create(kPods, "ns", Pod("z", {}, "cache")), IsOk());
  EXPECT_TRUE(Eventually(
      [&] {
        std::vector<std::string> values = informer.IndexValues("app");
        std::sort(values.begin(), values.end());
        return values == std::vector<std::string>{"cache", "web"};
      },
      kWait));
  informer.AddIndex("app", [](const Json&) { return std::vector<std::string>{"other"}; });
  EXPECT_THAT(informer.ByIndex("app", "other"), IsEmpty()) << "the first index stays";
  EXPECT_THAT(informer.IndexValues("unknown"), IsEmpty());
}

// The transform runs on every object before the cache, the indexes and the handlers see it, on
// the list and on watch events alike.
TEST_F(InformerTest, TheTransformShapesWhatIsCachedIndexedAndDelivered) {
  CreatePod("ns", Pod("x", {}, "web"));
  Informer::Options options = FastOptions();
  options.transform = [](Json& o) { o["metadata"]["labels"]["app"] = Json::string("seen"); };
  Informer informer(client_, clock_, kPods, options);
  informer.AddIndex("app",
                    [](const Json& o) { return std::vector<std::string>{LabelsOf(o)["app"]}; });
  std::vector<std::string> delivered;
  absl::Mutex mu;
  informer.AddHandler({.on_add = [&](const Json& o) {
    absl::MutexLock lock(&mu);
    delivered.push_back(LabelsOf(o)["app"]);
  }});
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));
  ASSERT_THAT(client_.Create(kPods, "ns", Pod("y", {}, "db")), IsOk());
  ASSERT_TRUE(Eventually([&] { return informer.List().size() == 2; }, kWait));
  EXPECT_THAT(Keys(informer.ByIndex("app", "seen")), ElementsAre("ns/x", "ns/y"));
  EXPECT_EQ(LabelsOf(*informer.Get("ns", "y"))["app"], "seen");
  absl::MutexLock lock(&mu);
  EXPECT_THAT(delivered, ElementsAre("seen", "seen"));
}

TEST_F(InformerTest, ExpiredResourceVersion_Relists_AndDeliversWhatWasMissed) {
  kube::fake::ObjectStore store(clock_, /*history_limit=*/5);
  kube::fake::FakeClient client(store);
  ASSERT_THAT(store.Create("pods", "ns", Pod("a")), IsOk());
  ASSERT_THAT(store.Create("pods", "ns", Pod("b")), IsOk());

  // A handler that holds the informer thread on "gate", so the watch is not read while the
  // store's short history rolls past the informer's resourceVersion.
  absl::Notification entered, release;
  ResourceEventHandler gate;
  gate.on_add = [&](const Json& o) {
    if (MetaString(o, "name") != "gate") return;
    entered.Notify();
    release.WaitForNotificationWithTimeout(kWait);
  };
  Informer informer(client, clock_, kPods, FastOptions());
  informer.AddHandler(gate);
  informer.AddHandler(recorder_.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));

  ASSERT_THAT(store.Create("pods", "ns", Pod("gate")), IsOk());
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(kWait));
  ASSERT_THAT(store.Delete("pods", "ns", "a"), IsOk());
  Json b = *store.Get("pods", "ns", "b");
  b["metadata"]["labels"]["app"] = Json::string("changed");
  ASSERT_THAT(store.Update("pods", "ns", b, false), IsOk());
  for (int i = 0; i < 10; ++i) {
    ASSERT_THAT(store.Create("pods", "ns", Pod("c" + std::to_string(i))), IsOk());
  }
  release.Notify();

  ASSERT_TRUE(Eventually([&] { return informer.relists() >= 1; }, kWait));
  auto want = store.List("pods", "", {}, 0, "");
  ASSERT_THAT(want, IsOk());
  ASSERT_TRUE(Eventually([&] { return Keys(informer.List()) == Keys(want->items); }, kWait));
  EXPECT_THAT(recorder_.deletes(), ElementsAre("ns/a")) << "the relist found a gone";
  EXPECT_THAT(recorder_.updates(), ElementsAre("ns/b"));
  EXPECT_EQ(LabelsOf(*informer.Get("ns", "b"))["app"], "changed");
  EXPECT_EQ(informer.last_resource_version(), std::to_string(store.resource_version()));
}

TEST_F(InformerTest, ListFailures_BackOffAndRetry_UntilSynced) {
  CreatePod("ns", Pod("p"));
  client_.FailNext(3, absl::UnavailableError("injected 500"));
  Informer informer(client_, clock_, kPods, FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));
  EXPECT_EQ(Keys(informer.List()), StoreKeys());
}

TEST_F(InformerTest, AfterAnOutage_TheServerAnsweringEndsTheBackOffAtOnce) {
  // A back-off of an hour: without the probe the informer would not list again for that long
  // after the outage (issue 11 item 9: caches stale 15-25 s after the API server was back).
  Informer::Options options = FastOptions();
  options.initial_backoff = absl::Hours(1);
  options.max_backoff = absl::Hours(1);
  options.probe_interval = absl::Milliseconds(50);
  client_.FailNext(2, absl::UnavailableError("connection refused"));  // the list and one probe
  Informer informer(client_, clock_, kPods, options);
  informer.Start();
  CreatePod("ns", Pod("after-outage"));
  ASSERT_TRUE(informer.WaitForSync(absl::Minutes(1)))
      << "the informer waited out its back-off although the server answered";
  EXPECT_EQ(Keys(informer.List()), StoreKeys());
}

TEST_F(InformerTest, StreamEnd_AndFailedRewatches_ResumeFromLastResourceVersion) {
  ForwardingClient client(client_);
  CreatePod("ns", Pod("before"));
  Informer informer(client, clock_, kPods, FastOptions());
  informer.AddHandler(recorder_.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));
  ASSERT_TRUE(Eventually([&] { return client.watches_opened() == 1; }, kWait));

  // The server drops the stream and the next three watch requests fail with a 500; writes go
  // straight to the store so the injected failures hit only the informer.
  client_.FailNext(3, absl::UnavailableError("injected 500"));
  client.BreakWatches();
  CreatePod("ns", Pod("during1"));
  CreatePod("ns", Pod("during2"));
  ASSERT_THAT(store_.Delete("pods", "ns", "before"), IsOk());

  ASSERT_TRUE(Eventually([&] { return Keys(informer.List()) == StoreKeys(); }, kWait));
  EXPECT_GE(informer.watch_restarts(), 4) << "the broken stream and three failed watches";
  EXPECT_EQ(informer.relists(), 0) << "history was kept: re-watch, not relist";
  EXPECT_THAT(recorder_.adds(), UnorderedElementsAre("ns/before", "ns/during1", "ns/during2"));
  EXPECT_THAT(recorder_.deletes(), ElementsAre("ns/before"));
}

TEST_F(InformerTest, Resync_RedeliversEveryObject_OnTheInjectedClock) {
  CreatePod("ns", Pod("a"));
  CreatePod("ns", Pod("b"));
  Informer::Options options = FastOptions();
  options.resync_period = absl::Minutes(1);
  Informer informer(client_, clock_, kPods, options);
  informer.AddHandler(recorder_.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));
  EXPECT_THAT(recorder_.resyncs(), IsEmpty());

  clock_.Advance(absl::Minutes(1));
  ASSERT_TRUE(Eventually([&] { return recorder_.resyncs().size() == 2; }, kWait));
  EXPECT_THAT(recorder_.resyncs(), UnorderedElementsAre("ns/a", "ns/b"));
  EXPECT_THAT(recorder_.updates(), IsEmpty());
}

TEST_F(InformerTest, HandlerAddedAfterStart_FirstSeesTheCacheAsAdds) {
  CreatePod("ns", Pod("a"));
  Informer informer(client_, clock_, kPods, FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));
  informer.AddHandler(recorder_.Handler());
  ASSERT_TRUE(Eventually([&] { return recorder_.adds().size() == 1; }, kWait));
  ASSERT_THAT(client_.Create(kPods, "ns", Pod("b")), IsOk());
  ASSERT_TRUE(Eventually([&] { return recorder_.adds().size() == 2; }, kWait));
  EXPECT_THAT(recorder_.adds(), ElementsAre("ns/a", "ns/b"));
}

TEST_F(InformerTest, WaitForSync_FalseWhileListKeepsFailing_AndStopIsBounded) {
  client_.FailNext(1'000'000, absl::UnavailableError("injected 500"));
  Informer informer(client_, clock_, kPods, FastOptions());
  informer.Start();
  EXPECT_FALSE(informer.WaitForSync(absl::Milliseconds(200)));
  EXPECT_FALSE(informer.HasSynced());
  informer.Stop();
  informer.Stop();
  EXPECT_FALSE(informer.WaitForSync(absl::Seconds(5))) << "returns at once after Stop";
}

TEST_F(InformerTest, ClusterScopedObjects_AreKeyedByName) {
  const Resource nodes{"", "v1", "nodes", false};
  Json node = Json::object();
  node["metadata"]["name"] = Json::string("n1");
  ASSERT_THAT(client_.Create(nodes, "", node), IsOk());
  Informer informer(client_, clock_, nodes, FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));
  EXPECT_THAT(Keys(informer.List()), ElementsAre("n1"));
  EXPECT_TRUE(informer.Get("ignored-for-cluster-scope", "n1").has_value());
}

}  // namespace
}  // namespace phalanx::kube
