#include "common/kube/field_selector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/kube/object_filter.h"
#include "common/testing/status_matchers.h"

namespace phalanx::kube {
namespace {

using ::phalanx::testing::StatusIs;

web::json::value Event() {
  return web::json::value::parse(
      R"({"metadata":{"name":"e1","namespace":"ns","labels":{"a":"b"}},"count":3,
          "involvedObject":{"name":"p1","uid":"u1"},"status":{"phase":"Running"}})");
}

TEST(FieldSelectorTest, EqualsAndNotEqualsOnDottedPaths) {
  EXPECT_TRUE(
      FieldSelector::Parse("involvedObject.name=p1,involvedObject.uid==u1")->Matches(Event()));
  EXPECT_FALSE(FieldSelector::Parse("involvedObject.name=p2")->Matches(Event()));
  EXPECT_TRUE(FieldSelector::Parse("status.phase!=Failed")->Matches(Event()));
  EXPECT_FALSE(FieldSelector::Parse("status.phase!=Running")->Matches(Event()));
}

TEST(FieldSelectorTest, MissingFieldsReadEmptyAndNumbersCompareAsText) {
  EXPECT_TRUE(FieldSelector::Parse("spec.nodeName=")->Matches(Event()));
  EXPECT_TRUE(FieldSelector::Parse("spec.nodeName!=n1")->Matches(Event()));
  EXPECT_TRUE(FieldSelector::Parse("count=3")->Matches(Event()));
}

TEST(FieldSelectorTest, EmptySelectsEverythingAndBadTermsAreNamed) {
  EXPECT_TRUE(FieldSelector::Parse("")->Matches(Event()));
  EXPECT_THAT(FieldSelector::Parse("metadata.name"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("metadata.name")));
  EXPECT_THAT(FieldSelector::Parse("=x"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ObjectFilterTest, BothSelectorsMustMatch) {
  EXPECT_TRUE(ObjectFilter::Parse("a=b", "metadata.name=e1")->Matches(Event()));
  EXPECT_FALSE(ObjectFilter::Parse("a=c", "metadata.name=e1")->Matches(Event()));
  EXPECT_FALSE(ObjectFilter::Parse("a=b", "metadata.name=e2")->Matches(Event()));
  EXPECT_THAT(ObjectFilter::Parse("a in (", ""), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace phalanx::kube
