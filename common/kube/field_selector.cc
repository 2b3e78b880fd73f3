#include "common/kube/field_selector.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace phalanx::kube {

absl::StatusOr<FieldSelector> FieldSelector::Parse(const std::string& text) {
  FieldSelector selector;
  if (absl::StripAsciiWhitespace(text).empty()) return selector;
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    const std::string term(absl::StripAsciiWhitespace(raw));
    Term parsed;
    size_t op = term.find("!=");
    size_t op_len = 2;
    parsed.equals = op == std::string::npos;
    if (parsed.equals) {
      op = term.find("==");
      if (op == std::string::npos) {
        op = term.find('=');
        op_len = 1;
      }
    }
    if (op == std::string::npos || op == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("field selector term \"", term, "\" is not FIELD=VALUE or FIELD!=VALUE"));
    }
    parsed.path = std::string(absl::StripAsciiWhitespace(term.substr(0, op)));
    parsed.value = std::string(absl::StripAsciiWhitespace(term.substr(op + op_len)));
    selector.terms_.push_back(std::move(parsed));
  }
  return selector;
}

std::string FieldSelector::FieldValue(const web::json::value& object, const std::string& path) {
  const web::json::value* node = &object;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    const std::string key(part);
    if (!node->is_object() || !node->has_field(key)) return "";
    node = &node->at(key);
  }
  if (node->is_string()) return node->as_string();
  if (node->is_null()) return "";
  return node->serialize();
}

bool FieldSelector::Matches(const web::json::value& object) const {
  for (const Term& term : terms_) {
    if ((FieldValue(object, term.path) == term.value) != term.equals) return false;
  }
  return true;
}

}  // namespace phalanx::kube
