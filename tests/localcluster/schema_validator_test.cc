#include "tests/localcluster/schema_validator.h"

#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::localcluster {

void PrintTo(const FieldError& e, std::ostream* os) {
  *os << "{" << e.reason << ", " << e.field << ", " << e.message << "}";
}

namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

Json ParseJson(const std::string& text) { return Json::parse(text); }

// A CRD-shaped root schema whose spec has one property `x` described by `x_schema`.
Json SchemaForX(const std::string& x_schema) {
  return ParseJson(R"({"type":"object","properties":{"spec":{"type":"object","properties":{"x":)" +
                   x_schema + "}}}}");
}

struct KeywordCase {
  std::string name;
  std::string x_schema;
  std::string x_value;
  std::vector<FieldError> want;  // field is always spec.x
};

FieldError XError(const std::string& reason, const std::string& message) {
  return FieldError{reason, "spec.x", message};
}

class KeywordTest : public ::testing::TestWithParam<KeywordCase> {};

TEST_P(KeywordTest, ValidatesAsTheApiserverWordsIt) {
  const KeywordCase& c = GetParam();
  Json object = ParseJson(R"({"spec":{"x":)" + c.x_value + "}}");
  EXPECT_EQ(ValidateAndDefault(SchemaForX(c.x_schema), object), c.want);
}

const char kInvalid[] = "FieldValueInvalid";
const char kTypeInvalid[] = "FieldValueTypeInvalid";

