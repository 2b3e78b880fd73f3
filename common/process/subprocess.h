// Subprocess: starts a program with fork/exec, captures its stdout line by line (stderr goes
// to a file or is inherited), and lets the owner signal and reap it. Used by multi-process
// tests, the demo and benchmarks, and later by the local cluster's process kubelet.
// Thread-safe. The destructor SIGKILLs a child that is still running and reaps it.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace phalanx::process {

struct SubprocessOptions {
  std::vector<std::string> argv;                 // argv[0] is the program path
  std::map<std::string, std::string> env;        // added to (overriding) the parent's environment
  std::string stderr_path;                       // empty: inherit the parent's stderr
  bool echo_stdout = false;                      // also copy each stdout line to our stderr
  std::string echo_prefix;
};

class Subprocess {
 public:
  // InvalidArgument for an empty argv; Internal when fork/pipe fails. A program that cannot be
  // executed exits with status 127 (as a shell would).
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(SubprocessOptions options);
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // Sends `sig` unless the child was already reaped.
  void Signal(int sig);
  // Waits up to `timeout` for the child to exit; returns its wait status (as from waitpid).
  std::optional<int> Wait(absl::Duration timeout);
  // The exit code if it exited normally, or 128+signal if killed; nullopt while running.
  std::optional<int> ExitCode();

  // Every stdout line so far.
  std::vector<std::string> Lines();
  // Waits up to `timeout` for a stdout line satisfying `match`; returns the first such line
  // (searching from line `from`).
  std::optional<std::string> WaitForLine(const std::function<bool(const std::string&)>& match,
                                         absl::Duration timeout, size_t from = 0);

 private:
  Subprocess() = default;
  void ReadLoop(int fd, bool echo, std::string prefix);
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  pid_t pid_ = -1;
  std::thread reader_;
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  bool stdout_closed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<int> wait_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::process
