#include "common/base/log.h"

#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace phalanx::base {
namespace {
ABSL_CONST_INIT absl::Mutex g_component_mu(absl::kConstInit);
std::atomic<LogSeverity> g_min_severity{LogSeverity::kInfo};

// Never destroyed, so logging from static destructors and other threads at exit stays safe.
std::string& ComponentLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_component_mu) {
  static std::string* const component = new std::string("phalanx");
  return *component;
}
}  // namespace

void SetLogComponent(std::string_view component) {
  absl::MutexLock lock(&g_component_mu);
  ComponentLocked() = std::string(component);
}

void SetMinLogSeverity(LogSeverity severity) { g_min_severity.store(severity); }

LogMessage::~LogMessage() {
  if (severity_ < g_min_severity.load()) return;
  const char letter = severity_ == LogSeverity::kInfo      ? 'I'
                      : severity_ == LogSeverity::kWarning ? 'W'
                                                           : 'E';
  std::string line(1, letter);
  line += absl::FormatTime("%m%d %H:%M:%E3S ", absl::Now(), absl::UTCTimeZone());
  {
    absl::MutexLock lock(&g_component_mu);
    line += ComponentLocked();
  }
  line += "] ";
  line += stream_.str();
  line += '\n';
  // One write(2) per line keeps lines from different threads whole.
  ssize_t unused = ::write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace phalanx::base
