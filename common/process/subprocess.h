// Subprocess: starts a program with fork/exec, captures its stdout line by line (stderr goes
// to a file or is inherited) or sends both to a log file, and lets the owner signal and reap
// it. Used by multi-process tests, the demo and benchmarks, and the local cluster's kubelet.
// Every child leads its own process group (setpgid), so SignalGroup reaches whatever it
// forked too. Thread-safe. The destructor SIGKILLs a child that is still running (its whole
// group with kill_group_on_exit) and reaps it.
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
  std::vector<std::string> argv;           // argv[0] is the program path
  std::map<std::string, std::string> env;  // added to (overriding) the parent's environment
  std::string stderr_path;                 // empty: inherit the parent's stderr
  bool echo_stdout = false;                // also copy each stdout line to our stderr
  std::string echo_prefix;
  // Set: stdout goes to this file (created, appended to) instead of being captured, so there
  // is no reader thread and Lines() stays empty; stderr goes there too unless stderr_path is
  // set (one log, as `kubectl logs` shows a container's).
  std::string stdout_path;
  std::string working_dir;  // empty: the parent's; the child exits 127 if it cannot chdir
  // Like a container's end: once the child exits, whatever is left in its process group is
  // SIGKILLed before the child is reaped (while the group id is still reserved by the zombie).
  bool kill_group_on_exit = false;
  // The child gets SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG), so servers
  // a harness starts (etcd, kube-apiserver) cannot outlive a harness that was SIGKILLed. Start
  // such children from a thread that lives as long as they should (e.g. main).
  bool die_with_parent = false;
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
  // Sends `sig` to the child's process group unless the child was already reaped (a zombie
  // child still reserves the group id, so the signal cannot reach a stranger's group).
  void SignalGroup(int sig);
  // Waits up to `timeout` for the child to exit and for the end of its stdout (so that Lines()
  // then holds all of it); returns its wait status (as from waitpid), nullopt while it runs.
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
  bool kill_group_on_exit_ = false;
  std::thread reader_;
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  bool stdout_closed_ ABSL_GUARDED_BY(mu_) = false;  // true from the start with stdout_path
  std::optional<int> wait_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::process
