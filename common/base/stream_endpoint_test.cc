// ParseStreamEndpoint's forms and errors; ListenStream + ConnectStream over a real Unix socket
// and real TCP on 127.0.0.1; a refused connection is Unavailable naming the endpoint.
#include "common/base/stream_endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace phalanx::base {
namespace {

using ::testing::HasSubstr;

TEST(StreamEndpoint, ParsesUnixPathsAndTcpAddresses) {
  absl::StatusOr<StreamEndpoint> e = ParseStreamEndpoint("/run/phalanx/cliques.sock");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->kind, StreamEndpoint::Kind::kUnix);
  EXPECT_EQ(e->path, "/run/phalanx/cliques.sock");
  e = ParseStreamEndpoint("unix:/tmp/a.sock");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->path, "/tmp/a.sock");
  e = ParseStreamEndpoint("10.0.0.7:8479");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->kind, StreamEndpoint::Kind::kTcp);
  EXPECT_EQ(e->host, "10.0.0.7");
  EXPECT_EQ(e->port, 8479);
  EXPECT_EQ(e->ToString(), "10.0.0.7:8479");
  e = ParseStreamEndpoint("[::1]:80");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->ToString(), "[::1]:80");
}

TEST(StreamEndpoint, RefusesWhatItCannotUse) {
  const std::vector<std::string> bad_endpoints = {"",
                                                  "8479",
                                                  "node-1:8479",
                                                  "10.0.0.7:",
                                                  "10.0.0.7:70000",
                                                  "10.0.0.7:x",
                                                  "unix:" + std::string(200, 'a')};
  for (const std::string& bad : bad_endpoints) {
    absl::StatusOr<StreamEndpoint> e = ParseStreamEndpoint(bad);
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

void ExpectEcho(const StreamEndpoint& listen_on, StreamEndpoint dial) {
  absl::StatusOr<int> listener = ListenStream(listen_on);
  ASSERT_TRUE(listener.ok()) << listener.status();
  if (dial.kind == StreamEndpoint::Kind::kTcp) dial.port = LocalPort(*listener);
  absl::StatusOr<int> client = ConnectStream(dial, absl::Seconds(5));
  ASSERT_TRUE(client.ok()) << client.status();
  int server = -1;
  for (int i = 0; i < 100 && server < 0; ++i) {  // the listener is non-blocking
    server = accept(*listener, nullptr, nullptr);
    if (server < 0) usleep(10'000);
  }
  ASSERT_GE(server, 0);
  ASSERT_EQ(write(*client, "ping", 4), 4);
  char buf[4];
  ASSERT_EQ(read(server, buf, 4), 4);
  EXPECT_EQ(std::string(buf, 4), "ping");
  close(server);
  close(*client);
  close(*listener);
}

TEST(StreamEndpoint, ConnectsOverAUnixSocket) {
  const std::string path = ::testing::TempDir() + "/stream_endpoint_test.sock";
  absl::StatusOr<StreamEndpoint> e = ParseStreamEndpoint(path);
  ASSERT_TRUE(e.ok());
  ExpectEcho(*e, *e);
  unlink(path.c_str());
}

TEST(StreamEndpoint, ConnectsOverTcpOnLoopback) {
  absl::StatusOr<StreamEndpoint> e = ParseStreamEndpoint("127.0.0.1:0");
  ASSERT_TRUE(e.ok());
  ExpectEcho(*e, *e);
}

TEST(StreamEndpoint, ARefusedConnectionIsUnavailableAndNamesTheEndpoint) {
  absl::StatusOr<StreamEndpoint> e = ParseStreamEndpoint("127.0.0.1:0");
  ASSERT_TRUE(e.ok());
  absl::StatusOr<int> listener = ListenStream(*e);
  ASSERT_TRUE(listener.ok());
  e->port = LocalPort(*listener);
  close(*listener);  // nothing listens there now
  absl::StatusOr<int> client = ConnectStream(*e, absl::Seconds(5));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(client.status().message()), HasSubstr(e->ToString()));
}

}  // namespace
}  // namespace phalanx::base