INSTANTIATE_TEST_SUITE_P(
    Keywords, KeywordTest,
    ::testing::ValuesIn(std::vector<KeywordCase>{
        {"IntegerAcceptsInteger", R"({"type":"integer"})", "3", {}},
        {"IntegerRejectsString",
         R"({"type":"integer"})",
         R"("three")",
         {XError(kTypeInvalid,
                 R"(Invalid value: "string": spec.x in body must be of type integer: "string")")}},
        {"IntegerRejectsFraction",
         R"({"type":"integer"})",
         "1.5",
         {XError(kTypeInvalid,
                 R"(Invalid value: "number": spec.x in body must be of type integer: "number")")}},
        {"NumberAcceptsInteger", R"({"type":"number"})", "2", {}},
        {"NumberAcceptsFraction", R"({"type":"number"})", "2.5", {}},
        {"StringRejectsInteger",
         R"({"type":"string"})",
         "5",
         {XError(kTypeInvalid,
                 R"(Invalid value: "integer": spec.x in body must be of type string: "integer")")}},
        {"BooleanAcceptsBoolean", R"({"type":"boolean"})", "false", {}},
        {"BooleanRejectsString",
         R"({"type":"boolean"})",
         R"("true")",
         {XError(kTypeInvalid,
                 R"(Invalid value: "string": spec.x in body must be of type boolean: "string")")}},
        {"ArrayRejectsObject",
         R"({"type":"array"})",
         "{}",
         {XError(kTypeInvalid,
                 R"(Invalid value: "object": spec.x in body must be of type array: "object")")}},
        {"ObjectRejectsArray",
         R"({"type":"object"})",
         "[]",
         {XError(kTypeInvalid,
                 R"(Invalid value: "array": spec.x in body must be of type object: "array")")}},
        {"MinimumAcceptsEqual", R"({"type":"integer","minimum":1})", "1", {}},
        {"MinimumRejectsBelow",
         R"({"type":"integer","minimum":1})",
         "0",
         {XError(kInvalid,
                 "Invalid value: 0: spec.x in body should be greater than or equal to 1")}},
        {"ExclusiveMinimumRejectsEqual",
         R"({"type":"integer","minimum":1,"exclusiveMinimum":true})",
         "1",
         {XError(kInvalid, "Invalid value: 1: spec.x in body should be greater than 1")}},
        {"MaximumAcceptsEqual", R"({"type":"integer","maximum":10})", "10", {}},
        {"MaximumRejectsAbove",
         R"({"type":"integer","maximum":10})",
         "11",
         {XError(kInvalid,
                 "Invalid value: 11: spec.x in body should be less than or equal to 10")}},
        {"ExclusiveMaximumRejectsEqual",
         R"({"type":"integer","maximum":10,"exclusiveMaximum":true})",
         "10",
         {XError(kInvalid, "Invalid value: 10: spec.x in body should be less than 10")}},
        {"FractionalMinimum",
         R"({"type":"number","minimum":0.5})",
         "0.25",
         {XError(kInvalid,
                 "Invalid value: 0.25: spec.x in body should be greater than or equal to 0.5")}},
        {"MinLengthAcceptsEqual", R"({"type":"string","minLength":3})", R"("abc")", {}},
        {"MinLengthCountsCharactersNotBytes",
         R"({"type":"string","minLength":3,"maxLength":3})",
         R"("h\u00e9\u00e9")",
         {}},
        {"MinLengthRejectsShort",
         R"({"type":"string","minLength":3})",
         R"("ab")",
         {XError(kInvalid,
                 R"(Invalid value: "ab": spec.x in body should be at least 3 chars long)")}},
        {"MaxLengthRejectsLong",
         R"({"type":"string","maxLength":5})",
         R"("abcdef")",
         {XError("FieldValueTooLong", "Too long: may not be longer than 5")}},
        {"MinItemsRejectsEmpty",
         R"({"type":"array","minItems":1})",
         "[]",
         {XError(kInvalid, "Invalid value: 0: spec.x in body should have at least 1 items")}},
        {"MaxItemsAcceptsEqual", R"({"type":"array","maxItems":2})", "[1,2]", {}},
        {"MaxItemsRejectsMore",
         R"({"type":"array","maxItems":2})",
         "[1,2,3]",
         {XError("FieldValueTooMany", "Too many: 3: must have at most 2 items")}},
        {"EnumAcceptsMember", R"({"type":"string","enum":["a","b"]})", R"("b")", {}},
        {"EnumRejectsOther",
         R"({"type":"string","enum":["a","b"]})",
         R"("c")",
         {XError("FieldValueNotSupported",
                 R"(Unsupported value: "c": supported values: "a", "b")")}},
        {"EnumComparesNumbersByValue", R"({"type":"number","enum":[1.5,2]})", "2.0", {}},
        {"EnumOfIntegers",
         R"({"type":"integer","enum":[1,2]})",
         "3",
         {XError("FieldValueNotSupported", R"(Unsupported value: 3: supported values: "1", "2")")}},
        {"PatternAcceptsMatch", R"({"type":"string","pattern":"^[a-z]+$"})", R"("abc")", {}},
        {"PatternIsASearchNotAFullMatch", R"({"type":"string","pattern":"[0-9]"})", R"("a1b")", {}},
        {"PatternRejectsMismatch",
         R"({"type":"string","pattern":"^[a-z]+$"})",
         R"("abc1")",
         {XError(kInvalid, R"(Invalid value: "abc1": spec.x in body should match '^[a-z]+$')")}},
        {"InvalidPatternIsAnErrorNotACrash",
         R"({"type":"string","pattern":"(["})",
         R"("a")",
         {XError(
             kInvalid,
             R"(Invalid value: "a": spec.x in body: the schema's pattern '([' is not a valid regular expression)")}},
        {"NullableAcceptsNull", R"({"type":"string","nullable":true})", "null", {}},
        {"IntOrStringAcceptsInteger", R"({"x-kubernetes-int-or-string":true})", "5", {}},
        {"IntOrStringAcceptsString", R"({"x-kubernetes-int-or-string":true})", R"("50%")", {}},
        {"IntOrStringRejectsBoolean",
         R"({"x-kubernetes-int-or-string":true})",
         "true",
         {XError(
             kTypeInvalid,
             R"(Invalid value: "boolean": spec.x in body must be of type integer or string: "boolean")")}},
        {"IntOrStringRejectsFraction",
         R"({"x-kubernetes-int-or-string":true})",
         "1.5",
         {XError(
             kTypeInvalid,
             R"(Invalid value: "number": spec.x in body must be of type integer or string: "number")")}},
        {"FormatIsIgnored", R"({"type":"string","format":"date-time"})", R"("not a date")", {}},
        {"CelRulesAreIgnored",
         R"({"type":"integer","x-kubernetes-validations":[{"rule":"self > 100"}]})",
         "1",
         {}},
        {"UnknownTypeNameConstrainsNothing", R"({"type":"widget"})", "1", {}},
    }),
    [](const ::testing::TestParamInfo<KeywordCase>& info) { return info.param.name; });

TEST(ValidateAndDefault, NonNullableNull_IsDroppedAndDefaulted) {
  const Json schema = ParseJson(R"({"type":"object","properties":{"spec":{"type":"object",
      "properties":{"a":{"type":"string"},"b":{"type":"string","default":"dflt"},
                    "c":{"type":"string","nullable":true}}}}})");
  Json object = ParseJson(R"({"spec":{"a":null,"b":null,"c":null}})");
  EXPECT_THAT(ValidateAndDefault(schema, object), IsEmpty());
  EXPECT_EQ(object, ParseJson(R"({"spec":{"b":"dflt","c":null}})"));
}

