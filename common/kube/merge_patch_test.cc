#include "common/kube/merge_patch.h"

#include <gtest/gtest.h>

namespace phalanx::kube {
namespace {

using web::json::value;

// The RFC 7386 appendix examples that matter for Kubernetes objects.
TEST(MergePatchTest, Rfc7386Cases) {
  struct Case {
    const char* target;
    const char* patch;
    const char* want;
  } cases[] = {
      {R"({"a":"b"})", R"({"a":"c"})", R"({"a":"c"})"},
      {R"({"a":"b"})", R"({"b":"c"})", R"({"a":"b","b":"c"})"},
      {R"({"a":"b"})", R"({"a":null})", R"({})"},
      {R"({"a":"b","b":"c"})", R"({"a":null})", R"({"b":"c"})"},
      {R"({"a":["b"]})", R"({"a":"c"})", R"({"a":"c"})"},
      {R"({"a":"c"})", R"({"a":["b"]})", R"({"a":["b"]})"},
      {R"({"a":{"b":"c"}})", R"({"a":{"b":"d","c":null}})", R"({"a":{"b":"d"}})"},
      {R"({"a":[{"b":"c"}]})", R"({"a":[1]})", R"({"a":[1]})"},
      {R"(["a","b"])", R"(["c","d"])", R"(["c","d"])"},
      {R"({"a":"b"})", R"(["c"])", R"(["c"])"},
      {R"({"e":null})", R"({"a":1})", R"({"e":null,"a":1})"},
      {R"([1,2])", R"({"a":"b","c":null})", R"({"a":"b"})"},
      {R"({})", R"({"a":{"bb":{"ccc":null}}})", R"({"a":{"bb":{}}})"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(MergePatch(value::parse(c.target), value::parse(c.patch)), value::parse(c.want))
        << c.target << " + " << c.patch;
  }
}

TEST(MergePatchTest, UnknownFieldsSurviveAPatch) {
  value object = value::parse(
      R"({"metadata":{"name":"p","labels":{"x":"1"}},"spec":{"futureField":{"k":[1,2]}}})");
  value patched = MergePatch(object, value::parse(R"({"metadata":{"labels":{"y":"2"}}})"));
  EXPECT_EQ(patched.at("spec").at("futureField"), object.at("spec").at("futureField"));
  EXPECT_EQ(patched.at("metadata").at("labels").size(), 2u);
}

}  // namespace
}  // namespace phalanx::kube
