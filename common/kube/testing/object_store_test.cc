#include "common/kube/testing/object_store.h"

#include "common/kube/object_meta.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::kube::fake {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

Json Parse(const std::string& text) { return Json::parse(text); }

Json Pod(const std::string& name, const std::string& labels = "{}") {
  return Parse(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":")" + name + R"(","labels":)" +
               labels + R"(},"spec":{"containers":[]},"status":{"phase":"Pending"}})");
}

std::string Rv(const Json& object) {
  return object.at("metadata").at("resourceVersion").as_string();
}
int64_t Generation(const Json& object) {
  return object.at("metadata").at("generation").as_number().to_int64();
}

class ObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { store_.EnableStatusSubresource("pods"); }
  phalanx::testing::FakeClock clock_;
  ObjectStore store_{clock_, 5};
};

TEST_F(ObjectStoreTest, Create_AssignsMetadata_AndRefusesDuplicates) {
  auto pod = store_.Create("pods", "default", Pod("p1"));
  ASSERT_THAT(pod, IsOk());
  const Json& meta = pod->at("metadata");
  EXPECT_FALSE(meta.at("uid").as_string().empty());
  EXPECT_EQ(meta.at("namespace").as_string(), "default");
  EXPECT_EQ(Generation(*pod), 1);
  EXPECT_FALSE(pod->has_field("status")) << "status is the status subresource's";
  EXPECT_THAT(store_.Create("pods", "default", Pod("p1")),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(store_.Create("pods", "other", Pod("p1")), IsOk()) << "names are per namespace";
  EXPECT_THAT(store_.Create("pods", "default", Parse(R"({"metadata":{}})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("metadata.name")));
}

TEST_F(ObjectStoreTest, Update_StaleResourceVersion_IsAConflict) {
  Json pod = *store_.Create("pods", "ns", Pod("p"));
  Json first = pod;
  first["metadata"]["labels"]["a"] = Json::string("1");
  auto updated = store_.Update("pods", "ns", first, false);
  ASSERT_THAT(updated, IsOk());
  EXPECT_GT(std::stoull(Rv(*updated)), std::stoull(Rv(pod)));
  Json stale = pod;  // still carries the old resourceVersion
  EXPECT_THAT(store_.Update("pods", "ns", stale, false),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("has been modified")));
}

TEST_F(ObjectStoreTest, Generation_BumpsOnSpecChangeOnly_AndStatusIsItsOwnSubresource) {
  Json pod = *store_.Create("pods", "ns", Pod("p"));
  Json labels_only = pod;
  labels_only["metadata"]["labels"]["x"] = Json::string("y");
  labels_only["status"] = Parse(R"({"phase":"Running"})");  // ignored on the main resource
  pod = *store_.Update("pods", "ns", labels_only, false);
  EXPECT_EQ(Generation(pod), 1);
  EXPECT_FALSE(pod.has_field("status"));

  Json status = pod;
  status["status"] = Parse(R"({"phase":"Running"})");
  status["spec"] = Parse(R"({"changed":true})");  // ignored on the status subresource
  pod = *store_.Update("pods", "ns", status, true);
  EXPECT_EQ(pod.at("status").at("phase").as_string(), "Running");
  EXPECT_EQ(Generation(pod), 1);

  Json spec = pod;
  spec["spec"] = Parse(R"({"containers":[{"name":"c"}]})");
  pod = *store_.Update("pods", "ns", spec, false);
  EXPECT_EQ(Generation(pod), 2);
  EXPECT_EQ(pod.at("status").at("phase").as_string(), "Running") << "status kept";
}

TEST_F(ObjectStoreTest, Finalizers_DelayDeletionUntilRemoved) {
  Json pod = Pod("p");
  pod["metadata"]["finalizers"] = Parse(R"(["phalanx.dev/cleanup"])");
  pod = *store_.Create("pods", "ns", pod);
  auto marked = store_.Delete("pods", "ns", "p");
  ASSERT_THAT(marked, IsOk());
  EXPECT_TRUE(marked->at("metadata").has_field("deletionTimestamp"));
  EXPECT_THAT(store_.Get("pods", "ns", "p"), IsOk());
  Json cleared = *marked;
  cleared["metadata"]["finalizers"] = Json::array();
  ASSERT_THAT(store_.Update("pods", "ns", cleared, false), IsOk());
  EXPECT_THAT(store_.Get("pods", "ns", "p"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ObjectStoreTest, Delete_UidPrecondition) {
  store_.Create("pods", "ns", Pod("p")).IgnoreError();
  EXPECT_THAT(store_.Delete("pods", "ns", "p", "wrong-uid"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("UID")));
  EXPECT_THAT(store_.Delete("pods", "ns", "p"), IsOk());
  EXPECT_THAT(store_.Delete("pods", "ns", "p"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ObjectStoreTest, List_FiltersByNamespaceAndLabels_AndPages) {
  for (const char* name : {"a", "b", "c", "d"}) {
    store_.Create("pods", "ns", Pod(name, R"({"job":"j1"})")).IgnoreError();
  }
  store_.Create("pods", "ns", Pod("e", R"({"job":"j2"})")).IgnoreError();
  store_.Create("pods", "elsewhere", Pod("f", R"({"job":"j1"})")).IgnoreError();
  const auto j1 = *kube::ObjectFilter::Parse("job=j1", "");
  auto all = store_.List("pods", "", j1, 0, "");
  ASSERT_THAT(all, IsOk());
  EXPECT_EQ(all->items.size(), 5u);
  std::vector<std::string> names;
  std::string token;
  do {
    auto page = store_.List("pods", "ns", j1, 3, token);
    ASSERT_THAT(page, IsOk());
    for (const Json& item : page->items)
      names.push_back(item.at("metadata").at("name").as_string());
    token = page->continue_token;
  } while (!token.empty());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_THAT(store_.List("pods", "ns", j1, 3, "garbage"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ObjectStoreTest, Watch_HistoryFromAVersion_AndGoneWhenTooOld) {
  const uint64_t start = store_.resource_version();
  store_.Create("pods", "ns", Pod("a")).IgnoreError();
  store_.Create("pods", "ns", Pod("b")).IgnoreError();
  store_.Delete("pods", "ns", "a").IgnoreError();
  auto events = store_.EventsSince("pods", "ns", start);
  ASSERT_THAT(events, IsOk());
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].type, "ADDED");
  EXPECT_EQ((*events)[2].type, "DELETED");
  EXPECT_LT((*events)[0].resource_version, (*events)[2].resource_version);
  // History holds 5 events; three more writes push the first ones out.
  for (const char* name : {"c", "d", "e"}) store_.Create("pods", "ns", Pod(name)).IgnoreError();
  EXPECT_THAT(store_.EventsSince("pods", "ns", start),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("too old")));
  EXPECT_THAT(store_.EventsSince("pods", "ns", store_.resource_version()), IsOk());
}

}  // namespace
}  // namespace phalanx::kube::fake

namespace phalanx::kube::fake {
namespace {

Json Owned(const std::string& name, const Json& owner) {
  Json pod = Pod(name);
  Json ref = Json::object();
  ref["apiVersion"] = Json::string("phalanx.dev/v1alpha1");
  ref["kind"] = Json::string("TrainingJob");
  ref["name"] = owner.at("metadata").at("name");
  ref["uid"] = owner.at("metadata").at("uid");
  ref["controller"] = Json::boolean(true);
  pod["metadata"]["ownerReferences"] = Json::array();
  pod["metadata"]["ownerReferences"][0] = ref;
  return pod;
}

TEST_F(ObjectStoreTest, GarbageCollection_Background_DeletesDependentsOfAGoneOwner) {
  Json job =
      *store_.Create("trainingjobs.phalanx.dev", "ns", Parse(R"({"metadata":{"name":"j"}})"));
  store_.Create("pods", "ns", Owned("j-0", job)).IgnoreError();
  store_.Create("pods", "ns", Owned("j-1", job)).IgnoreError();
  store_.Create("pods", "ns", Pod("unowned")).IgnoreError();
  EXPECT_EQ(store_.CollectGarbage(), 0);
  ASSERT_THAT(store_.Delete("trainingjobs.phalanx.dev", "ns", "j"), IsOk());
  EXPECT_EQ(store_.CollectGarbage(), 2);
  EXPECT_THAT(store_.Get("pods", "ns", "j-0"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_.Get("pods", "ns", "unowned"), IsOk());
}

TEST_F(ObjectStoreTest, GarbageCollection_Foreground_OwnerGoesAfterItsDependents) {
  Json job =
      *store_.Create("trainingjobs.phalanx.dev", "ns", Parse(R"({"metadata":{"name":"j"}})"));
  store_.Create("pods", "ns", Owned("j-0", job)).IgnoreError();
  auto marked = store_.Delete("trainingjobs.phalanx.dev", "ns", "j", "",
                              ObjectStore::Propagation::kForeground);
  ASSERT_THAT(marked, IsOk());
  EXPECT_TRUE(marked->at("metadata").has_field("deletionTimestamp"));
  EXPECT_THAT(store_.Get("trainingjobs.phalanx.dev", "ns", "j"), IsOk()) << "waits for dependents";
  EXPECT_GE(store_.CollectGarbage(), 2);
  EXPECT_THAT(store_.Get("pods", "ns", "j-0"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_.Get("trainingjobs.phalanx.dev", "ns", "j"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ObjectStoreTest, GarbageCollection_Orphan_KeepsDependentsWithoutTheReference) {
  Json job =
      *store_.Create("trainingjobs.phalanx.dev", "ns", Parse(R"({"metadata":{"name":"j"}})"));
  store_.Create("pods", "ns", Owned("j-0", job)).IgnoreError();
  ASSERT_THAT(
      store_.Delete("trainingjobs.phalanx.dev", "ns", "j", "", ObjectStore::Propagation::kOrphan),
      IsOk());
  EXPECT_EQ(store_.CollectGarbage(), 0);
  auto pod = store_.Get("pods", "ns", "j-0");
  ASSERT_THAT(pod, IsOk());
  // kube-apiserver drops the emptied list (ownerReferences is omitempty).
  EXPECT_FALSE(pod->at("metadata").has_field("ownerReferences"));
}

Json BoundPod(const std::string& name, const std::string& extra_spec = "") {
  return Parse(R"({"metadata":{"name":")" + name + R"("},"spec":{"nodeName":"n1")" + extra_spec +
               R"(,"containers":[{"name":"c"}]}})");
}

TEST_F(ObjectStoreTest, GracefulDelete_BoundPod_IsMarkedUntilDeletedWithGraceZero) {
  store_.Create("pods", "ns", BoundPod("p", R"(,"terminationGracePeriodSeconds":5)")).IgnoreError();
  const uint64_t before = store_.resource_version();
  auto marked = store_.Delete("pods", "ns", "p");
  ASSERT_THAT(marked, IsOk());
  const Json& meta = marked->at("metadata");
  EXPECT_EQ(meta.at("deletionTimestamp").as_string(),
            kube::FormatKubeTime(clock_.Now() + absl::Seconds(5)));
  EXPECT_EQ(meta.at("deletionGracePeriodSeconds").as_number().to_int64(), 5);
  auto events = store_.EventsSince("pods", "ns", before);
  ASSERT_THAT(events, IsOk());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].type, "MODIFIED");

  // The kubelet keeps writing status while the pod terminates: that must not remove it.
  Json status = *marked;
  status["status"] = Parse(R"({"phase":"Running"})");
  ASSERT_THAT(store_.Update("pods", "ns", status, true), IsOk());
  Json relabel = *store_.Get("pods", "ns", "p");
  relabel["metadata"]["labels"] = Parse(R"({"a":"b"})");
  relabel["metadata"]["deletionGracePeriodSeconds"] = Json::number(0);  // immutable
  auto relabelled = store_.Update("pods", "ns", relabel, false);
  ASSERT_THAT(relabelled, IsOk());
  EXPECT_EQ(relabelled->at("metadata").at("deletionGracePeriodSeconds").as_number().to_int64(), 5);

  ASSERT_THAT(store_.Delete("pods", "ns", "p", "", ObjectStore::Propagation::kBackground, 0),
              IsOk());
  EXPECT_THAT(store_.Get("pods", "ns", "p"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ObjectStoreTest, GracefulDelete_DefaultsTo30s_AndASecondDeleteOnlyShortens) {
  store_.Create("pods", "ns", BoundPod("p")).IgnoreError();
  auto marked = store_.Delete("pods", "ns", "p");
  ASSERT_THAT(marked, IsOk());
  EXPECT_EQ(marked->at("metadata").at("deletionGracePeriodSeconds").as_number().to_int64(), 30);
  auto longer = store_.Delete("pods", "ns", "p", "", ObjectStore::Propagation::kBackground, 60);
  ASSERT_THAT(longer, IsOk());
  EXPECT_EQ(longer->at("metadata").at("deletionTimestamp"),
            marked->at("metadata").at("deletionTimestamp"));
  auto shorter = store_.Delete("pods", "ns", "p", "", ObjectStore::Propagation::kBackground, 2);
  ASSERT_THAT(shorter, IsOk());
  EXPECT_EQ(shorter->at("metadata").at("deletionGracePeriodSeconds").as_number().to_int64(), 2);
  EXPECT_EQ(shorter->at("metadata").at("deletionTimestamp").as_string(),
            kube::FormatKubeTime(clock_.Now() + absl::Seconds(2)));
}

TEST_F(ObjectStoreTest, GracefulDelete_UnboundFinishedOrOtherResources_GoAtOnce) {
  struct Case {
    std::string name;
    std::string resource;
    Json object;
    std::string phase;
  };
  const std::vector<Case> cases = {
      {"unbound pod", "pods", Pod("unbound"), ""},
      {"succeeded pod", "pods", BoundPod("done"), "Succeeded"},
      {"failed pod", "pods", BoundPod("failed"), "Failed"},
      {"other resource", "trainingjobs.phalanx.dev", BoundPod("job"), ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Json created = *store_.Create(c.resource, "ns", c.object);
    if (!c.phase.empty()) {
      created["status"] = Parse(R"({"phase":")" + c.phase + R"("})");
      ASSERT_THAT(store_.Update(c.resource, "ns", created, true), IsOk());
    }
    const std::string name = created.at("metadata").at("name").as_string();
    ASSERT_THAT(
        store_.Delete(c.resource, "ns", name, "", ObjectStore::Propagation::kBackground, 10),
        IsOk());
    EXPECT_THAT(store_.Get(c.resource, "ns", name), StatusIs(absl::StatusCode::kNotFound));
  }
  store_.Create("pods", "ns", BoundPod("zero", R"(,"terminationGracePeriodSeconds":0)"))
      .IgnoreError();
  ASSERT_THAT(store_.Delete("pods", "ns", "zero"), IsOk());
  EXPECT_THAT(store_.Get("pods", "ns", "zero"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ObjectStoreTest, GracefulDelete_WithFinalizers_GraceZeroStillWaitsForThem) {
  Json pod = BoundPod("p");
  pod["metadata"]["finalizers"] = Parse(R"(["phalanx.dev/cleanup"])");
  store_.Create("pods", "ns", pod).IgnoreError();
  ASSERT_THAT(store_.Delete("pods", "ns", "p"), IsOk());
  auto cut = store_.Delete("pods", "ns", "p", "", ObjectStore::Propagation::kBackground, 0);
  ASSERT_THAT(cut, IsOk());
  EXPECT_EQ(cut->at("metadata").at("deletionGracePeriodSeconds").as_number().to_int64(), 0);
  Json cleared = *cut;
  cleared["metadata"]["finalizers"] = Json::array();
  ASSERT_THAT(store_.Update("pods", "ns", cleared, false), IsOk());
  EXPECT_THAT(store_.Get("pods", "ns", "p"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ObjectStoreTest, GarbageCollection_RunningPodOfAGoneOwner_IsDeletedGracefully) {
  Json job =
      *store_.Create("trainingjobs.phalanx.dev", "ns", Parse(R"({"metadata":{"name":"j"}})"));
  Json pod = Owned("j-0", job);
  pod["spec"]["nodeName"] = Json::string("n1");
  store_.Create("pods", "ns", pod).IgnoreError();
  ASSERT_THAT(store_.Delete("trainingjobs.phalanx.dev", "ns", "j"), IsOk());
  EXPECT_EQ(store_.CollectGarbage(), 1);
  auto marked = store_.Get("pods", "ns", "j-0");
  ASSERT_THAT(marked, IsOk()) << "its kubelet stops it first";
  EXPECT_TRUE(marked->at("metadata").has_field("deletionTimestamp"));
  EXPECT_EQ(store_.CollectGarbage(), 0);
}

}  // namespace
}  // namespace phalanx::kube::fake
