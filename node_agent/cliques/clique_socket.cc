#include "node_agent/cliques/clique_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/stream_endpoint.h"

namespace phalanx::agent {
namespace {

constexpr size_t kMaxLine = 4096;
// A loop over accept() between polls takes at most this many, so serving open connections is
// never starved by a flood of new ones.
constexpr int kMaxAcceptsPerRound = 256;
using SteadyTime = std::chrono::steady_clock::time_point;
constexpr absl::string_view kBusy = "ERR busy: too many connections to the node agent, retry\n";

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

std::string Err(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kPermissionDenied &&
      !absl::StartsWith(s.message(), "permission denied")) {
    return absl::StrCat("ERR permission denied: ", s.message());
  }
  return absl::StrCat("ERR ", s.message());
}

SteadyTime SteadyNow() { return std::chrono::steady_clock::now(); }

std::chrono::nanoseconds ToChrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

// The peer's pid as this process sees it (0: unknown, e.g. in a pid namespace we cannot see).
int PeerPid(int fd) {
  ucred cred{};
  socklen_t size = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0) return 0;
  return cred.pid;
}

// Best effort: a last line to a client being cut off (never blocks).
void SendFinal(int fd, absl::string_view line) {
  (void)!send(fd, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

std::string HandleCliqueRequest(CliqueRegistry& registry, const std::string& line, absl::Time now,
                                int peer_pid) {
  const size_t space = line.find(' ');
  const std::string verb = line.substr(0, space);
  const absl::string_view rest =
      space == std::string::npos ? absl::string_view() : absl::string_view(line).substr(space + 1);
  if (verb != "REPORT" && verb != "FORGET" && verb != "LIST")
    return Err(absl::InvalidArgumentError(
        absl::StrCat("unknown request '", verb.substr(0, 32), "' (REPORT, FORGET or LIST)")));
  absl::StatusOr<std::map<std::string, std::string>> f = Fields(rest);
  if (!f.ok()) return Err(f.status());
  const CliqueCaller caller{(*f)["key"], peer_pid};
  if (verb == "LIST") {
    if (caller.key.empty()) {
      return Err(absl::PermissionDeniedError("permission denied: LIST needs key=<your key>"));
    }
    std::string out;
    for (const LocalClique& c : registry.ListFor(caller.key)) {
      absl::StrAppend(&out, Describe(c), "\n");
    }
    return out + "END";
  }
  LocalClique c;
  c.job = (*f)["job"];
  if (!absl::SimpleAtoi((*f)["task"], &c.task) || c.task < 0) {
    return Err(absl::InvalidArgumentError("task must be a number >= 0"));
  }
  if (c.job.empty()) return Err(absl::InvalidArgumentError("job is required"));
  if (verb == "FORGET") {
    if (absl::Status s = registry.Forget(c.job, c.task, caller, now); !s.ok()) return Err(s);
    return "OK";
  }
  if (std::optional<base::Incarnation> inc = base::ParseIncarnation((*f)["inc"]); inc) {
    c.incarnation = *inc;
  } else {
    return Err(absl::InvalidArgumentError("inc must be a number in [0, 2^63 - 1]"));
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
  std::string abort;
  if (absl::Status s = registry.Report(std::move(c), caller, &abort); !s.ok()) return Err(s);
  return abort.empty() ? "OK" : absl::StrCat("OK abort=", absl::StrReplaceAll(abort, {{" ", "_"}}));
}

struct CliqueSocketServer::Connection {
  Connection(int fd, int pid, SteadyTime deadline) : fd(fd), pid(pid), deadline(deadline) {}
  ~Connection() { close(fd); }
  const int fd;
  const int pid;
  SteadyTime deadline;    // the current request's whole-request deadline
  std::string in;         // bytes read, not yet a complete line
  std::string out;        // answers not yet written
  bool answered = false;  // at least one request was answered
  bool eof = false;       // the client closed its side
  bool closing = false;   // close once `out` is written
};

absl::StatusOr<std::unique_ptr<CliqueSocketServer>> CliqueSocketServer::Start(
    CliqueSocketOptions options, CliqueRegistry& registry, base::Clock& clock,
    AgentMetrics* metrics) {
  absl::StatusOr<base::StreamEndpoint> endpoint = base::ParseStreamEndpoint(options.path);
  if (!endpoint.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("clique socket path or address: ", endpoint.status().message()));
  }
  if (options.max_connections < 1 || options.request_deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "clique socket: max connections and the request deadline must be positive");
  }
  absl::StatusOr<int> listening = base::ListenStream(*endpoint);
  if (!listening.ok()) {
    if (listening.status().code() == absl::StatusCode::kFailedPrecondition) {
      return absl::FailedPreconditionError(
          absl::StrCat("clique socket: ", listening.status().message()));
    }
    return listening.status();
  }
  const int fd = *listening;
  std::string socket_file =
      endpoint->kind == base::StreamEndpoint::Kind::kUnix ? endpoint->path : "";
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  auto server = std::unique_ptr<CliqueSocketServer>(new CliqueSocketServer(
      std::move(options), fd, std::move(socket_file), wake, registry, clock, metrics));
  server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  return server;
}

CliqueSocketServer::CliqueSocketServer(CliqueSocketOptions options, int listen_fd,
                                       std::string socket_file, int wake_fd[2],
                                       CliqueRegistry& registry, base::Clock& clock,
                                       AgentMetrics* metrics)
    : options_(std::move(options)),
      listen_fd_(listen_fd),
      socket_file_(std::move(socket_file)),
      wake_read_(wake_fd[0]),
      wake_write_(wake_fd[1]),
      registry_(registry),
      clock_(clock),
      metrics_(metrics) {}

CliqueSocketServer::~CliqueSocketServer() { Stop(); }

int CliqueSocketServer::port() const { return base::LocalPort(listen_fd_); }

void CliqueSocketServer::Stop() {
  if (stopped_.exchange(true)) return;
  const char byte = 1;
  (void)!write(wake_write_, &byte, 1);
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
  if (!socket_file_.empty()) unlink(socket_file_.c_str());
}

void CliqueSocketServer::Dropped(const char* reason) {
  if (metrics_ != nullptr) metrics_->CliqueConnectionDropped(reason);
}

void CliqueSocketServer::Loop() {
  std::vector<std::unique_ptr<Connection>> open;
  bool accept_paused = false;  // out of file descriptors: retry accept after a short poll
  std::vector<pollfd> fds;
  while (!stopped_.load()) {
    const SteadyTime now = SteadyNow();
    // Whole-request deadlines: an idle or dripping client goes, whatever it sent last.
    for (auto it = open.begin(); it != open.end();) {
      if ((*it)->deadline > now) {
        ++it;
        continue;
      }
      ++cut_;  // counted before the client can see the answer
      Dropped("deadline");
      SendFinal((*it)->fd, "ERR request deadline exceeded\n");
      it = open.erase(it);
    }
    fds.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({accept_paused ? -1 : listen_fd_, POLLIN, 0});
    int timeout_ms = accept_paused ? 100 : -1;
    for (const auto& c : open) {
      fds.push_back({c->fd, static_cast<short>(c->out.empty() ? POLLIN : POLLOUT), 0});
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(c->deadline - now).count();
      const int ms = static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
      timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents != 0) return;  // Stop()
    std::vector<std::unique_ptr<Connection>> kept;
    kept.reserve(open.size());
    for (size_t i = 0; i < open.size(); ++i) {
      const short revents = fds[i + 2].revents;
      Connection& c = *open[i];
      bool keep = true;
      if (revents & POLLOUT) {
        keep = Flush(c);
      } else if (revents & (POLLIN | POLLHUP | POLLERR)) {
        keep = OnReadable(c);
      }
      if (keep) kept.push_back(std::move(open[i]));
    }
    open.swap(kept);
    accept_paused = (fds[1].revents & POLLIN) != 0 && !AcceptAll(open);
  }
}

bool CliqueSocketServer::AcceptAll(std::vector<std::unique_ptr<Connection>>& open) {
  for (int i = 0; i < kMaxAcceptsPerRound; ++i) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // EMFILE/ENFILE: the listening socket stays readable; the loop stops polling it for a
      // moment instead of spinning. Anything else (EAGAIN): nothing left to accept.
      return errno != EMFILE && errno != ENFILE;
    }
    auto c = std::make_unique<Connection>(fd, PeerPid(fd),
                                          SteadyNow() + ToChrono(options_.request_deadline));
    // A client usually writes its request right after connecting: answer it now if it is all
    // here, so a flood of idle connections cannot keep a real request out.
    if (!OnReadable(*c)) continue;
    if (static_cast<int>(open.size()) >= options_.max_connections) {
      // Make room by closing the oldest connection that has not completed a request (idle or
      // dripping): under a flood the newest connection, most likely a real client about to send,
      // gets in, and a flood only ever pushes out other flood connections or ones that stalled.
      auto victim = std::find_if(open.begin(), open.end(),
                                 [](const auto& o) { return !o->answered && o->out.empty(); });
      ++refused_;  // counted before the client can see the answer
      Dropped("limit");
      if (victim != open.end()) {
        SendFinal((*victim)->fd, kBusy);
        open.erase(victim);
      } else if (!c->answered) {
        SendFinal(fd, kBusy);  // every open connection is mid-answer: refuse the new one
      }
      if (victim == open.end()) continue;
    }
    open.push_back(std::move(c));
  }
  return true;
}

