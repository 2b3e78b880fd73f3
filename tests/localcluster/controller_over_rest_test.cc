// The controller machinery over the real REST client and the local cluster's HTTPS server:
// an informer that survives dropped watches, 410s and injected 500s and converges to the server's
// contents; leader election handing over between two clients; events written and aggregated.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/kube/event_recorder.h"
#include "common/kube/informer.h"
#include "common/kube/leader_election.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"
#include "common/kube/rest_client.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "tests/localcluster/local_cluster.h"

namespace phalanx::localcluster {
namespace {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::IsOk;

using kube::kConfigMaps;

Json NamedConfigMap(const std::string& name) {
  return Json::parse(absl::StrCat(R"({"metadata":{"name":")", name, R"("},"data":{"k":"v"}})"));
}

class ControllerOverRestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("phalanx-ctl-rest-", getpid());
    LocalClusterOptions options;
    options.nodes = 0;
    options.work_dir = dir_.string();
    options.history_limit = 100;
    absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
    ASSERT_THAT(cluster.status(), IsOk());
    cluster_ = *std::move(cluster);
    writer_ = NewClient();
  }
  void TearDown() override {
    if (cluster_) cluster_->Stop();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<kube::RestClient> NewClient() {
    return *kube::RestClient::Create(cluster_->client_config());
  }
  size_t CachedNames(const kube::Informer& informer) { return informer.List().size(); }

  std::filesystem::path dir_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<kube::RestClient> writer_;
  base::RealClock& clock_ = base::RealClock::Get();
};

TEST_F(ControllerOverRestTest, InformerConvergesThroughDroppedWatchesExpiryAndErrors) {
  std::unique_ptr<kube::RestClient> client = NewClient();
  kube::Informer::Options options;
  options.namespace_ = "default";
  options.initial_backoff = absl::Milliseconds(20);
  options.max_backoff = absl::Milliseconds(200);
  kube::Informer informer(*client, clock_, kConfigMaps, options);
  std::atomic<int> deletes{0};
  informer.AddHandler({.on_delete = [&](const Json&) { deletes.fetch_add(1); }});
  ASSERT_THAT(writer_->Create(kConfigMaps, "default", NamedConfigMap("a")).status(), IsOk());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(30)));
  EXPECT_TRUE(informer.Get("default", "a").has_value());

  // A dropped watch: the informer re-watches from its last version and misses nothing.
  cluster_->api().DropWatches();
  ASSERT_THAT(writer_->Create(kConfigMaps, "default", NamedConfigMap("b")).status(), IsOk());
  ASSERT_TRUE(
      Eventually([&] { return informer.Get("default", "b").has_value(); }, absl::Seconds(30)));

  // Every request fails for a while (500s), and meanwhile the history moves past the informer's
  // version: it must back off, then relist (410) and converge, delivering the delete it missed.
  cluster_->api().InjectErrors(1.0, 500);
  cluster_->api().DropWatches();
  cluster_->store().Delete("configmaps", "default", "a").IgnoreError();
  for (int i = 0; i < 150; ++i) {
    cluster_->store()
        .Create("configmaps", "default", NamedConfigMap(absl::StrCat("bulk", i)))
        .IgnoreError();
  }
  cluster_->api().InjectErrors(0, 500);
  ASSERT_TRUE(Eventually([&] { return CachedNames(informer) == 151; }, absl::Seconds(60)))
      << CachedNames(informer);
  EXPECT_FALSE(informer.Get("default", "a").has_value());
  EXPECT_EQ(deletes.load(), 1);
  EXPECT_GE(informer.relists(), 1);
  informer.Stop();
}

TEST_F(ControllerOverRestTest, LeaderElectionHandsOverBetweenTwoClients) {
  std::unique_ptr<kube::RestClient> client_a = NewClient();
  std::unique_ptr<kube::RestClient> client_b = NewClient();
  auto options = [](const std::string& identity) {
    kube::LeaderElector::Options o;
    o.lease_name = "phalanx-operator";
    o.lease_namespace = "default";
    o.identity = identity;
    o.lease_duration = absl::Seconds(20);
    o.renew_deadline = absl::Seconds(15);
    o.retry_period = absl::Milliseconds(100);
    return o;
  };
  auto a = kube::LeaderElector::Create(*client_a, clock_, options("a"));
  auto b = kube::LeaderElector::Create(*client_b, clock_, options("b"));
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  std::atomic<int> a_led{0}, b_led{0};
  (*a)->Run([&] { a_led = 1; }, [&] {});
  ASSERT_TRUE(Eventually([&] { return a_led.load() == 1; }, absl::Seconds(30)));
  (*b)->Run([&] { b_led = 1; }, [&] {});
  // b stays a candidate while a renews.
  ASSERT_TRUE(Eventually([&] { return (*b)->ObservedHolder() == "a"; }, absl::Seconds(30)));
  EXPECT_EQ(b_led.load(), 0);
  EXPECT_FALSE((*b)->IsLeader());
  // a steps down and releases: b takes over long before the 20 s lease would expire.
  (*a)->Stop();
  ASSERT_TRUE(Eventually([&] { return b_led.load() == 1; }, absl::Seconds(15)));
  absl::StatusOr<Json> lease = client_a->Get(kube::kLeaseResource, "default", "phalanx-operator");
  ASSERT_THAT(lease.status(), IsOk());
  EXPECT_EQ(kube::StringAt(*lease, "spec.holderIdentity"), "b");
  EXPECT_EQ(lease->at("spec").at("leaseTransitions").as_integer(), 1);
  (*b)->Stop();
}

TEST_F(ControllerOverRestTest, EventsAreRecordedAndAggregated) {
  absl::StatusOr<Json> owner = writer_->Create(kConfigMaps, "default", NamedConfigMap("job"));
  ASSERT_THAT(owner.status(), IsOk());
  kube::EventRecorder recorder(*writer_, clock_, "phalanx-operator");
  for (int i = 0; i < 3; ++i) {
    recorder.Record(*owner, kube::EventType::kWarning, "TaskRestarted", "task 1 restarted");
  }
  absl::StatusOr<kube::ObjectList> events =
      writer_->List(kube::kEventResource, "default", {.field_selector = "involvedObject.name=job"});
  ASSERT_THAT(events.status(), IsOk());
  ASSERT_EQ(events->items.size(), 1u);
  EXPECT_EQ(events->items[0].at("count").as_integer(), 3);
  EXPECT_EQ(events->items[0].at("reason").as_string(), "TaskRestarted");
}

}  // namespace
}  // namespace phalanx::localcluster
