// SourceErrorLog: decides which notice-source failures the agent logs. Deduplicating by status
// code alone hid whole kinds of failure (a huge answer, a header flood and a drip are all
// Unavailable or DeadlineExceeded, like a plain "connection refused" before them), so failures
// are told apart by kind: the code plus the message with its variable parts removed (numbers,
// and everything from the first quote on, where messages quote the server's answer). Each new
// kind is logged at once; a kind seen again is logged at most once per `repeat_after`, saying
// how often it happened since. However varied a hostile server's answers, a source logs at most
// `max_lines` lines per `window`; what that drops is counted in the next line. A success after
// failures is logged once. The agent's tick owns one; times come from the tick (`now`).
// Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace phalanx::agent {

struct SourceErrorLogOptions {
  absl::Duration repeat_after = absl::Minutes(1);
  absl::Duration window = absl::Minutes(1);
  int max_lines = 10;
};

class SourceErrorLog {
 public:
  explicit SourceErrorLog(SourceErrorLogOptions options = {}) : options_(options) {}

  // The line to log for this failed poll of `source`, or nullopt when it is rate-limited.
  std::optional<std::string> OnError(const std::string& source, const absl::Status& status,
                                     absl::Time now);
  // The line to log when `source` answers again after failing, else nullopt.
  std::optional<std::string> OnSuccess(const std::string& source);

  // The kind a failure counts as (exposed for tests).
  static std::string KindOf(const absl::Status& status);

 private:
  struct Kind {
    absl::Time last_logged;
    int64_t unlogged = 0;  // occurrences since it was last logged
  };
  struct Source {
    std::map<std::string, Kind> kinds;
    absl::Time window_start = absl::InfinitePast();
    int lines_in_window = 0;
    int64_t dropped = 0;   // lines the per-window cap held back
    int64_t failures = 0;  // since the last success
  };

  const SourceErrorLogOptions options_;
  std::map<std::string, Source> sources_;
};

}  // namespace phalanx::agent
