#include "node_agent/cliques/clique_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace phalanx::agent {
namespace {

constexpr size_t kMaxLine = 4096;
constexpr int kReadTimeoutMs = 10'000;

// "k=v k=v ..." after the verb; InvalidArgument naming a malformed field.
absl::StatusOr<std::map<std::string, std::string>> Fields(absl::string_view rest) {
  std::map<std::string, std::string> fields;
  for (absl::string_view part : absl::StrSplit(rest, ' ', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("field '", part, "' is not key=value"));
    }
    fields[std::string(part.substr(0, eq))] = std::string(part.substr(eq + 1));
  }
  return fields;
}

std::string Describe(const LocalClique& c) {
  return absl::StrCat("job=", c.job, " task=", c.task, " inc=", c.incarnation, " clique=", c.clique,
                      " state=", c.state, " devices=", absl::StrJoin(c.devices, ","));
}

std::string Err(const absl::Status& s) { return absl::StrCat("ERR ", s.message()); }

}  // namespace

std::string HandleCliqueRequest(CliqueRegistry& registry, const std::string& line, absl::Time now) {
  const size_t space = line.find(' ');
  const std::string verb = line.substr(0, space);
  const absl::string_view rest =
      space == std::string::npos ? absl::string_view() : absl::string_view(line).substr(space + 1);
  if (verb == "LIST") {
    std::string out;
    for (const LocalClique& c : registry.List()) absl::StrAppend(&out, Describe(c), "\n");
    return out + "END";
  }
  if (verb != "REPORT" && verb != "FORGET")
    return Err(absl::InvalidArgumentError(
        absl::StrCat("unknown request '", verb.substr(0, 32), "' (REPORT, FORGET or LIST)")));
  absl::StatusOr<std::map<std::string, std::string>> f = Fields(rest);
  if (!f.ok()) return Err(f.status());
  LocalClique c;
  c.job = (*f)["job"];
  if (!absl::SimpleAtoi((*f)["task"], &c.task) || c.task < 0) {
    return Err(absl::InvalidArgumentError("task must be a number >= 0"));
  }
  if (c.job.empty()) return Err(absl::InvalidArgumentError("job is required"));
  if (verb == "FORGET") {
    registry.Forget(c.job, c.task);
    return "OK";
  }
  if (!absl::SimpleAtoi((*f)["inc"], &c.incarnation)) {
    return Err(absl::InvalidArgumentError("inc must be a number"));
  }
  c.clique = (*f)["clique"];
  c.state = (*f)["state"];
  for (absl::string_view d : absl::StrSplit((*f)["devices"], ',', absl::SkipEmpty())) {
    int device = 0;
    if (!absl::SimpleAtoi(d, &device) || device < 0) {
      return Err(absl::InvalidArgumentError(absl::StrCat("bad device '", d, "'")));
    }
    c.devices.push_back(device);
  }
  c.updated = now;
  const std::string job = c.job;
  const int task = c.task;
  if (absl::Status s = registry.Report(std::move(c)); !s.ok()) return Err(s);
  const std::string abort = registry.TakeAbortRequest(job, task);
  return abort.empty() ? "OK" : absl::StrCat("OK abort=", absl::StrReplaceAll(abort, {{" ", "_"}}));
}

absl::StatusOr<std::unique_ptr<CliqueSocketServer>> CliqueSocketServer::Start(
    const std::string& path, CliqueRegistry& registry, base::Clock& clock) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("clique socket path must be 1..", sizeof(addr.sun_path) - 1, " bytes"));
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  unlink(path.c_str());  // a stale socket from a previous agent
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat("clique socket ", path, ": ", why));
  }
  chmod(path.c_str(), 0660);
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  auto server =
      std::unique_ptr<CliqueSocketServer>(new CliqueSocketServer(path, fd, wake, registry, clock));
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

CliqueSocketServer::CliqueSocketServer(std::string path, int listen_fd, int wake_fd[2],
                                       CliqueRegistry& registry, base::Clock& clock)
    : path_(std::move(path)),
      listen_fd_(listen_fd),
      wake_read_(wake_fd[0]),
      wake_write_(wake_fd[1]),
      registry_(registry),
      clock_(clock) {}

CliqueSocketServer::~CliqueSocketServer() { Stop(); }

void CliqueSocketServer::Stop() {
  if (stopped_.exchange(true)) return;
  const char byte = 1;
  (void)!write(wake_write_, &byte, 1);
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
  unlink(path_.c_str());
}

void CliqueSocketServer::Loop() {
  while (!stopped_.load()) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Serve(fd);
    close(fd);
  }
}

void CliqueSocketServer::Serve(int fd) {
  std::string buffer;
  char chunk[1024];
  while (!stopped_.load()) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    const int ready = poll(fds, 2, kReadTimeoutMs);
    if (ready <= 0 || fds[1].revents != 0) return;  // stalled client, or stopping
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n <= 0) return;
    buffer.append(chunk, static_cast<size_t>(n));
    size_t newline;
    while ((newline = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      if (line.size() > kMaxLine) break;  // answered below
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const std::string answer = HandleCliqueRequest(registry_, line, clock_.Now()) + "\n";
      if (send(fd, answer.data(), answer.size(), MSG_NOSIGNAL) < 0) return;
    }
    if (buffer.size() > kMaxLine || newline != std::string::npos) {
      const std::string answer = "ERR line longer than 4096 bytes\n";
      (void)!send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
      return;
    }
  }
}

}  // namespace phalanx::agent
