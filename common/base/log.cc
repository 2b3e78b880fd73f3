#include "common/base/log.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace phalanx::base {
namespace {
std::atomic<const std::string*> g_component{new std::string("phalanx")};
std::atomic<LogSeverity> g_min_severity{LogSeverity::kInfo};
}  // namespace

void SetLogComponent(std::string_view component) {
  // Leaked on purpose: other threads may still be reading the old name.
  g_component.store(new std::string(component));
}

void SetMinLogSeverity(LogSeverity severity) { g_min_severity.store(severity); }

LogMessage::~LogMessage() {
  if (severity_ < g_min_severity.load()) return;
  const char letter = severity_ == LogSeverity::kInfo      ? 'I'
                      : severity_ == LogSeverity::kWarning ? 'W'
                                                           : 'E';
  std::string line(1, letter);
  line += absl::FormatTime("%m%d %H:%M:%E3S ", absl::Now(), absl::UTCTimeZone());
  line += *g_component.load();
  line += "] ";
  line += stream_.str();
  line += '\n';
  // One write(2) per line keeps lines from different threads whole.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace phalanx::base
