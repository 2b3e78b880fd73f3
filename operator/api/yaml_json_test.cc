// YamlToJson: YAML 1.2 core-schema typing of scalars, structure, and errors.
#include "operator/api/yaml_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/testing/status_matchers.h"

namespace phalanx::op {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

TEST(YamlToJson, ScalarsAreTypedAsTheCoreSchemaSays) {
  struct Case {
    std::string yaml;
    std::string json;
  };
  const std::vector<Case> cases = {
      {"v: 42", R"({"v":42})"},
      {"v: -7", R"({"v":-7})"},
      {"v: +12", R"({"v":12})"},
      {"v: 0777", R"({"v":777})"},  // 1.2: a leading zero is still decimal
      {"v: 0o17", R"({"v":15})"},
      {"v: 0x1F", R"({"v":31})"},
      {"v: 9223372036854775807", R"({"v":9223372036854775807})"},
      {"v: -9223372036854775808", R"({"v":-9223372036854775808})"},
      {"v: 18446744073709551615", R"({"v":18446744073709551615})"},
      {"v: 1.5", R"({"v":1.5})"},
      {"v: -.5", R"({"v":-0.5})"},
      {"v: 1e3", R"({"v":1000.0})"},
      {"v: 2.5E-1", R"({"v":0.25})"},
      {"v: true", R"({"v":true})"},
      {"v: False", R"({"v":false})"},
      {"v: TRUE", R"({"v":true})"},
      {"v: yes", R"({"v":"yes"})"},  // a YAML 1.1 boolean, a string in 1.2
      {"v: on", R"({"v":"on"})"},
      {"v: null", R"({"v":null})"},
      {"v: ~", R"({"v":null})"},
      {"v:", R"({"v":null})"},
      {"v: NULL", R"({"v":null})"},
      {"v: 1_000", R"({"v":"1_000"})"},
      {"v: 3e-4x", R"({"v":"3e-4x"})"},
      {"v: 10s", R"({"v":"10s"})"},
      {"v: \"42\"", R"({"v":"42"})"},  // quoted scalars stay strings
      {"v: 'true'", R"({"v":"true"})"},
      {"v: \"null\"", R"({"v":"null"})"},
      {"v: ''", R"({"v":""})"},
      {"v: !!str 42", R"({"v":"42"})"},
      {"v: !!int \"42\"", R"({"v":42})"},
      {"v: !!float 1", R"({"v":1.0})"},
      {"v: !!bool \"false\"", R"({"v":false})"},
      {"v: !!null ''", R"({"v":null})"},
      {"v: |\n  12\n", R"({"v":"12\n"})"},  // block scalars stay strings
      {"v: >-\n  a\n  b\n", R"({"v":"a b"})"},
      {"v: hello world", R"({"v":"hello world"})"},
      {"80: http", R"({"80":"http"})"},  // keys are always text
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    absl::StatusOr<Json> json = YamlToJson(c.yaml);
    ASSERT_THAT(json.status(), IsOk());
    const Json expected = Json::parse(c.json);
    EXPECT_EQ(*json, expected) << json->serialize();
    // Integers stay integers and floats floats (the API server's schema tells them apart).
    const Json& v = json->at(json->as_object().begin()->first);
    const Json& e = expected.at(expected.as_object().begin()->first);
    if (e.is_number()) {
      EXPECT_EQ(v.is_integer(), e.is_integer());
    }
  }
}

TEST(YamlToJson, StructuresAnchorsAndEmptyDocuments) {
  absl::StatusOr<Json> json = YamlToJson(R"(
# a comment
base: &base {a: 1, b: [x, "y", 3]}
copy: *base
list:
  - name: one
    args: ["--steps=3", --flag]
  - []
  - {}
)");
  ASSERT_THAT(json.status(), IsOk());
  EXPECT_EQ(*json, Json::parse(R"({"base":{"a":1,"b":["x","y",3]},"copy":{"a":1,"b":["x","y",3]},)"
                               R"("list":[{"name":"one","args":["--steps=3","--flag"]},[],{}]})"));
  EXPECT_EQ(*YamlToJson(""), Json::null());
  EXPECT_EQ(*YamlToJson("# only a comment\n"), Json::null());
  EXPECT_EQ(*YamlToJson("- 1\n- two\n"), Json::parse(R"([1,"two"])"));
  EXPECT_EQ(*YamlToJson("just text"), Json::string("just text"));
}

TEST(YamlToJson, Errors_AreInvalidArgumentSayingWhere) {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"a: [1, 2\nb: 3\n", "invalid YAML"},
      {"a: 1\n- b\n", "invalid YAML"},
      {"a: 1\na: 2\n", "has the key \"a\" twice at line 2"},
      {"? [1, 2]\n: x\n", "mapping key is not a scalar"},
      {"v: .inf", "has no JSON form"},
      {"v: .nan", "has no JSON form"},
      {"v: !!int abc", "is not a valid !!int"},
      {"v: !!bool maybe", "is not a valid !!bool"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    EXPECT_THAT(YamlToJson(c.yaml),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
}

// Found by fuzz/yaml_json_fuzz.cc: bytes that are not UTF-8 became JSON strings that no JSON
// parser (cpprestsdk's included) reads back, so a manifest converted fine and was then refused
// (or garbled) wherever the JSON went. YAML text is Unicode; such bytes are a syntax error.
TEST(YamlToJson, InvalidUtf8_IsAnErrorNotJsonThatCannotBeRead) {
  const std::vector<std::string> cases = {
      "b: \xff"
      "9223372036854775808\n",  // a plain scalar (the fuzzer's find)
      "b: \"caf\xc3\"\n",       // a quoted scalar ending mid-character
      "\xed\xa0\x80: x\n",      // a key holding an encoded surrogate
      "b: \xc0\xaf\n",          // an overlong '/'
  };
  for (const std::string& yaml : cases) {
    SCOPED_TRACE(yaml);
    EXPECT_THAT(YamlToJson(yaml),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not valid UTF-8")));
  }
  absl::StatusOr<Json> ok = YamlToJson("b: \"caf\xc3\xa9 \xf0\x9f\x9a\x80\"\n");
  ASSERT_THAT(ok.status(), IsOk());
  EXPECT_EQ(ok->at("b").as_string(), "caf\xc3\xa9 \xf0\x9f\x9a\x80");
}

TEST(YamlToJson, DeepNesting_IsAnErrorNotACrash) {
  std::string deep(2000, '[');
  deep += std::string(2000, ']');
  absl::StatusOr<Json> json = YamlToJson(deep);
  EXPECT_THAT(json.status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(YamlToJson, TheCrdFileConverts) {
  std::ifstream in(PHALANX_SOURCE_DIR "/crds/trainingjobs.phalanx.dev.yaml");
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<Json> crd = YamlToJson(text.str());
  ASSERT_THAT(crd.status(), IsOk());
  EXPECT_EQ(crd->at("kind").as_string(), "CustomResourceDefinition");
  // Quoted enum values stay strings: "True"/"False" would otherwise become booleans.
  const Json& status_enum = crd->at("spec")
                                .at("versions")
                                .at(0)
                                .at("schema")
                                .at("openAPIV3Schema")
                                .at("properties")
                                .at("status")
                                .at("properties")
                                .at("conditions")
                                .at("items")
                                .at("properties")
                                .at("status")
                                .at("enum");
  EXPECT_EQ(status_enum, Json::parse(R"(["True","False","Unknown"])"));
}

}  // namespace
}  // namespace phalanx::op
