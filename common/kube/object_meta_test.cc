#include "common/kube/object_meta.h"

#include <gtest/gtest.h>

namespace phalanx::kube {
namespace {

constexpr char kPod[] = R"({
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
               "generation": 2, "labels": {"job": "j"}, "annotations": {"a": "b"},
               "ownerReferences": [{"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
                                    "name": "j", "uid": "owner", "controller": true}],
               "finalizers": ["f1"], "creationTimestamp": "2026-01-02T03:04:05Z",
               "managedFields": [{"manager": "kubectl"}], "someFutureField": 1},
  "spec": {"containers": [{"name": "c"}], "unknownSpecField": {"x": true}}
})";

TEST(ObjectMetaTest, DecodesEveryField) {
  const ObjectMeta m = ObjectMeta::Decode(Json::parse(kPod));
  EXPECT_EQ(m.name, "p");
  EXPECT_EQ(m.namespace_, "ns");
  EXPECT_EQ(m.uid, "u1");
  EXPECT_EQ(m.resource_version, "7");
  EXPECT_EQ(m.generation, 2);
  EXPECT_EQ(m.labels.at("job"), "j");
  EXPECT_EQ(m.annotations.at("a"), "b");
  ASSERT_EQ(m.owner_references.size(), 1u);
  EXPECT_TRUE(m.owner_references[0].controller);
  EXPECT_EQ(m.finalizers, std::vector<std::string>{"f1"});
  ASSERT_TRUE(m.creation_timestamp.has_value());
  EXPECT_EQ(FormatKubeTime(*m.creation_timestamp), "2026-01-02T03:04:05Z");
  EXPECT_FALSE(m.deletion_timestamp.has_value());
}

TEST(ObjectMetaTest, RoundTripKeepsUnknownFields) {
  Json object = Json::parse(kPod);
  ObjectMeta m = ObjectMeta::Decode(object);
  m.labels["incarnation"] = "3";
  m.finalizers.clear();
  m.EncodeInto(object);
  EXPECT_EQ(object.at("metadata").at("someFutureField").as_integer(), 1);
  EXPECT_TRUE(object.at("metadata").has_field("managedFields"));
  EXPECT_TRUE(object.at("spec").at("unknownSpecField").at("x").as_bool());
  EXPECT_FALSE(object.at("metadata").has_field("finalizers"));
  EXPECT_EQ(ObjectMeta::Decode(object).labels.at("incarnation"), "3");
  EXPECT_EQ(ControllerOf(object)->uid, "owner");
}

TEST(ObjectMetaTest, GarbageReadsAsEmptyWithoutThrowing) {
  for (const char* text :
       {"null", "[]", "3", R"({"metadata":7})",
        R"({"metadata":{"labels":[1],"ownerReferences":{"a":1},"generation":"x"}})"}) {
    const Json object = Json::parse(text);
    const ObjectMeta m = ObjectMeta::Decode(object);
    EXPECT_TRUE(m.name.empty()) << text;
    EXPECT_TRUE(m.labels.empty()) << text;
    EXPECT_TRUE(m.owner_references.empty()) << text;
    EXPECT_FALSE(ControllerOf(object).has_value()) << text;
    EXPECT_EQ(StringAt(object, "status.phase"), "") << text;
  }
}

TEST(ObjectMetaTest, TimesRoundTripAndBadTimesAreRejected) {
  EXPECT_EQ(FormatKubeTime(*ParseKubeTime("2026-11-22T05:00:00Z")), "2026-11-22T05:00:00Z");
  EXPECT_FALSE(ParseKubeTime("yesterday").has_value());
}

}  // namespace
}  // namespace phalanx::kube