bool CliqueSocketServer::OnReadable(Connection& c) {
  char chunk[4096];
  while (c.out.empty() && !c.eof && !c.closing) {
    const ssize_t n = read(c.fd, chunk, sizeof(chunk));
    if (n > 0) {
      c.in.append(chunk, static_cast<size_t>(n));
      if (c.in.find('\n') != std::string::npos || c.in.size() > kMaxLine) break;
      continue;
    }
    if (n == 0) {
      c.eof = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return false;  // reset
  }
  return Flush(c);
}

bool CliqueSocketServer::Flush(Connection& c) {
  for (;;) {
    while (!c.out.empty()) {
      const ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return true;  // POLLOUT next
      } else {
        return false;
      }
    }
    if (c.closing) return false;
    // Answer the next complete request, if one is here.
    const size_t newline = c.in.find('\n');
    if (newline == std::string::npos) {
      if (c.in.size() > kMaxLine) {
        c.out = "ERR line longer than 4096 bytes\n";
        c.closing = true;
        continue;
      }
      if (c.eof) return false;
      return true;
    }
    if (newline > kMaxLine) {
      c.out = "ERR line longer than 4096 bytes\n";
      c.closing = true;
      continue;
    }
    std::string line = c.in.substr(0, newline);
    c.in.erase(0, newline + 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // One answer at a time: the next line is read only once this one is written, so a client
    // that pipelines requests and never reads cannot grow the agent's memory.
    c.out = HandleCliqueRequest(registry_, line, clock_.Now(), c.pid) + "\n";
    c.answered = true;
    // The next request on this connection gets its own whole deadline.
    c.deadline = SteadyNow() + ToChrono(options_.request_deadline);
  }
}

}  // namespace phalanx::agent