TEST(ValidateAndDefault, NullArrayItem_IsATypeError) {
  const Json schema = SchemaForX(R"({"type":"array","items":{"type":"string"}})");
  Json object = ParseJson(R"({"spec":{"x":["a",null]}})");
  EXPECT_THAT(ValidateAndDefault(schema, object),
              ElementsAre(FieldError{
                  kTypeInvalid, "spec.x[1]",
                  R"(Invalid value: "null": spec.x[1] in body must be of type string: "null")"}));
}

TEST(ValidateAndDefault, Defaults_AppliedAtDepthInItemsAndMapValues) {
  const Json schema = ParseJson(R"({"type":"object","properties":{"spec":{"type":"object",
      "properties":{
        "replicas":{"type":"integer","default":1},
        "policy":{"type":"object","default":{},
                  "properties":{"maxRestarts":{"type":"integer","default":3}}},
        "absentParent":{"type":"object","properties":{"z":{"type":"integer","default":9}}},
        "tasks":{"type":"array","items":{"type":"object",
                 "properties":{"name":{"type":"string"},"image":{"type":"string","default":"img"}}}},
        "pools":{"type":"object","additionalProperties":{"type":"object",
                 "properties":{"size":{"type":"integer","default":8}}}}}}}})");
  Json object =
      ParseJson(R"({"spec":{"replicas":5,"tasks":[{"name":"a"},{"name":"b","image":"mine"}],
                              "pools":{"p1":{},"p2":{"size":2}}}})");
  EXPECT_THAT(ValidateAndDefault(schema, object), IsEmpty());
  EXPECT_EQ(object, ParseJson(R"({"spec":{"replicas":5,"policy":{"maxRestarts":3},
      "tasks":[{"name":"a","image":"img"},{"name":"b","image":"mine"}],
      "pools":{"p1":{"size":8},"p2":{"size":2}}}})"));
}

TEST(ValidateAndDefault, Defaults_NotAppliedUnderAbsentObjects) {
  const Json schema = ParseJson(R"({"type":"object","properties":{"spec":{"type":"object",
      "properties":{"replicas":{"type":"integer","default":1}}}}})");
  Json object = ParseJson(R"({"metadata":{"name":"j"}})");
  EXPECT_THAT(ValidateAndDefault(schema, object), IsEmpty());
  EXPECT_FALSE(object.has_field("spec"));
}

TEST(ValidateAndDefault, Defaults_AreValidatedLikeAnyValue) {
  const Json schema = SchemaForX(R"({"type":"integer","minimum":1,"default":0})");
  Json object = ParseJson(R"({"spec":{}})");
  EXPECT_THAT(ValidateAndDefault(schema, object), ElementsAre(Field(&FieldError::field, "spec.x")));
}

