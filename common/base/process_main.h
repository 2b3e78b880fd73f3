// ProcessMain: what every Phalanx binary's main() does first, in one place. It blocks SIGTERM
// and SIGINT before any thread starts (threads inherit the mask, so only a deliberate waiter
// ever takes them: the services stop cleanly on them, and a container's PID 1 that leaves them
// unhandled never sees them at all), applies InitProcess (log component, what --version
// prints) and parses the flags (absl handles --help and --version: print and exit). Fail()
// prints the one-line error each binary prints for bad flags or configuration.
//
//   int main(int argc, char** argv) {
//     phalanx::base::ProcessMain process(argc, argv, {"operator", "phalanx-operator", "usage"});
//     if (!process.args().empty()) return process.Fail("unexpected argument " + ...);
//     ... serve ...
//     while (process.WaitForStopSignal(absl::Seconds(1)) == 0) { /* other exit conditions */ }
//   }
//
// Construct it once, first thing in main(), from the main thread. Its methods are thread-safe.
#pragma once

#include <signal.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"

namespace phalanx::base {

struct ProcessIdentity {
  std::string_view log_component;  // "operator": the log lines' component
  std::string_view program;        // "phalanx-operator": error prefix and --version line
  std::string_view usage;          // --help's first line(s)
};

class ProcessMain {
 public:
  ProcessMain(int argc, char** argv, const ProcessIdentity& identity);
  ProcessMain(const ProcessMain&) = delete;
  ProcessMain& operator=(const ProcessMain&) = delete;

  // The positional arguments after the program's name (flags removed).
  const std::vector<std::string>& args() const { return args_; }
  const std::string& program() const { return program_; }

  // "<program>: <message>" on stderr (and in the log); returns `exit_code`, for
  // `return process.Fail(...)` (2: bad usage or configuration).
  int Fail(std::string_view message, int exit_code = 2) const;

  // SIGTERM or SIGINT if one arrived within `timeout`, else 0. Only one thread should wait.
  int WaitForStopSignal(absl::Duration timeout) const;

  // For programs with nothing to clean up (a worker whose state is in its checkpoints): a thread
  // that ends the process as an unhandled stop signal would (exit 128 + the signal, the
  // convention shells and kubelets read), saying so on stderr.
  void ExitOnStopSignal() const;

 private:
  std::string program_;
  std::vector<std::string> args_;
  sigset_t stop_signals_;
};

}  // namespace phalanx::base
