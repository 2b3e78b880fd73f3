// The local clique registry over a real Unix socket: reports, listing, abort requests riding on
// the answer, and garbage (unknown verbs, bad fields, over-long lines) answered with ERR.
#include "node_agent/cliques/clique_socket.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace phalanx::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

// Sends `request` (with newline) on a fresh connection and reads one answer up to "\n" (or
// through "END\n" for LIST).
std::string Ask(const std::string& path, const std::string& request) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));  // bounds connect() too
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "connect failed";
  }
  const std::string line = request + "\n";
  (void)!send(fd, line.data(), line.size(), MSG_NOSIGNAL);
  std::string answer;
  char c;
  while (read(fd, &c, 1) == 1) {
    answer.push_back(c);
    if (c == '\n' && (!request.starts_with("LIST") || answer.ends_with("END\n"))) break;
  }
  close(fd);
  return answer;
}

TEST(CliqueRequestTest, ReportsAreListedAndCounted) {
  CliqueRegistry registry;
  EXPECT_EQ(
      HandleCliqueRequest(
          registry, "REPORT job=j task=1 inc=0 clique=c1 state=READY devices=0,1 key=k", kNow),
      "OK");
  EXPECT_EQ(
      HandleCliqueRequest(
          registry, "REPORT job=j task=2 inc=0 clique=c1 state=FORMING devices=2 key=k", kNow),
      "OK");
  EXPECT_EQ(registry.CountByState(), (std::map<std::string, int>{{"FORMING", 1}, {"READY", 1}}));
  EXPECT_THAT(HandleCliqueRequest(registry, "LIST key=k", kNow),
              HasSubstr("job=j task=1 inc=0 clique=c1 state=READY devices=0,1\n"));
  // A newer incarnation of task 1 replaces the old one's cliques.
  EXPECT_EQ(
      HandleCliqueRequest(
          registry, "REPORT job=j task=1 inc=1 clique=c2 state=FORMING devices=0,1 key=k", kNow),
      "OK");
  EXPECT_EQ(registry.List().size(), 2u);
  EXPECT_EQ(HandleCliqueRequest(registry, "FORGET job=j task=2 key=k", kNow), "OK");
  EXPECT_EQ(registry.List().size(), 1u);
}

TEST(CliqueRequestTest, AnAbortRequestForADeviceRidesOnTheTasksNextReport) {
  CliqueRegistry registry;
  ASSERT_EQ(HandleCliqueRequest(
                registry, "REPORT job=j task=0 inc=0 clique=c state=READY devices=3 key=k", kNow),
            "OK");
  EXPECT_EQ(registry.RequestAbortForDevice(3, "xid 79 on gpu 3"), 1);
  EXPECT_EQ(registry.RequestAbortForDevice(5, "other gpu"), 0);
  EXPECT_EQ(HandleCliqueRequest(
                registry, "REPORT job=j task=0 inc=0 clique=c state=READY devices=3 key=k", kNow),
            "OK abort=xid_79_on_gpu_3");
  EXPECT_EQ(
      HandleCliqueRequest(
          registry, "REPORT job=j task=0 inc=0 clique=c state=ABORTING devices=3 key=k", kNow),
      "OK");  // taken once
}

TEST(CliqueRequestTest, GarbageIsAnErrorNamingTheProblem) {
  CliqueRegistry registry;
  const struct {
    const char* line;
    const char* error;
  } cases[] = {
      {"", "unknown request"},
      {"HELLO", "unknown request"},
      {"REPORT job=j task=x inc=0 clique=c state=READY", "task must be a number"},
      {"REPORT job=j task=-1 inc=0 clique=c state=READY", "task must be a number"},
      {"REPORT task=0 inc=0 clique=c state=READY", "job is required"},
      {"REPORT job=j task=0 inc=z clique=c state=READY", "inc must be a number"},
      {"REPORT job=j task=0 inc=0 clique=c state=BORED", "unknown clique state"},
      {"REPORT job=j task=0 inc=0 state=READY", "needs job and clique"},
      {"REPORT job=j task=0 inc=0 clique=c state=READY devices=0,x", "bad device"},
      {"REPORT job=j task=0 novalue", "is not key=value"},
      {"REPORT job=j task=0 inc=0 clique=c state=READY devices=0", "key is required"},
      {"LIST", "LIST needs key="},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    const std::string answer = HandleCliqueRequest(registry, c.line, kNow);
    EXPECT_THAT(answer, StartsWith("ERR "));
    EXPECT_THAT(answer, HasSubstr(c.error));
  }
  EXPECT_TRUE(registry.List().empty());
}

TEST(CliqueSocketTest, ServesTheProtocolOverAUnixSocketAndSurvivesGarbage) {
  const std::string path =
      (std::filesystem::temp_directory_path() / absl::StrCat("phx-cliques-", getpid(), ".sock"))
          .string();
  CliqueRegistry registry;
  auto server = CliqueSocketServer::Start({path}, registry, base::RealClock::Get());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(Ask(path, "REPORT job=j task=0 inc=2 clique=c state=READY devices=0 key=k"), "OK\n");
  EXPECT_THAT(Ask(path, std::string(5000, 'x')), StartsWith("ERR line longer"));
  EXPECT_THAT(Ask(path, "NONSENSE"), StartsWith("ERR unknown request"));
  EXPECT_EQ(Ask(path, "LIST key=k"), "job=j task=0 inc=2 clique=c state=READY devices=0\nEND\n");
  (*server)->Stop();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(CliqueSocketTest, APathTooLongForAUnixSocketIsAClearError) {
  CliqueRegistry registry;
  auto server =
      CliqueSocketServer::Start({std::string(200, 'a')}, registry, base::RealClock::Get());
  EXPECT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("clique socket path"));
}

}  // namespace
}  // namespace phalanx::agent