TEST(ValidateAndDefault, Required_MissingFieldsAreReportedWithTheirPaths) {
  const Json schema = ParseJson(R"({"type":"object","required":["spec"],"properties":{
      "spec":{"type":"object","required":["name","tasks"],"properties":{
        "name":{"type":"string"},
        "tasks":{"type":"array","items":{"type":"object","required":["name"],
                 "properties":{"name":{"type":"string"}}}}}}}})");
  Json object = ParseJson(R"({"spec":{"tasks":[{"name":"a"},{}]}})");
  EXPECT_THAT(
      ValidateAndDefault(schema, object),
      ElementsAre(FieldError{"FieldValueRequired", "spec.name", "Required value"},
                  FieldError{"FieldValueRequired", "spec.tasks[1].name", "Required value"}));

  Json no_spec = ParseJson(R"({"metadata":{"name":"j"}})");
  EXPECT_THAT(ValidateAndDefault(schema, no_spec),
              ElementsAre(FieldError{"FieldValueRequired", "spec", "Required value"}));
}

TEST(ValidateAndDefault, Required_ANullFieldCountsAsMissing) {
  const Json schema = ParseJson(R"({"type":"object","properties":{"spec":{"type":"object",
      "required":["name"],"properties":{"name":{"type":"string"}}}}})");
  Json object = ParseJson(R"({"spec":{"name":null}})");
  EXPECT_THAT(ValidateAndDefault(schema, object),
              ElementsAre(FieldError{"FieldValueRequired", "spec.name", "Required value"}));
}

TEST(ValidateAndDefault, ErrorPaths_NameArrayIndicesAndMapKeys) {
  const Json schema = ParseJson(R"({"type":"object","properties":{"spec":{"type":"object",
      "properties":{
        "tasks":{"type":"array","items":{"type":"object",
                 "properties":{"name":{"type":"string","minLength":2}}}},
        "labels":{"type":"object","additionalProperties":{"type":"string"}}}}}})");
  Json object = ParseJson(R"({"spec":{"tasks":[{"name":"ok"},{"name":"ok"},{"name":"x"}],
                              "labels":{"app":5}}})");
  EXPECT_THAT(
      ValidateAndDefault(schema, object),
      ElementsAre(
          FieldError{
              kTypeInvalid, "spec.labels.app",
              R"(Invalid value: "integer": spec.labels.app in body must be of type string: "integer")"},
          FieldError{
              kInvalid, "spec.tasks[2].name",
              R"(Invalid value: "x": spec.tasks[2].name in body should be at least 2 chars long)"}));
}

TEST(ValidateAndDefault, Pruning_RemovesUnknownFieldsButKeepsObjectMeta) {
  const Json schema = ParseJson(R"({"type":"object","properties":{"spec":{"type":"object",
      "properties":{"known":{"type":"object","properties":{"a":{"type":"integer"}}},
                    "bare":{"type":"object"},
                    "closed":{"type":"object","additionalProperties":false,
                              "properties":{"k":{"type":"string"}}}}}}})");
  Json object = ParseJson(R"({"apiVersion":"phalanx.dev/v1","kind":"TrainingJob",
      "metadata":{"name":"j","labels":{"x":"y"}},"extra":1,
      "spec":{"unknown":true,"known":{"a":1,"b":2},"bare":{"anything":1},
              "closed":{"k":"v","other":"w"}}})");
  EXPECT_THAT(ValidateAndDefault(schema, object), IsEmpty());
  EXPECT_EQ(object, ParseJson(R"({"apiVersion":"phalanx.dev/v1","kind":"TrainingJob",
      "metadata":{"name":"j","labels":{"x":"y"}},
      "spec":{"known":{"a":1},"bare":{},"closed":{"k":"v"}}})"));
}

