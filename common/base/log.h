// Minimal structured-enough logging to stderr: `PHX_LOG(INFO) << "task " << id << " failed";`
// Lines look like `I1122 02:31:07.123 coordinator] message`. Thread-safe (one write per line).
#pragma once

#include <sstream>
#include <string_view>

namespace phalanx::base {

enum class LogSeverity { kInfo, kWarning, kError };

// Sets the component name printed on every line (e.g. "coordinator"). Call once from main.
void SetLogComponent(std::string_view component);
// Lines below this severity are dropped (default: info).
void SetMinLogSeverity(LogSeverity severity);

class LogMessage {
 public:
  explicit LogMessage(LogSeverity severity) : severity_(severity) {}
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

}  // namespace phalanx::base

#define PHX_LOG_SEVERITY_INFO ::phalanx::base::LogSeverity::kInfo
#define PHX_LOG_SEVERITY_WARNING ::phalanx::base::LogSeverity::kWarning
#define PHX_LOG_SEVERITY_ERROR ::phalanx::base::LogSeverity::kError
#define PHX_LOG(sev) ::phalanx::base::LogMessage(PHX_LOG_SEVERITY_##sev).stream()
