// Parses a fuzzer input as JSON the way the REST client does (cpprestsdk), for the targets whose
// parsers take decoded objects. Test-only.
#pragma once

#include <cpprest/json.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <system_error>

namespace phalanx::fuzz {

// nullopt when the input is not JSON (cpprestsdk reports through the error code, but may throw).
inline std::optional<web::json::value> ParseJson(const uint8_t* data, size_t size) {
  try {
    std::error_code error;
    web::json::value value =
        web::json::value::parse(std::string(reinterpret_cast<const char*>(data), size), error);
    if (error) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Whether the object `value` (not its members) names a key twice. cpprestsdk keeps both entries
// and its lookups see the first, while a replacing write may leave the other behind: JSON with
// duplicate keys reads differently before and after a read-modify-write. The API server never
// sends any (it re-encodes every object), so round-trip checks skip such inputs.
inline bool HasDuplicateKeys(const web::json::value& value) {
  if (!value.is_object()) return false;
  const auto& object = value.as_object();
  for (auto i = object.begin(); i != object.end(); ++i) {
    for (auto j = std::next(i); j != object.end(); ++j) {
      if (i->first == j->first) return true;
    }
  }
  return false;
}

}  // namespace phalanx::fuzz
