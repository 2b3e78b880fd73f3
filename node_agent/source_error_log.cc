#include "node_agent/source_error_log.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace phalanx::agent {
namespace {

constexpr size_t kMaxKindLength = 120;
// A hostile server could still mint endless kinds (different host names in messages, ...): past
// this many the oldest are forgotten, so the table stays small.
constexpr size_t kMaxKindsPerSource = 64;

}  // namespace

std::string SourceErrorLog::KindOf(const absl::Status& status) {
  std::string kind = absl::StrCat(absl::StatusCodeToString(status.code()), ": ");
  bool in_number = false;
  for (char c : status.message()) {
    if (c == '"' || c == '\'' || kind.size() >= kMaxKindLength) break;
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      if (!in_number) kind.push_back('#');
      in_number = true;
      continue;
    }
    in_number = false;
    kind.push_back(c);
  }
  return kind;
}

std::optional<std::string> SourceErrorLog::OnError(const std::string& source,
                                                   const absl::Status& status, absl::Time now) {
  Source& s = sources_[source];
  ++s.failures;
  const std::string kind_name = KindOf(status);
  auto found = s.kinds.find(kind_name);
  const bool is_new = found == s.kinds.end();
  if (is_new && s.kinds.size() >= kMaxKindsPerSource) {
    auto oldest = s.kinds.begin();
    for (auto it = s.kinds.begin(); it != s.kinds.end(); ++it) {
      if (it->second.last_logged < oldest->second.last_logged) oldest = it;
    }
    s.kinds.erase(oldest);
  }
  Kind& kind = s.kinds[kind_name];
  if (!is_new && now - kind.last_logged < options_.repeat_after) {
    ++kind.unlogged;
    return std::nullopt;
  }
  if (now - s.window_start >= options_.window) {
    s.window_start = now;
    s.lines_in_window = 0;
  }
  if (s.lines_in_window >= options_.max_lines) {
    ++kind.unlogged;
    ++s.dropped;
    if (is_new) kind.last_logged = absl::InfinitePast();  // log it when the cap allows
    return std::nullopt;
  }
  ++s.lines_in_window;
  std::string line = absl::StrCat("notice source ", source, ": ", status.ToString());
  if (kind.unlogged > 0) {
    absl::StrAppend(&line, " (", kind.unlogged, " more like it since it was last logged)");
  }
  if (s.dropped > 0) {
    absl::StrAppend(&line, " (", s.dropped, " other failure lines held back by the rate limit)");
    s.dropped = 0;
  }
  kind.unlogged = 0;
  kind.last_logged = now;
  return line;
}

std::optional<std::string> SourceErrorLog::OnSuccess(const std::string& source) {
  auto it = sources_.find(source);
  if (it == sources_.end() || it->second.failures == 0) return std::nullopt;
  const int64_t failures = it->second.failures;
  sources_.erase(it);
  return absl::StrCat("notice source ", source, " answers again after ", failures,
                      " failed poll(s)");
}

}  // namespace phalanx::agent