TEST(ValidateAndDefault, PreserveUnknownFields_KeepsUnknownsAndStillValidatesKnowns) {
  const Json schema = ParseJson(R"({"type":"object","properties":{
      "spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true,
              "properties":{"replicas":{"type":"integer","minimum":1},
                            "nested":{"type":"object","properties":{"a":{"type":"integer"}}}}},
      "status":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}})");
  Json object = ParseJson(R"({"spec":{"replicas":0,"free":{"deep":[1,{"x":2}]},
                                      "nested":{"a":1,"b":2}},
                              "status":{"anything":"goes"}})");
  EXPECT_THAT(ValidateAndDefault(schema, object),
              ElementsAre(Field(&FieldError::field, "spec.replicas")));
  EXPECT_EQ(object, ParseJson(R"({"spec":{"replicas":0,"free":{"deep":[1,{"x":2}]},
                                          "nested":{"a":1}},
                                  "status":{"anything":"goes"}})"));
}

TEST(ValidateAndDefault, EmbeddedResource_RequiresKindAndKeepsItsObjectMeta) {
  const Json schema = ParseJson(R"({"type":"object","properties":{"spec":{"type":"object",
      "properties":{"template":{"type":"object","x-kubernetes-embedded-resource":true,
                                "properties":{"spec":{"type":"object",
                                  "x-kubernetes-preserve-unknown-fields":true}}}}}}})");
  Json valid = ParseJson(R"({"spec":{"template":{"apiVersion":"v1","kind":"Pod",
      "metadata":{"labels":{"a":"b"}},"spec":{"containers":[]},"junk":1}}})");
  EXPECT_THAT(ValidateAndDefault(schema, valid), IsEmpty());
  EXPECT_EQ(valid, ParseJson(R"({"spec":{"template":{"apiVersion":"v1","kind":"Pod",
      "metadata":{"labels":{"a":"b"}},"spec":{"containers":[]}}}})"));

  Json invalid = ParseJson(R"({"spec":{"template":{"apiVersion":""}}})");
  EXPECT_THAT(ValidateAndDefault(schema, invalid),
              ElementsAre(FieldError{kInvalid, "spec.template.apiVersion",
                                     R"(Invalid value: "": must not be empty)"},
                          FieldError{"FieldValueRequired", "spec.template.kind",
                                     "Required value: must not be empty"}));
}

TEST(ValidateAndDefault, ReportsEveryProblem) {
  const Json schema = ParseJson(R"({"type":"object","properties":{"spec":{"type":"object",
      "required":["name"],"properties":{"name":{"type":"string"},
      "replicas":{"type":"integer","minimum":1},"mode":{"type":"string","enum":["a"]}}}}})");
  Json object = ParseJson(R"({"spec":{"replicas":0,"mode":"b"}})");
  EXPECT_THAT(
      ValidateAndDefault(schema, object),
      ElementsAre(Field(&FieldError::field, "spec.name"), Field(&FieldError::field, "spec.mode"),
                  Field(&FieldError::field, "spec.replicas")));
}

TEST(ValidateAndDefault, GarbageSchemas_ConstrainNothingAndDoNotCrash) {
  const Json original = ParseJson(R"({"spec":{"a":[1,"x",null,{"b":true}],"n":1.5}})");
  for (const std::string& text : {
           std::string("null"),
           std::string("[]"),
           std::string(R"("object")"),
           std::string("7"),
           std::string("{}"),
           std::string(R"({"properties":5,"required":"spec","type":7,"enum":{},"minimum":"a"})"),
           std::string(R"({"type":"object","properties":{"spec":[1,2]}})"),
           std::string(R"({"type":"object","properties":{"spec":{"type":"object",
               "properties":{"a":{"type":"array","items":[{"type":"string"}],"minItems":"x",
                                  "maxItems":null},
                             "n":{"type":"number","minimum":{},"maximum":[],"enum":"x",
                                  "pattern":5,"exclusiveMinimum":"yes"}},
               "additionalProperties":"maybe","required":[1,null,{}]}}})"),
       }) {
    SCOPED_TRACE(text);
    Json object = original;
    EXPECT_THAT(ValidateAndDefault(ParseJson(text), object), IsEmpty());
    EXPECT_EQ(object, original);
  }
}

