// The clique socket under hostile local clients, over a real Unix socket: an idle client does not
// hold up anyone else, a client that drips one byte at a time is cut at the whole-request
// deadline, a flood of connections does not keep a real client out, and a separate process with
// another job's key can neither read nor change this job's entries.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "node_agent/cliques/clique_socket.h"
#include "prometheus/text_serializer.h"

namespace phalanx::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string SocketPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          absl::StrCat("phx-", name, "-", getpid(), ".sock"))
      .string();
}

int Connect(const std::string& path, bool nonblocking = false) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  timeval timeout{10, 0};  // generous for a loaded machine; only a broken server reaches it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));  // bounds connect() too
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// One request on a fresh connection; the answer through its last line (END for LIST).
std::string AskOnce(const std::string& path, const std::string& request) {
  const int fd = Connect(path);
  if (fd < 0) return "connect failed";
  const std::string line = request + "\n";
  (void)!send(fd, line.data(), line.size(), MSG_NOSIGNAL);
  std::string answer;
  char c;
  while (read(fd, &c, 1) == 1) {
    answer.push_back(c);
    if (c == '\n' &&
        (!request.starts_with("LIST") || answer.ends_with("END\n") || answer.starts_with("ERR"))) {
      break;
    }
  }
  close(fd);
  return answer;
}

class CliqueSocketLimitsTest : public ::testing::Test {
 protected:
  void Start(CliqueSocketOptions options) {
    auto server = CliqueSocketServer::Start(options, registry_, base::RealClock::Get(), &metrics_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  std::string Metrics() { return prometheus::TextSerializer().Serialize(prometheus_.Collect()); }

  CliqueRegistry registry_;
  prometheus::Registry prometheus_;
  AgentMetrics metrics_{prometheus_};
  std::unique_ptr<CliqueSocketServer> server_;
};

TEST_F(CliqueSocketLimitsTest, AnIdleClientDoesNotDelayAnotherClientsList) {
  const std::string path = SocketPath("idle");
  // A deadline far beyond the client's 10 s timeout: the LIST must not wait for the idle
  // client to be cut off, it must be served beside it.
  Start({path, 64, absl::Minutes(5)});
  const int idle = Connect(path);
  ASSERT_GE(idle, 0);
  (void)!send(idle, "LI", 2, MSG_NOSIGNAL);  // half a request, then nothing
  const int silent = Connect(path);          // and one that sends nothing at all
  ASSERT_GE(silent, 0);
  EXPECT_EQ(AskOnce(path, "REPORT job=j task=0 inc=0 clique=c state=READY devices=0 key=k"),
            "OK\n");
  EXPECT_EQ(AskOnce(path, "LIST key=k"),
            "job=j task=0 inc=0 clique=c state=READY devices=0\nEND\n");
  close(idle);
  close(silent);
}

TEST_F(CliqueSocketLimitsTest, ADripClientIsCutAtTheWholeRequestDeadline) {
  const std::string path = SocketPath("drip");
  Start({path, 64, absl::Seconds(1)});
  const int fd = Connect(path);
  ASSERT_GE(fd, 0);
  // One byte every 250 ms: a per-read timer never fires; the whole line would take ~25 s.
  const std::string line =
      "REPORT job=drip task=0 inc=0 clique=c state=READY devices=0,1,2,3,4,5,6,7 key=k\n";
  size_t sent = 0;
  std::string answer;
  bool cut = false;
  for (; sent < line.size() && !cut; ++sent) {
    if (send(fd, &line[sent], 1, MSG_NOSIGNAL) != 1) {
      cut = true;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 250) > 0) {
      char buf[128];
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n > 0) answer.append(buf, static_cast<size_t>(n));
      cut = true;  // an answer or EOF before the line was complete
    }
  }
  close(fd);
  EXPECT_TRUE(cut) << "the drip client sent its whole line (" << sent << " bytes)";
  EXPECT_LT(sent, line.size());
  if (!answer.empty()) {
    EXPECT_THAT(answer, StartsWith("ERR request deadline exceeded"));
  }
  EXPECT_EQ(server_->cut_at_deadline(), 1);
  EXPECT_THAT(Metrics(),
              HasSubstr(R"(phalanx_agent_clique_connections_dropped_total{reason="deadline"} 1)"));
  EXPECT_TRUE(registry_.List().empty());
}

