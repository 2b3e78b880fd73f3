#include "tests/localcluster/known_fields.h"

#include "absl/strings/str_cat.h"
#include "common/kube/json.h"

namespace phalanx::localcluster {
namespace {

using kube::Json;

const Json& Data() {
  static const Json* data = [] {
    std::string text;
    for (const char* const* chunk = kKnownFieldsJson; *chunk != nullptr; ++chunk) text += *chunk;
    std::error_code ec;
    auto* parsed = new Json(Json::parse(text, ec));
    if (ec) *parsed = Json::object();  // generated data; a unit test checks it parses
    return parsed;
  }();
  return *data;
}

constexpr int kMaxDepth = 64;

void Walk(const Json& types, const std::string& encoding, Json& value, const std::string& path,
          std::vector<std::string>& unknown, int depth) {
  if (encoding.empty() || encoding == "*" || depth > kMaxDepth) return;
  if (encoding[0] == '[') {
    if (!value.is_array()) return;
    for (size_t i = 0; i < value.size(); ++i) {
      Walk(types, encoding.substr(1), value[i], absl::StrCat(path, "[", i, "]"), unknown,
           depth + 1);
    }
    return;
  }
  if (encoding[0] == '{') {
    if (!value.is_object()) return;
    for (auto& [key, child] : value.as_object()) {
      Walk(types, encoding.substr(1), child, absl::StrCat(path, "[", key, "]"), unknown, depth + 1);
    }
    return;
  }
  if (!value.is_object() || !types.has_field(encoding)) return;
  const Json& fields = types.at(encoding);
  std::vector<std::string> drop;
  for (auto& [key, child] : value.as_object()) {
    const std::string child_path = path.empty() ? key : absl::StrCat(path, ".", key);
    if (!fields.has_field(key)) {
      unknown.push_back(child_path);
      drop.push_back(key);
      continue;
    }
    Walk(types, fields.at(key).as_string(), child, child_path, unknown, depth + 1);
  }
  for (const std::string& key : drop) value.erase(key);
}

}  // namespace

std::vector<std::string> DropUnknownFields(const std::string& api_version, const std::string& kind,
                                           Json& object) {
  std::vector<std::string> unknown;
  const Json& data = Data();
  const std::string key = absl::StrCat(api_version, "/", kind);
  if (!data.has_field("kinds") || !data.at("kinds").has_field(key)) return unknown;
  Walk(data.at("types"), data.at("kinds").at(key).as_string(), object, "", unknown, 0);
  return unknown;
}

}  // namespace phalanx::localcluster