TEST(ValidateAndDefault, GarbageObjects_AreTypeErrorsNotCrashes) {
  const Json schema = ParseJson(R"({"type":"object","properties":{"spec":{"type":"object",
      "properties":{"replicas":{"type":"integer","default":1}}}}})");
  for (const std::string& text : {std::string("null"), std::string("[]"), std::string(R"("x")"),
                                  std::string("3.5"), std::string("true")}) {
    SCOPED_TRACE(text);
    Json object = ParseJson(text);
    EXPECT_THAT(ValidateAndDefault(schema, object),
                ElementsAre(Field(&FieldError::message, HasSubstr("body must be of type object"))));
  }
  Json spec_is_a_list = ParseJson(R"({"spec":[{"replicas":"x"}]})");
  EXPECT_THAT(ValidateAndDefault(schema, spec_is_a_list),
              ElementsAre(Field(&FieldError::field, "spec")));
}

TEST(InvalidStatus, OneError_HasNoBrackets) {
  const Json status = InvalidStatus(
      "TrainingJob", "phalanx.dev", "j",
      {FieldError{kInvalid, "spec.replicas",
                  "Invalid value: 0: spec.replicas in body should be greater than or equal to 1"}});
  EXPECT_EQ(status, ParseJson(R"({
      "kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
      "message":"TrainingJob.phalanx.dev \"j\" is invalid: spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1",
      "reason":"Invalid",
      "details":{"name":"j","group":"phalanx.dev","kind":"TrainingJob","causes":[
        {"reason":"FieldValueInvalid","field":"spec.replicas",
         "message":"Invalid value: 0: spec.replicas in body should be greater than or equal to 1"}]},
      "code":422})"));
}

TEST(InvalidStatus, TwoErrors_AreBracketedInOrder) {
  const Json status =
      InvalidStatus("TrainingJob", "phalanx.dev", "j",
                    {FieldError{"FieldValueRequired", "spec.name", "Required value"},
                     FieldError{"FieldValueNotSupported", "spec.mode",
                                R"(Unsupported value: "b": supported values: "a")"}});
  EXPECT_EQ(status.at("message").as_string(),
            R"(TrainingJob.phalanx.dev "j" is invalid: [spec.name: Required value, )"
            R"(spec.mode: Unsupported value: "b": supported values: "a"])");
  ASSERT_EQ(status.at("details").at("causes").size(), 2u);
  EXPECT_EQ(status.at("details").at("causes").at(1).at("reason").as_string(),
            "FieldValueNotSupported");
  EXPECT_EQ(status.at("code").as_integer(), 422);
}

TEST(InvalidStatus, CoreKindsHaveNoGroup) {
  const Json status =
      InvalidStatus("Pod", "", "p", {FieldError{"FieldValueRequired", "spec", "Required value"}});
  EXPECT_EQ(status.at("message").as_string(), R"(Pod "p" is invalid: spec: Required value)");
  EXPECT_FALSE(status.at("details").has_field("group"));
}

TEST(InvalidStatus, FromValidationEndToEnd) {
  const Json schema = SchemaForX(R"({"type":"string","pattern":"^[a-z]+$"})");
  Json object = ParseJson(R"({"spec":{"x":"A\"b"}})");
  const Json status =
      InvalidStatus("TrainingJob", "phalanx.dev", "j", ValidateAndDefault(schema, object));
  EXPECT_EQ(status.at("message").as_string(),
            R"(TrainingJob.phalanx.dev "j" is invalid: spec.x: Invalid value: "A\"b": )"
            R"(spec.x in body should match '^[a-z]+$')");
}

}  // namespace
}  // namespace phalanx::localcluster
