// CliqueSocketServer: the agent's local clique registry on a Unix socket (the path is mounted
// into worker pods) or on TCP at the node's address (docs/adr/0004). One request line, one answer;
// several requests per connection are fine:
//
//   REPORT job=<job> task=<n> inc=<n> clique=<id> state=<STATE> devices=<i,j,...> key=<key>
//       → OK [abort=<reason>]      (a pending abort request for the task rides on the answer)
//   FORGET job=<job> task=<n> key=<key>   → OK
//   LIST key=<key>                 → one line per clique of the key's tasks (the REPORT fields,
//                                    without the key), then END
//   anything else / a bad field    → ERR <what is wrong>; a refused key → ERR permission denied:
//   ...
//
// `key` is a digest of the caller's coordination credential (clique_registry.h says who may
// read and write what, and why a digest: the agent never sees the credential itself).
//
// Limits (a local process must not be able to stall other clients):
//  - one poll loop serves every connection (no thread per connection, nothing blocks on one
//    client); answers are written as the client reads them;
//  - a whole-request deadline: each request (from the accept, or from the previous answer) must
//    arrive complete and its answer be read within `request_deadline`; a client that idles or
//    drips bytes is cut off then (ERR request deadline exceeded), however often it sends a byte;
//  - at most `max_connections` open at once. A new connection's request is answered at once if
//    it is already there; a connection over the limit then pushes out the oldest one that has
//    not completed a request (ERR busy, closed, counted), so a flood of idle connections only
//    displaces itself while a real client, which sends right after connecting, gets in;
//  - lines are at most 4 KiB.
// The deadlines are real (monotonic) time, not the injected Clock: they bound socket I/O, which a
// FakeClock cannot make time out; report times (for expiry) come from the Clock.
// The socket file is created 0660 (replacing a stale one). Stop() (and the destructor) end it.
// Thread-safe: the loop runs on its own thread; Stop() from any other thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "node_agent/agent_metrics.h"
#include "node_agent/cliques/clique_registry.h"

namespace phalanx::agent {

// Parses and answers one request line (the protocol above), without the newline, for a peer
// with process id `peer_pid` (0 unknown).
std::string HandleCliqueRequest(CliqueRegistry& registry, const std::string& line, absl::Time now,
                                int peer_pid = 0);

struct CliqueSocketOptions {
  // A Unix socket path, or host:port to listen on TCP (task pods that may not mount a host path
  // reach it on their node's address: docs/adr/0004). Over TCP the peer's pid is unknown (0).
  std::string path;
  int max_connections = 64;
  absl::Duration request_deadline = absl::Seconds(2);
};

class CliqueSocketServer {
 public:
  // InvalidArgument for a bad path or limit, FailedPrecondition when the socket cannot be bound.
  // `metrics` may be null.
  static absl::StatusOr<std::unique_ptr<CliqueSocketServer>> Start(CliqueSocketOptions options,
                                                                   CliqueRegistry& registry,
                                                                   base::Clock& clock,
                                                                   AgentMetrics* metrics = nullptr);
  ~CliqueSocketServer();
  void Stop();
  // The TCP port it listens on (for a TCP endpoint with port 0), else 0.
  int port() const;

  // Connections closed by the server, by why (also in the metrics), for tests and logs.
  int refused_over_limit() const { return refused_.load(); }
  int cut_at_deadline() const { return cut_.load(); }

 private:
  struct Connection;
  CliqueSocketServer(CliqueSocketOptions options, int listen_fd, std::string socket_file,
                     int wake_fd[2], CliqueRegistry& registry, base::Clock& clock,
                     AgentMetrics* metrics);
  void Loop();
  // Accepts what is waiting (a bounded number); false when out of file descriptors.
  bool AcceptAll(std::vector<std::unique_ptr<Connection>>& open);
  // Reads what `c` sent, answers each complete line; false when the connection is done.
  bool OnReadable(Connection& c);
  // Writes what is pending; false when the connection is done (or broke).
  bool Flush(Connection& c);
  void Dropped(const char* reason);

  const CliqueSocketOptions options_;
  const int listen_fd_;
  // The socket file Stop() removes ("" for a TCP endpoint).
  const std::string socket_file_;
  int wake_read_;
  int wake_write_;
  CliqueRegistry& registry_;
  base::Clock& clock_;
  AgentMetrics* const metrics_;
  std::atomic<bool> stopped_{false};
  std::atomic<int> refused_{0};
  std::atomic<int> cut_{0};
  std::thread thread_;
};

}  // namespace phalanx::agent
