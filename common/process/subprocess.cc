#include "common/process/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace phalanx::process {

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(SubprocessOptions options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("empty argv");
  // Build everything the child needs before fork: after fork only async-signal-safe calls.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env[std::string(*e, static_cast<size_t>(eq - *e))] = std::string(eq + 1);
  }
  for (const auto& [k, v] : options.env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (std::string& s : options.argv) argv.push_back(s.data());
  argv.push_back(nullptr);

  // out[0] is the parent's read end (-1 when stdout goes to a file), out[1] the child's stdout.
  int out[2] = {-1, -1};
  if (!options.stdout_path.empty()) {
    out[1] = open(options.stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out[1] < 0) {
      return absl::InternalError(
          absl::StrCat("open ", options.stdout_path, ": ", std::strerror(errno)));
    }
  } else if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  auto close_out = [&out] {
    if (out[0] >= 0) close(out[0]);
    close(out[1]);
  };
  int err_fd = -1;
  if (!options.stderr_path.empty()) {
    err_fd = open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (err_fd < 0) {
      close_out();
      return absl::InternalError(
          absl::StrCat("open ", options.stderr_path, ": ", std::strerror(errno)));
    }
  } else if (!options.stdout_path.empty()) {
    err_fd = out[1];  // one log for both streams
  }
  const char* working_dir = options.working_dir.empty() ? nullptr : options.working_dir.c_str();
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close_out();
    if (err_fd >= 0 && err_fd != out[1]) close(err_fd);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    if (working_dir != nullptr && chdir(working_dir) != 0) _exit(127);
    if (options.die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent is already gone
    }
    // Own process group, so a signal to the test's group does not hit the children twice.
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  // The child makes itself a group leader too; doing it here as well closes the window in
  // which a signal to the group (SignalGroup) right after Start would find no such group.
  // Fails harmlessly once the child has exec'd (by then it has done it itself).
  setpgid(pid, pid);
  close(out[1]);
  if (err_fd >= 0 && err_fd != out[1]) close(err_fd);
  std::unique_ptr<Subprocess> child(new Subprocess());
  child->pid_ = pid;
  child->kill_group_on_exit_ = options.kill_group_on_exit;
  if (out[0] < 0) {
    absl::MutexLock lock(&child->mu_);
    child->stdout_closed_ = true;  // nothing to read: WaitForLine returns at once
    return child;
  }
  child->reader_ = std::thread([c = child.get(), fd = out[0], echo = options.echo_stdout,
                                prefix = options.echo_prefix] { c->ReadLoop(fd, echo, prefix); });
  return child;
}

Subprocess::~Subprocess() {
  {
    absl::MutexLock lock(&mu_);
    ReapLocked();
    if (!wait_status_.has_value()) {
      kill(kill_group_on_exit_ ? -pid_ : pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      wait_status_ = status;
    }
  }
  if (reader_.joinable()) reader_.join();
}

void Subprocess::ReadLoop(int fd, bool echo, std::string prefix) {
  std::string partial;
  char buffer[4096];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    partial.append(buffer, n);
    size_t newline;
    while ((newline = partial.find('\n')) != std::string::npos) {
      std::string line = partial.substr(0, newline);
      partial.erase(0, newline + 1);
      if (echo) {
        std::string out = prefix + line + "\n";
        ssize_t unused = write(STDERR_FILENO, out.data(), out.size());
        (void)unused;
      }
      absl::MutexLock lock(&mu_);
      lines_.push_back(std::move(line));
    }
  }
  close(fd);
  absl::MutexLock lock(&mu_);
  if (!partial.empty()) lines_.push_back(partial);
  stdout_closed_ = true;
}

void Subprocess::ReapLocked() {
  if (wait_status_.has_value()) return;
  if (kill_group_on_exit_) {
    // Look without reaping: the zombie keeps the group id ours while we kill what is left.
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != pid_) {
      return;
    }
    kill(-pid_, SIGKILL);
  }
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) wait_status_ = status;
}

void Subprocess::SignalGroup(int sig) {
  absl::MutexLock lock(&mu_);
  // No ReapLocked first: an exited but unreaped child still reserves the group id.
  if (!wait_status_.has_value()) kill(-pid_, sig);
}

void Subprocess::Signal(int sig) {
  absl::MutexLock lock(&mu_);
  ReapLocked();
  if (!wait_status_.has_value()) kill(pid_, sig);
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  // The reader thread may not yet have read the last of stdout when the child is reaped (its
  // final line, often unterminated, as `kubectl -o jsonpath` prints it): wait for the pipe's
  // end too, within the same deadline, so that Lines() after Wait is the whole output. (A
  // grandchild that kept the pipe open makes this wait out the deadline; the status is kept.)
  auto drained = [this, deadline]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    mu_.AwaitWithDeadline(absl::Condition(&stdout_closed_), deadline);
    return wait_status_;
  };
  {
    absl::MutexLock lock(&mu_);
    ReapLocked();
    if (wait_status_.has_value()) return drained();
  }
  // A pidfd becomes readable when the child exits: wait on it with the deadline.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  if (pidfd >= 0) {
    pollfd fd{pidfd, POLLIN, 0};
    const int ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(timeout), 1 << 30));
    int rc;
    do {
      rc = poll(&fd, 1, ms);
    } while (rc < 0 && errno == EINTR);
    close(pidfd);
  }
  absl::MutexLock lock(&mu_);
  ReapLocked();
  if (!wait_status_.has_value()) return std::nullopt;
  return drained();
}

std::optional<int> Subprocess::ExitCode() {
  absl::MutexLock lock(&mu_);
  ReapLocked();
  if (!wait_status_.has_value()) return std::nullopt;
  if (WIFEXITED(*wait_status_)) return WEXITSTATUS(*wait_status_);
  if (WIFSIGNALED(*wait_status_)) return 128 + WTERMSIG(*wait_status_);
  return std::nullopt;
}

std::vector<std::string> Subprocess::Lines() {
  absl::MutexLock lock(&mu_);
  return lines_;
}

std::optional<std::string> Subprocess::WaitForLine(
    const std::function<bool(const std::string&)>& match, absl::Duration timeout, size_t from) {
  absl::MutexLock lock(&mu_);
  size_t next = from;
  std::optional<std::string> found;
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (; next < lines_.size(); ++next) {
      if (match(lines_[next])) {
        found = lines_[next];
        return true;
      }
    }
    return stdout_closed_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  return found;
}

}  // namespace phalanx::process
