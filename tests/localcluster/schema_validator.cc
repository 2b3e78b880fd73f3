#include "tests/localcluster/schema_validator.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tests/localcluster/go_number.h"

namespace phalanx::localcluster {
namespace {

// Deeper schemas are not written by people; stopping there bounds recursion on garbage input.
constexpr int kMaxDepth = 100;

constexpr char kRequired[] = "FieldValueRequired";
constexpr char kInvalid[] = "FieldValueInvalid";
constexpr char kNotSupported[] = "FieldValueNotSupported";
constexpr char kTypeInvalid[] = "FieldValueTypeInvalid";
constexpr char kTooLong[] = "FieldValueTooLong";
constexpr char kTooMany[] = "FieldValueTooMany";

// The fields kube-apiserver keeps on every object (and on embedded resources) whatever the
// schema says; their validation is the HTTP layer's business.
bool IsObjectMetaField(const std::string& key) {
  return key == "apiVersion" || key == "kind" || key == "metadata";
}

// A schema keyword, or nullptr when the schema is not an object or lacks it. cpprestsdk's at()
// throws, so every read goes through here.
const Json* Keyword(const Json& schema, const char* key) {
  if (!schema.is_object() || !schema.has_field(key)) return nullptr;
  return &schema.at(key);
}

bool BoolKeyword(const Json& schema, const char* key) {
  const Json* v = Keyword(schema, key);
  return v != nullptr && v->is_boolean() && v->as_bool();
}

std::optional<double> NumberKeyword(const Json& schema, const char* key) {
  const Json* v = Keyword(schema, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->as_double();
}

std::optional<int64_t> CountKeyword(const Json& schema, const char* key) {
  const Json* v = Keyword(schema, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  if (v->is_integer()) return v->as_number().to_int64();
  return static_cast<int64_t>(v->as_double());
}

std::string StringKeyword(const Json& schema, const char* key) {
  const Json* v = Keyword(schema, key);
  return v != nullptr && v->is_string() ? v->as_string() : "";
}

// The name kube-openapi gives a JSON value's type in "must be of type" messages.
std::string TypeName(const Json& v) {
  switch (v.type()) {
    case Json::Null:
      return "null";
    case Json::Boolean:
      return "boolean";
    case Json::Number:
      return v.is_integer() ? "integer" : "number";
    case Json::String:
      return "string";
    case Json::Array:
      return "array";
    case Json::Object:
      return "object";
  }
  return "unknown";
}

bool HasType(const Json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "integer") return v.is_number() && v.is_integer();
  if (type == "number") return v.is_number();
  return true;  // An unknown type name constrains nothing rather than rejecting everything.
}

// Go's %q, which is how Kubernetes quotes strings in messages.
std::string GoQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += absl::StrFormat("\\x%02x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// A value as field.Error prints its BadValue: numbers and booleans bare, strings quoted,
// anything else as JSON.
std::string ValueText(const Json& v) {
  if (v.is_number()) {
    return v.is_integer() ? absl::StrCat(v.as_number().to_int64()) : GoFloatString(v.as_double());
  }
  if (v.is_boolean()) return v.as_bool() ? "true" : "false";
  if (v.is_string()) return GoQuote(v.as_string());
  if (v.is_null()) return GoQuote("null");
  return v.serialize();
}

// Compares numbers by value (2 equals 2.0), which cpprestsdk's == does not.
bool JsonEqual(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integer() && b.is_integer()) return a.as_number() == b.as_number();
    return a.as_double() == b.as_double();
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!JsonEqual(a.at(i), b.at(i))) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [key, value] : a.as_object()) {
      if (!b.has_field(key) || !JsonEqual(value, b.at(key))) return false;
    }
    return true;
  }
  return a == b;
}

