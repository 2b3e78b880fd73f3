// ParseWarningHeader: the API server's `Warning` headers (RFC 7234 5.5) as RestClient logs them
// and hands them to RestClientOptions::on_warning. The header values below are what kube-apiserver
// v1.26 sends (an unknown field under fieldValidation=Warn; PodSecurity in "warn" mode).
#include "common/kube/rest_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace phalanx::kube {
namespace {

using ::testing::ElementsAre;

TEST(ParseWarningHeader, ReadsEachWarningsText) {
  struct Case {
    std::string name;
    std::string value;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"unknownField", R"(299 - "unknown field \"spec.containers[0].comand\"")",
       {R"(unknown field "spec.containers[0].comand")"}},
      {"twoJoined", R"(299 - "first, with a comma", 299 - "second")",
       {"first, with a comma", "second"}},
      {"withDate", R"(299 - "dated" "Sat, 25 Aug 2012 23:34:45 GMT", 299 - "next")",
       {"dated", "next"}},
      {"podSecurity",
       R"(299 - "would violate PodSecurity \"restricted:latest\": seccompProfile")",
       {R"(would violate PodSecurity "restricted:latest": seccompProfile)"}},
      {"notTheUsualForm", "something odd", {"something odd"}},
      {"empty", "", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(ParseWarningHeader(c.value), c.want);
  }
}

TEST(RestClientOptions, StrictFieldValidationByDefault) {
  EXPECT_EQ(RestClientOptions{}.field_validation, "Strict");
}

}  // namespace
}  // namespace phalanx::kube
