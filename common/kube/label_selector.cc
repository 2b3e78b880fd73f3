#include "common/kube/label_selector.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace phalanx::kube {
namespace {

bool ValidKey(absl::string_view key) {
  if (key.empty() || key.size() > 317) return false;  // prefix (253) + '/' + name (63)
  for (char c : key) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.' && c != '/') return false;
  }
  return true;
}

bool ValidValue(absl::string_view value) {
  if (value.size() > 63) return false;
  for (char c : value) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

// Splits on commas that are not inside parentheses.
std::vector<std::string> SplitTerms(const std::string& text, bool* balanced) {
  std::vector<std::string> terms;
  std::string current;
  int depth = 0;
  *balanced = true;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')' && --depth < 0) *balanced = false;
    if (c == ',' && depth == 0) {
      terms.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) *balanced = false;
  terms.push_back(current);
  return terms;
}

}  // namespace

absl::StatusOr<LabelSelector> LabelSelector::Parse(const std::string& text) {
  LabelSelector selector;
  if (absl::StripAsciiWhitespace(text).empty()) return selector;
  bool balanced;
  const std::vector<std::string> terms = SplitTerms(text, &balanced);
  if (!balanced) {
    return absl::InvalidArgumentError(absl::StrCat("label selector '", text, "': unbalanced ()"));
  }
  for (const std::string& raw : terms) {
    const std::string term(absl::StripAsciiWhitespace(raw));
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("label selector term '", term, "': ", why));
    };
    if (term.empty()) return bad("empty term");
    Requirement req;
    size_t pos;
    if (term.front() == '!') {
      req.key = std::string(absl::StripAsciiWhitespace(term.substr(1)));
      req.op = Op::kNotExists;
    } else if ((pos = term.find("!=")) != std::string::npos) {
      req.key = std::string(absl::StripAsciiWhitespace(term.substr(0, pos)));
      req.op = Op::kNotEquals;
      req.values.insert(std::string(absl::StripAsciiWhitespace(term.substr(pos + 2))));
    } else if ((pos = term.find("==")) != std::string::npos ||
               (pos = term.find('=')) != std::string::npos) {
      const size_t width = term.compare(pos, 2, "==") == 0 ? 2 : 1;
      req.key = std::string(absl::StripAsciiWhitespace(term.substr(0, pos)));
      req.op = Op::kEquals;
      req.values.insert(std::string(absl::StripAsciiWhitespace(term.substr(pos + width))));
    } else if (size_t open = term.find('('); open != std::string::npos) {
      const std::string head(absl::StripAsciiWhitespace(term.substr(0, open)));
      if (term.back() != ')') return bad("expected ')' at the end");
      const size_t space = head.rfind(' ');
      if (space == std::string::npos) return bad("expected 'in' or 'notin'");
      const std::string op(absl::StripAsciiWhitespace(head.substr(space + 1)));
      req.key = std::string(absl::StripAsciiWhitespace(head.substr(0, space)));
      if (op == "in") {
        req.op = Op::kIn;
      } else if (op == "notin") {
        req.op = Op::kNotIn;
      } else {
        return bad("expected 'in' or 'notin', got '" + op + "'");
      }
      for (absl::string_view v :
           absl::StrSplit(term.substr(open + 1, term.size() - open - 2), ',')) {
        req.values.insert(std::string(absl::StripAsciiWhitespace(v)));
      }
      if (req.values.empty() || req.values.contains("")) return bad("empty value in the set");
    } else {
      req.key = term;
      req.op = Op::kExists;
    }
    if (!ValidKey(req.key)) return bad("invalid label key '" + req.key + "'");
    for (const std::string& v : req.values) {
      if (!ValidValue(v)) return bad("invalid label value '" + v + "'");
    }
    selector.requirements_.push_back(std::move(req));
  }
  return selector;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  for (const Requirement& req : requirements_) {
    auto it = labels.find(req.key);
    const bool has = it != labels.end();
    switch (req.op) {
      case Op::kEquals:
      case Op::kIn:
        if (!has || !req.values.contains(it->second)) return false;
        break;
      case Op::kNotEquals:
      case Op::kNotIn:
        if (has && req.values.contains(it->second)) return false;
        break;
      case Op::kExists:
        if (!has) return false;
        break;
      case Op::kNotExists:
        if (has) return false;
        break;
    }
  }
  return true;
}

}  // namespace phalanx::kube
