// CliqueSocketServer: the agent's local clique registry on a Unix socket (the path is mounted
// into worker pods). One request line, one answer, per connection or several per connection:
//
//   REPORT job=<job> task=<n> inc=<n> clique=<id> state=<STATE> devices=<i,j,...>
//       → OK [abort=<reason>]      (a pending abort request for the task rides on the answer)
//   FORGET job=<job> task=<n>      → OK
//   LIST                           → one line per clique (the REPORT fields), then END
//   anything else / a bad field    → ERR <what is wrong>
//
// Lines are at most 4 KiB; a client that sends a longer line or stalls mid-line (10 s) is
// disconnected. The socket file is created 0660 (replacing a stale one). One accept thread;
// connections are served one at a time (requests are tiny). Stop() (and the destructor) end it.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "node_agent/cliques/clique_registry.h"

namespace phalanx::agent {

// Parses and answers one request line (the protocol above), without the newline.
std::string HandleCliqueRequest(CliqueRegistry& registry, const std::string& line, absl::Time now);

class CliqueSocketServer {
 public:
  static absl::StatusOr<std::unique_ptr<CliqueSocketServer>> Start(const std::string& path,
                                                                   CliqueRegistry& registry,
                                                                   base::Clock& clock);
  ~CliqueSocketServer();
  void Stop();

 private:
  CliqueSocketServer(std::string path, int listen_fd, int wake_fd[2], CliqueRegistry& registry,
                     base::Clock& clock);
  void Loop();
  void Serve(int fd);

  const std::string path_;
  const int listen_fd_;
  int wake_read_;
  int wake_write_;
  CliqueRegistry& registry_;
  base::Clock& clock_;
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

}  // namespace phalanx::agent
