#include "operator/api/yaml_json.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <regex>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace phalanx::op {
namespace {

constexpr int kMaxDepth = 512;
constexpr char kTagPrefix[] = "tag:yaml.org,2002:";

// YAML 1.2 core schema, tag resolution for plain scalars (yaml-cpp has already turned the null
// forms into Null nodes).
const std::regex& IntDecimal() {
  static const std::regex re("[-+]?[0-9]+");
  return re;
}
const std::regex& IntOctal() {
  static const std::regex re("0o[0-7]+");
  return re;
}
const std::regex& IntHex() {
  static const std::regex re("0x[0-9a-fA-F]+");
  return re;
}
const std::regex& Float() {
  static const std::regex re(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  return re;
}
const std::regex& InfOrNan() {
  static const std::regex re(R"([-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))");
  return re;
}

bool IsNullText(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

std::optional<bool> BoolText(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

std::string Where(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return "";
  return absl::StrCat(" at line ", mark.line + 1, ", column ", mark.column + 1);
}

// An integer in core-schema form; nullopt when `s` is not one.
std::optional<Json> IntValue(const std::string& s) {
  int base = 10;
  std::string digits = s;
  if (std::regex_match(s, IntOctal())) {
    base = 8;
    digits = s.substr(2);
  } else if (std::regex_match(s, IntHex())) {
    base = 16;
    digits = s.substr(2);
  } else if (!std::regex_match(s, IntDecimal())) {
    return std::nullopt;
  }
  bool negative = false;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
    negative = digits[0] == '-';
    digits.erase(0, 1);
  }
  uint64_t magnitude = 0;
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, magnitude, base);
  if (ec == std::errc() && ptr == end) {
    if (!negative) {
      if (magnitude <= static_cast<uint64_t>(INT64_MAX)) {
        return Json::number(static_cast<int64_t>(magnitude));
      }
      return Json::number(magnitude);
    }
    if (magnitude <= static_cast<uint64_t>(INT64_MAX) + 1) {
      return Json::number(static_cast<int64_t>(0 - magnitude));
    }
  }
  // Too large for 64 bits: the nearest double, as JSON decoders do.
  if (base != 10) return std::nullopt;
  return Json::number(std::strtod(s.c_str(), nullptr));
}

std::optional<Json> FloatValue(const std::string& s) {
  if (!std::regex_match(s, Float())) return std::nullopt;
  errno = 0;
  const double d = std::strtod(s.c_str(), nullptr);
  if (errno == ERANGE && (d > 1 || d < -1)) return std::nullopt;  // overflow to ±inf
  return Json::number(d);
}

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF). yaml-cpp passes other bytes through, and a JSON string holding them cannot be read
// back by any JSON parser.
bool IsUtf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    int n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++p;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      n = 1, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= n) return false;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xc0) != 0x80) return false;
      cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff)) {
      return false;
    }
    p += n + 1;
  }
  return true;
}

absl::Status NotUtf8(const YAML::Node& node) {
  return absl::InvalidArgumentError(absl::StrCat("YAML text is not valid UTF-8", Where(node)));
}

class Converter {
 public:
  absl::StatusOr<Json> Convert(const YAML::Node& node, int depth) {
    if (depth > kMaxDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat("YAML nested deeper than ", kMaxDepth, " levels", Where(node)));
    }
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return Json::null();
      case YAML::NodeType::Scalar:
        return Scalar(node);
      case YAML::NodeType::Sequence: {
        Json out = Json::array(node.size());
        size_t i = 0;
        for (const YAML::Node& item : node) {
          absl::StatusOr<Json> v = Convert(item, depth + 1);
          if (!v.ok()) return v.status();
          out[i++] = *std::move(v);
        }
        return out;
      }
      case YAML::NodeType::Map: {
        Json out = Json::object();
        std::set<std::string> seen;
        for (const auto& entry : node) {
          const YAML::Node& key = entry.first;
          if (!key.IsScalar() && !key.IsNull()) {
            return absl::InvalidArgumentError(
                absl::StrCat("YAML mapping key is not a scalar", Where(key)));
          }
          const std::string name = key.IsScalar() ? key.Scalar() : "null";
          if (!IsUtf8(name)) return NotUtf8(key);
          if (!seen.insert(name).second) {
            return absl::InvalidArgumentError(
                absl::StrCat("YAML mapping has the key \"", name, "\" twice", Where(key)));
          }
          absl::StatusOr<Json> v = Convert(entry.second, depth + 1);
          if (!v.ok()) return v.status();
          out[name] = *std::move(v);
        }
        return out;
      }
    }
    return Json::null();
  }

 private:
  absl::StatusOr<Json> Scalar(const YAML::Node& node) {
    const std::string& text = node.Scalar();
    const std::string& tag = node.Tag();
    if (!IsUtf8(text)) return NotUtf8(node);
    // "!" marks a quoted or block scalar: always a string. "?" (or empty) is a plain scalar whose
    // type the core schema resolves.
    if (tag == "!") return Json::string(text);
    if (tag == "?" || tag.empty()) return Resolve(node, text);
    if (tag.rfind(kTagPrefix, 0) != 0) return Json::string(text);  // a local tag: keep the text
    const std::string kind = tag.substr(sizeof(kTagPrefix) - 1);
    std::optional<Json> v;
    if (kind == "str") return Json::string(text);
    if (kind == "null" && IsNullText(text)) return Json::null();
    if (kind == "bool") {
      if (std::optional<bool> b = BoolText(text)) v = Json::boolean(*b);
    } else if (kind == "int") {
      v = IntValue(text);
    } else if (kind == "float") {
      v = IntValue(text);
      if (v.has_value()) v = Json::number(v->as_double());
      if (!v.has_value()) v = FloatValue(text);
    } else if (kind != "null") {
      return Json::string(text);  // !!binary, !!timestamp, ...: the text as written
    }
    if (!v.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("YAML scalar \"", text, "\" is not a valid !!", kind, Where(node)));
    }
    return *std::move(v);
  }

  absl::StatusOr<Json> Resolve(const YAML::Node& node, const std::string& text) {
    if (IsNullText(text)) return Json::null();
    if (std::optional<bool> b = BoolText(text)) return Json::boolean(*b);
    if (std::optional<Json> i = IntValue(text)) return *std::move(i);
    if (std::optional<Json> f = FloatValue(text)) return *std::move(f);
    if (std::regex_match(text, InfOrNan())) {
      return absl::InvalidArgumentError(
          absl::StrCat("YAML value ", text, " has no JSON form", Where(node)));
    }
    return Json::string(text);
  }
};

}  // namespace

absl::StatusOr<Json> YamlToJson(const std::string& yaml) {
  try {
    const YAML::Node root = YAML::Load(yaml);
    return Converter().Convert(root, 0);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid YAML: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid YAML: ", e.what()));
  }
}

}  // namespace phalanx::op