TEST_F(CliqueSocketLimitsTest, AThousandConnectionsDoNotStarveAValidClient) {
  const std::string path = SocketPath("flood");
  // Deadline long enough that the flood is not cleared by it during the test: only the limit
  // and answering complete requests at once keep the valid client in.
  Start({path, 16, absl::Minutes(5)});
  std::vector<int> flood;
  for (int i = 0; i < 1000; ++i) {
    const int fd = Connect(path, /*nonblocking=*/true);  // EAGAIN when the backlog is full
    if (fd >= 0) flood.push_back(fd);
  }
  EXPECT_GT(flood.size(), 16u);
  EXPECT_EQ(AskOnce(path, "REPORT job=j task=3 inc=0 clique=c state=READY devices=3 key=k"),
            "OK\n");
  EXPECT_THAT(AskOnce(path, "LIST key=k"), HasSubstr("job=j task=3"));
  EXPECT_GT(server_->refused_over_limit(), 0);
  EXPECT_THAT(Metrics(),
              HasSubstr(R"(phalanx_agent_clique_connections_dropped_total{reason="limit"})"));
  // A refused connection was told why before it was closed.
  char buf[64] = {};
  int told = 0;
  for (int fd : flood) {
    if (read(fd, buf, sizeof(buf) - 1) > 0 && std::string(buf).starts_with("ERR busy")) ++told;
    close(fd);
  }
  EXPECT_GT(told, 0);
}

// Runs `script` under python3 (a separate process, with its own pid) and returns its output.
std::string RunPython(const std::string& script) {
  const std::string file = SocketPath("client") + ".py";
  FILE* f = std::fopen(file.c_str(), "w");
  if (f == nullptr) return "cannot write script";
  std::fputs(script.c_str(), f);
  std::fclose(f);
  FILE* p = popen(absl::StrCat("timeout 60 python3 ", file, " 2>&1").c_str(), "r");
  std::string out;
  char buf[256];
  while (p != nullptr && std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  if (p != nullptr) pclose(p);
  std::filesystem::remove(file);
  return out;
}

TEST_F(CliqueSocketLimitsTest, AProcessWithAnotherJobsKeyCannotReadOrOverwriteEntries) {
  const std::string path = SocketPath("access");
  Start({path, 64, absl::Seconds(10)});
  ASSERT_EQ(AskOnce(path, "REPORT job=a task=0 inc=0 clique=c state=READY devices=0 key=job-a-key"),
            "OK\n");
  const std::string out = RunPython(absl::StrCat(R"(
import socket
def ask(line):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(")",
                                                 path, R"(")
    s.sendall((line + "\n").encode())
    data = b""
    while not (data.endswith(b"END\n") or (data.endswith(b"\n") and not line.startswith("LIST"))
               or data.startswith(b"ERR") and data.endswith(b"\n")):
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    return data.decode().strip().replace("\n", "|")
print("list=" + ask("LIST key=job-b-key"))
print("report=" + ask("REPORT job=a task=0 inc=9 clique=c state=FAILED devices=0 key=job-b-key"))
print("forget=" + ask("FORGET job=a task=0 key=job-b-key"))
print("nokey=" + ask("REPORT job=a task=0 inc=9 clique=c state=FAILED devices=0"))
)"));
  EXPECT_THAT(out, HasSubstr("list=END\n"));  // sees nothing of job a
  EXPECT_THAT(out, HasSubstr("report=ERR permission denied: job a task 0 is held by another"));
  EXPECT_THAT(out, HasSubstr("forget=ERR permission denied"));
  EXPECT_THAT(out, HasSubstr("nokey=ERR permission denied"));
  // Job a's entry is as its owner left it.
  EXPECT_EQ(AskOnce(path, "LIST key=job-a-key"),
            "job=a task=0 inc=0 clique=c state=READY devices=0\nEND\n");
}

}  // namespace
}  // namespace phalanx::agent
