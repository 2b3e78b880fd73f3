#include "common/kube/label_selector.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::kube {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

TEST(LabelSelector, MatchesLikeKubernetes) {
  const std::map<std::string, std::string> pod = {
      {"phalanx.dev/job", "j1"}, {"phalanx.dev/task", "3"}, {"tier", "gpu"}};
  struct Case {
    std::string selector;
    bool matches;
  };
  const std::vector<Case> cases = {
      {"", true},
      {"phalanx.dev/job=j1", true},
      {"phalanx.dev/job==j1", true},
      {"phalanx.dev/job=j2", false},
      {"phalanx.dev/job!=j2", true},
      {"phalanx.dev/job=j1,tier=gpu", true},
      {"phalanx.dev/job=j1,tier=cpu", false},
      {"tier in (gpu, tpu)", true},
      {"tier notin (gpu)", false},
      {"missing notin (a)", true},
      {"tier", true},
      {"!tier", false},
      {"!missing", true},
      {" phalanx.dev/task = 3 , tier ", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.selector);
    auto selector = LabelSelector::Parse(c.selector);
    ASSERT_THAT(selector, IsOk());
    EXPECT_EQ(selector->Matches(pod), c.matches);
  }
}

TEST(LabelSelector, MalformedSelectors_AreInvalidArgument) {
  for (const std::string bad : {"a=b,,c=d", "tier in (a,b", "tier in ()", "tier among (a)", "a b=c",
                                "key=va lue", "=x", "x in (a,)"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(LabelSelector::Parse(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("label selector")));
  }
}

}  // namespace
}  // namespace phalanx::kube