// kube-openapi counts characters, not bytes.
int64_t Utf8Length(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string ChildPath(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

// kube-openapi names the offending field "<path> in body"; the object itself is "body".
std::string InBody(const std::string& path) {
  return path.empty() ? "body" : absl::StrCat(path, " in body");
}

class Validator {
 public:
  void Visit(const Json& schema, Json& value, const std::string& path, bool root, int depth) {
    if (!schema.is_object() || depth > kMaxDepth) return;
    const std::string type = StringKeyword(schema, "type");
    if (value.is_null()) {
      if (!BoolKeyword(schema, "nullable") && !type.empty()) TypeError(path, value, type);
      return;
    }
    if (BoolKeyword(schema, "x-kubernetes-int-or-string")) {
      if (!value.is_string() && !(value.is_number() && value.is_integer())) {
        TypeError(path, value, "integer or string");
        return;
      }
    } else if (!type.empty() && !HasType(value, type)) {
      TypeError(path, value, type);
      return;
    }
    CheckEnum(schema, value, path);
    if (value.is_object()) {
      VisitObject(schema, value, path, root, depth);
    } else if (value.is_array()) {
      VisitArray(schema, value, path, depth);
    } else if (value.is_string()) {
      CheckString(schema, value.as_string(), path);
    } else if (value.is_number()) {
      CheckNumber(schema, value, path);
    }
  }

  std::vector<FieldError> TakeErrors() { return std::move(errors_); }
  std::vector<std::string> TakePruned() { return std::move(pruned_); }

 private:
  void Add(const char* reason, const std::string& path, std::string message) {
    errors_.push_back(FieldError{reason, path, std::move(message)});
  }
  // field.Invalid: "Invalid value: <value>: <detail>".
  void Invalid(const std::string& path, const std::string& value_text, const std::string& detail) {
    Add(kInvalid, path, absl::StrCat("Invalid value: ", value_text, ": ", detail));
  }
  void TypeError(const std::string& path, const Json& value, const std::string& type) {
    const std::string actual = GoQuote(TypeName(value));
    Add(kTypeInvalid, path,
        absl::StrCat("Invalid value: ", actual, ": ", InBody(path), " must be of type ", type, ": ",
                     actual));
  }

  void VisitObject(const Json& schema, Json& value, const std::string& path, bool root, int depth) {
    const Json* properties = Keyword(schema, "properties");
    if (properties != nullptr && !properties->is_object()) properties = nullptr;
    const Json* additional = Keyword(schema, "additionalProperties");
    const bool embedded = BoolKeyword(schema, "x-kubernetes-embedded-resource");
    const bool keeps_meta = root || embedded;

    if (properties != nullptr) ApplyDefaults(*properties, value, keeps_meta);
    Prune(schema, properties, additional, value, keeps_meta, path);

    if (const Json* required = Keyword(schema, "required"); required && required->is_array()) {
      for (const Json& name : required->as_array()) {
        if (name.is_string() && !value.has_field(name.as_string())) {
          Add(kRequired, ChildPath(path, name.as_string()), "Required value");
        }
      }
    }
    if (embedded) CheckEmbeddedResource(value, path);

    const bool additional_is_schema = additional != nullptr && additional->is_object();
    for (auto& [key, child] : value.as_object()) {
      if (keeps_meta && IsObjectMetaField(key)) continue;
      if (properties != nullptr && properties->has_field(key)) {
        Visit(properties->at(key), child, ChildPath(path, key), false, depth + 1);
      } else if (additional_is_schema) {
        // kube-apiserver names a map entry like a property ("spec.labels.app"), not "[app]".
        Visit(*additional, child, ChildPath(path, key), false, depth + 1);
      }
    }
  }

  // As the apiserver does before validating: a null in a property that is not nullable is
  // dropped, and an absent property with a `default` gets a copy of it.
  static void ApplyDefaults(const Json& properties, Json& value, bool keeps_meta) {
    for (const auto& [key, property] : properties.as_object()) {
      if (!property.is_object() || (keeps_meta && IsObjectMetaField(key))) continue;
      if (value.has_field(key) && value.at(key).is_null() && !BoolKeyword(property, "nullable")) {
        value.erase(key);
      }
      if (!value.has_field(key) && property.has_field("default")) {
        value[key] = property.at("default");
      }
    }
  }

  // Structural pruning: fields the schema does not specify are removed silently, unless the
  // node preserves unknown fields or describes a map through additionalProperties.
  void Prune(const Json& schema, const Json* properties, const Json* additional, Json& value,
             bool keeps_meta, const std::string& path) {
    if (BoolKeyword(schema, "x-kubernetes-preserve-unknown-fields")) return;
    if (additional != nullptr &&
        (additional->is_object() || (additional->is_boolean() && additional->as_bool()))) {
      return;
    }
    // Only a node that is structurally an object prunes; `{}` or a bare description accepts
    // anything, which keeps a sloppy schema from erasing data.
    const bool is_object_node =
        StringKeyword(schema, "type") == "object" || properties != nullptr || additional != nullptr;
    if (!is_object_node) return;
    std::vector<std::string> unknown;
    for (const auto& [key, child] : value.as_object()) {
      if (keeps_meta && IsObjectMetaField(key)) continue;
      if (properties == nullptr || !properties->has_field(key)) unknown.push_back(key);
    }
    for (const std::string& key : unknown) {
      pruned_.push_back(ChildPath(path, key));
      value.erase(key);
    }
  }

  // x-kubernetes-embedded-resource: the value is itself a Kubernetes object.
  void CheckEmbeddedResource(const Json& value, const std::string& path) {
    for (const char* key : {"apiVersion", "kind"}) {
      const std::string field = ChildPath(path, key);
      if (!value.has_field(key)) {
        Add(kRequired, field, "Required value: must not be empty");
      } else if (!value.at(key).is_string()) {
        Invalid(field, ValueText(value.at(key)), "must be a string");
      } else if (value.at(key).as_string().empty()) {
        Invalid(field, GoQuote(""), "must not be empty");
      }
    }
    if (value.has_field("metadata") && !value.at("metadata").is_object()) {
      Invalid(ChildPath(path, "metadata"), ValueText(value.at("metadata")), "must be an object");
    }
  }

  void VisitArray(const Json& schema, Json& value, const std::string& path, int depth) {
    const int64_t size = static_cast<int64_t>(value.size());
    if (auto min = CountKeyword(schema, "minItems"); min && size < *min) {
      Invalid(path, absl::StrCat(size),
              absl::StrCat(InBody(path), " should have at least ", *min, " items"));
    }
    if (auto max = CountKeyword(schema, "maxItems"); max && size > *max) {
      Add(kTooMany, path, absl::StrCat("Too many: ", size, ": must have at most ", *max, " items"));
    }
    const Json* items = Keyword(schema, "items");
    if (items == nullptr || !items->is_object()) return;
    for (size_t i = 0; i < value.size(); ++i) {
      Visit(*items, value.at(i), absl::StrCat(path, "[", i, "]"), false, depth + 1);
    }
  }

  void CheckString(const Json& schema, const std::string& s, const std::string& path) {
    const int64_t length = Utf8Length(s);
    if (auto min = CountKeyword(schema, "minLength"); min && length < *min) {
      Invalid(path, GoQuote(s),
              absl::StrCat(InBody(path), " should be at least ", *min, " chars long"));
    }
    if (auto max = CountKeyword(schema, "maxLength"); max && length > *max) {
      Add(kTooLong, path, absl::StrCat("Too long: may not be longer than ", *max));
    }
    if (const Json* pattern = Keyword(schema, "pattern"); pattern && pattern->is_string()) {
      CheckPattern(pattern->as_string(), s, path);
    }
  }

  void CheckPattern(const std::string& pattern, const std::string& s, const std::string& path) {
    auto [it, inserted] = regexes_.try_emplace(pattern);
    if (inserted) {
      try {
        it->second.emplace(pattern, std::regex::ECMAScript);
      } catch (const std::regex_error&) {
        // Left empty: the pattern is reported on every value it is asked to check.
      }
    }
    if (!it->second.has_value()) {
      Invalid(path, GoQuote(s),
              absl::StrCat(InBody(path), ": the schema's pattern '", pattern,
                           "' is not a valid regular expression"));
      return;
    }
    bool matches = false;
    try {
      // Search, not full match: OpenAPI patterns are unanchored, as in Go's MatchString.
      matches = std::regex_search(s, *it->second);
    } catch (const std::regex_error&) {
      Invalid(path, GoQuote(s),
              absl::StrCat(InBody(path), ": the schema's pattern '", pattern,
                           "' is too complex to evaluate"));
      return;
    }
    if (!matches) {
      Invalid(path, GoQuote(s), absl::StrCat(InBody(path), " should match '", pattern, "'"));
    }
  }

  void CheckNumber(const Json& schema, const Json& value, const std::string& path) {
    const double v = value.as_double();
    if (auto min = NumberKeyword(schema, "minimum")) {
      const bool exclusive = BoolKeyword(schema, "exclusiveMinimum");
      if (exclusive ? v <= *min : v < *min) {
        Invalid(path, ValueText(value),
                absl::StrCat(InBody(path), " should be greater than ",
                             exclusive ? "" : "or equal to ", GoFloatString(*min)));
      }
    }
    if (auto max = NumberKeyword(schema, "maximum")) {
      const bool exclusive = BoolKeyword(schema, "exclusiveMaximum");
      if (exclusive ? v >= *max : v > *max) {
        Invalid(path, ValueText(value),
                absl::StrCat(InBody(path), " should be less than ", exclusive ? "" : "or equal to ",
                             GoFloatString(*max)));
      }
    }
  }

  void CheckEnum(const Json& schema, const Json& value, const std::string& path) {
    const Json* allowed = Keyword(schema, "enum");
    if (allowed == nullptr || !allowed->is_array()) return;
    std::vector<std::string> quoted;
    for (const Json& candidate : allowed->as_array()) {
      if (JsonEqual(candidate, value)) return;
      quoted.push_back(
          GoQuote(candidate.is_string() ? candidate.as_string() : candidate.serialize()));
    }
    std::string message = absl::StrCat("Unsupported value: ", ValueText(value));
    if (!quoted.empty())
      absl::StrAppend(&message, ": supported values: ", absl::StrJoin(quoted, ", "));
    Add(kNotSupported, path, std::move(message));
  }

  std::vector<FieldError> errors_;
  std::vector<std::string> pruned_;  // paths of the fields pruning removed
  // Compiled patterns by source; nullopt for a pattern std::regex rejects.
  std::map<std::string, std::optional<std::regex>> regexes_;
};

// field.Error.Error(): "<field>: <message>".
std::string ErrorText(const FieldError& e) {
  return e.field.empty() ? e.message : absl::StrCat(e.field, ": ", e.message);
}

}  // namespace

std::vector<FieldError> ValidateAndDefault(const Json& schema, Json& object) {
  return ValidateAndDefault(schema, object, nullptr);
}

std::vector<FieldError> ValidateAndDefault(const Json& schema, Json& object,
                                           std::vector<std::string>* pruned) {
  Validator validator;
  std::vector<FieldError> errors;
  try {
    validator.Visit(schema, object, "", /*root=*/true, /*depth=*/0);
    errors = validator.TakeErrors();
  } catch (const std::exception& e) {
    // The checks above test types before every read; this only keeps a cpprestsdk surprise
    // from escaping the library as an exception.
    errors = validator.TakeErrors();
    errors.push_back(FieldError{"InternalError", "", absl::StrCat("Internal error: ", e.what())});
  }
  if (pruned != nullptr) *pruned = validator.TakePruned();
  return errors;
}

Json InvalidStatus(const std::string& kind, const std::string& group, const std::string& name,
                   const std::vector<FieldError>& errors) {
  const std::string qualified_kind = group.empty() ? kind : absl::StrCat(kind, ".", group);
  std::string message = absl::StrCat(qualified_kind, " ", GoQuote(name), " is invalid");

  // utilerrors.Aggregate: distinct messages in order, bracketed only when there are several.
  std::vector<std::string> distinct;
  std::set<std::string> seen;
  for (const FieldError& e : errors) {
    std::string text = ErrorText(e);
    if (seen.insert(text).second) distinct.push_back(std::move(text));
  }
  if (distinct.size() == 1) {
    absl::StrAppend(&message, ": ", distinct.front());
  } else if (distinct.size() > 1) {
    absl::StrAppend(&message, ": [", absl::StrJoin(distinct, ", "), "]");
  }

  Json causes = Json::array();
  for (size_t i = 0; i < errors.size(); ++i) {
    Json cause = Json::object();
    cause["reason"] = Json::string(errors[i].reason);
    cause["message"] = Json::string(errors[i].message);
    if (!errors[i].field.empty()) cause["field"] = Json::string(errors[i].field);
    causes[i] = std::move(cause);
  }
  Json details = Json::object();
  details["name"] = Json::string(name);
  if (!group.empty()) details["group"] = Json::string(group);
  details["kind"] = Json::string(kind);
  if (!errors.empty()) details["causes"] = std::move(causes);

  Json status = Json::object();
  status["kind"] = Json::string("Status");
  status["apiVersion"] = Json::string("v1");
  status["metadata"] = Json::object();
  status["status"] = Json::string("Failure");
  status["message"] = Json::string(message);
  status["reason"] = Json::string("Invalid");
  status["details"] = std::move(details);
  status["code"] = Json::number(422);
  return status;
}

}  // namespace phalanx::localcluster
