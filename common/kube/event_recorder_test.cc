#include "common/kube/event_recorder.h"

#include <string>
#include <thread>
#include <vector>

#include "common/kube/object_meta.h"
#include "common/kube/testing/fake_client.h"
#include "common/kube/testing/object_store.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::kube {
namespace {

using ::phalanx::testing::IsOk;
using ::testing::MatchesRegex;
using ::testing::SizeIs;

const Resource kRecordedJobs{"phalanx.dev", "v1", "trainingjobs", true};

class EventRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Json job = Json::object();
    job["apiVersion"] = Json::string("phalanx.dev/v1");
    job["kind"] = Json::string("TrainingJob");
    job["metadata"]["name"] = Json::string("train");
    auto created = client_.Create(kRecordedJobs, "ml", job);
    ASSERT_THAT(created, IsOk());
    job_ = *created;
  }
  std::vector<Json> Events(const std::string& ns = "ml") {
    auto list = client_.List(kEventResource, ns, {});
    EXPECT_THAT(list, IsOk());
    return list->items;
  }

  testing::FakeClock clock_;
  kube::fake::ObjectStore store_{clock_};
  kube::fake::FakeClient client_{store_};
  EventRecorder recorder_{client_, clock_, "phalanx-operator", "node-1"};
  Json job_;
};

TEST_F(EventRecorderTest, Record_CreatesACoreEvent) {
  recorder_.Record(job_, EventType::kNormal, "Created", "created 4 pods");
  const std::vector<Json> events = Events();
  ASSERT_THAT(events, SizeIs(1));
  const Json& e = events[0];
  EXPECT_THAT(MetaString(e, "name"), MatchesRegex("train\\.[0-9a-f]{16}"));
  EXPECT_EQ(MetaString(e, "namespace"), "ml");
  EXPECT_EQ(StringAt(e, "involvedObject.apiVersion"), "phalanx.dev/v1");
  EXPECT_EQ(StringAt(e, "involvedObject.kind"), "TrainingJob");
  EXPECT_EQ(StringAt(e, "involvedObject.name"), "train");
  EXPECT_EQ(StringAt(e, "involvedObject.namespace"), "ml");
  EXPECT_EQ(StringAt(e, "involvedObject.uid"), MetaString(job_, "uid"));
  EXPECT_EQ(StringAt(e, "involvedObject.resourceVersion"), MetaString(job_, "resourceVersion"));
  EXPECT_EQ(StringAt(e, "reason"), "Created");
  EXPECT_EQ(StringAt(e, "message"), "created 4 pods");
  EXPECT_EQ(StringAt(e, "type"), "Normal");
  EXPECT_EQ(StringAt(e, "source.component"), "phalanx-operator");
  EXPECT_EQ(StringAt(e, "source.host"), "node-1");
  EXPECT_EQ(StringAt(e, "reportingComponent"), "phalanx-operator");
  EXPECT_EQ(StringAt(e, "reportingInstance"), "node-1");
  EXPECT_EQ(StringAt(e, "firstTimestamp"), FormatKubeTime(clock_.Now()));
  EXPECT_EQ(StringAt(e, "lastTimestamp"), FormatKubeTime(clock_.Now()));
  EXPECT_EQ(e.at("count").as_integer(), 1);
  EXPECT_EQ(recorder_.created(), 1);
}

TEST_F(EventRecorderTest, Repeats_WithinTheWindow_AreAggregated) {
  const absl::Time first = clock_.Now();
  recorder_.Record(job_, EventType::kWarning, "PodFailed", "pod train-0 failed");
  clock_.Advance(absl::Minutes(1));
  recorder_.Record(job_, EventType::kWarning, "PodFailed", "pod train-0 failed");
  clock_.Advance(absl::Minutes(9));
  recorder_.Record(job_, EventType::kWarning, "PodFailed", "pod train-0 failed");
  const std::vector<Json> events = Events();
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_EQ(events[0].at("count").as_integer(), 3);
  EXPECT_EQ(StringAt(events[0], "type"), "Warning");
  EXPECT_EQ(StringAt(events[0], "firstTimestamp"), FormatKubeTime(first));
  EXPECT_EQ(StringAt(events[0], "lastTimestamp"), FormatKubeTime(clock_.Now()));
  EXPECT_EQ(recorder_.aggregated(), 2);

  // Ten quiet minutes later the same event starts a new Event object.
  clock_.Advance(absl::Minutes(10));
  recorder_.Record(job_, EventType::kWarning, "PodFailed", "pod train-0 failed");
  EXPECT_THAT(Events(), SizeIs(2));
}

TEST_F(EventRecorderTest, DifferentMessageTypeOrObject_CreatesNewEvents) {
  recorder_.Record(job_, EventType::kNormal, "Scaled", "to 4");
  recorder_.Record(job_, EventType::kNormal, "Scaled", "to 8");
  recorder_.Record(job_, EventType::kWarning, "Scaled", "to 8");
  Json other = job_;
  other["metadata"]["uid"] = Json::string("another-uid");
  recorder_.Record(other, EventType::kNormal, "Scaled", "to 4");
  const std::vector<Json> events = Events();
  ASSERT_THAT(events, SizeIs(4));
  for (const Json& e : events) EXPECT_EQ(e.at("count").as_integer(), 1);
}

TEST_F(EventRecorderTest, ApiFailure_IsSwallowed_AndTheNextRepeatCreatesAfresh) {
  client_.FailNext(1, absl::UnavailableError("injected 500"));
  recorder_.Record(job_, EventType::kNormal, "Created", "x");  // must not throw or fail
  EXPECT_EQ(recorder_.failures(), 1);
  EXPECT_THAT(Events(), SizeIs(0));
  recorder_.Record(job_, EventType::kNormal, "Created", "x");
  ASSERT_THAT(Events(), SizeIs(1));
  EXPECT_EQ(Events()[0].at("count").as_integer(), 1);

  // A failed aggregation patch is dropped too; the following repeat creates a new Event.
  client_.FailNext(1, absl::UnavailableError("injected 500"));
  recorder_.Record(job_, EventType::kNormal, "Created", "x");
  EXPECT_EQ(recorder_.failures(), 2);
  recorder_.Record(job_, EventType::kNormal, "Created", "x");
  EXPECT_THAT(Events(), SizeIs(2));
}

TEST_F(EventRecorderTest, ClusterScopedObject_EventGoesToDefaultNamespace) {
  Json node = Json::object();
  node["apiVersion"] = Json::string("v1");
  node["kind"] = Json::string("Node");
  node["metadata"]["name"] = Json::string("n1");
  node["metadata"]["uid"] = Json::string("node-uid");
  recorder_.Record(node, EventType::kWarning, "GpuXid", "Xid 79 on GPU 3");
  const std::vector<Json> events = Events("default");
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_EQ(StringAt(events[0], "involvedObject.kind"), "Node");
  EXPECT_FALSE(events[0].at("involvedObject").has_field("namespace"));
}

TEST_F(EventRecorderTest, ConcurrentRecords_AreSafe_AndNamesStayUnique) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        recorder_.Record(job_, EventType::kNormal, "Step",
                         "thread " + std::to_string(t) + " step " + std::to_string(i));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(Events(), SizeIs(40)) << "same clock instant, still 40 distinct names";
  EXPECT_EQ(recorder_.failures(), 0);
}

}  // namespace
}  // namespace phalanx::kube
