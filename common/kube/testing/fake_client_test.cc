#include "common/kube/testing/fake_client.h"

#include <thread>

#include "common/kube/resources.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::kube::fake {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;

using kube::kPods;

Json JobPod(const std::string& name, const std::string& job) {
  return Json::parse(R"({"metadata":{"name":")" + name + R"(","labels":{"job":")" + job +
                     R"("}},"spec":{}})");
}

class FakeClientTest : public ::testing::Test {
 protected:
  ObjectStore store_{base::RealClock::Get(), 100};
  FakeClient client_{store_};
};

TEST_F(FakeClientTest, CrudThroughTheClientInterface) {
  ASSERT_THAT(client_.Create(kPods, "ns", JobPod("a", "j1")), IsOk());
  auto got = client_.Get(kPods, "ns", "a");
  ASSERT_THAT(got, IsOk());
  auto list = client_.List(kPods, "ns", {.label_selector = "job=j1"});
  ASSERT_THAT(list, IsOk());
  EXPECT_EQ(list->items.size(), 1u);
  EXPECT_FALSE(list->resource_version.empty());
  Json status = *got;
  status["status"] = Json::parse(R"({"phase":"Running"})");
  EXPECT_THAT(client_.UpdateStatus(kPods, "ns", status), IsOk());
  EXPECT_THAT(client_.Update(kPods, "ns", *got), StatusIs(absl::StatusCode::kAborted))
      << "stale resourceVersion after the status write";
  EXPECT_THAT(client_.Delete(kPods, "ns", "a", {}), IsOk());
  EXPECT_THAT(client_.Get(kPods, "ns", "a"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(client_.List(kPods, "ns", {.label_selector = "job in ("}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(FakeClientTest, InjectedFailures_HitTheNextCallsOnly) {
  client_.FailNext(2, absl::UnavailableError("injected 500"));
  EXPECT_THAT(client_.Create(kPods, "ns", JobPod("a", "j")),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(client_.Get(kPods, "ns", "a"), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(client_.Create(kPods, "ns", JobPod("a", "j")), IsOk());
}

TEST_F(FakeClientTest, Watch_DeliversMatchingEventsFromAVersion) {
  auto list = client_.List(kPods, "ns", {});
  ASSERT_THAT(list, IsOk());
  auto watch = client_.Watch(
      kPods, "ns", {.resource_version = list->resource_version, .label_selector = "job=j1"});
  ASSERT_THAT(watch, IsOk());
  std::thread writer([&] {
    client_.Create(kPods, "ns", JobPod("other", "j2")).IgnoreError();
    client_.Create(kPods, "ns", JobPod("mine", "j1")).IgnoreError();
  });
  auto event = (*watch)->Next(absl::Seconds(20));
  writer.join();
  ASSERT_THAT(event, IsOk());
  ASSERT_TRUE(event->has_value());
  EXPECT_EQ((*event)->type, "ADDED");
  EXPECT_EQ((*event)->object.at("metadata").at("name").as_string(), "mine");
  auto idle = (*watch)->Next(absl::Milliseconds(10));
  ASSERT_THAT(idle, IsOk());
  EXPECT_FALSE(idle->has_value());
}

TEST_F(FakeClientTest, Watch_FromAnExpiredVersion_IsOutOfRange) {
  ObjectStore small(base::RealClock::Get(), 2);
  FakeClient client(small);
  for (const char* name : {"a", "b", "c", "d"})
    client.Create(kPods, "ns", JobPod(name, "j")).IgnoreError();
  auto watch = client.Watch(kPods, "ns", {.resource_version = "1"});
  ASSERT_THAT(watch, IsOk());
  EXPECT_THAT((*watch)->Next(absl::Seconds(1)), StatusIs(absl::StatusCode::kOutOfRange));
}

}  // namespace
}  // namespace phalanx::kube::fake
