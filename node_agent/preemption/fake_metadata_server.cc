#include "node_agent/preemption/fake_metadata_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace phalanx::agent::testing {
namespace {

std::string Key(const std::string& method, const std::string& path) {
  return absl::StrCat(method, " ", path);
}

// Waits for `fd` to be readable, up to `timeout`; false when the server is stopping or on
// timeout.
bool WaitReadable(int fd, int wake_fd, absl::Duration timeout) {
  pollfd p[2] = {{fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  while (true) {
    const int n = poll(p, 2, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
    if (n < 0 && errno == EINTR) continue;
    return n > 0 && (p[1].revents & POLLIN) == 0 && p[0].revents != 0;
  }
}

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the client went away (e.g. it timed out): nothing to do
    data.remove_prefix(static_cast<size_t>(n));
  }
}

std::string Serialize(const ScriptedResponse& r) {
  std::string out = absl::StrCat("HTTP/1.1 ", r.status, " Scripted\r\nConnection: close\r\n");
  for (const auto& [name, value] : r.headers) absl::StrAppend(&out, name, ": ", value, "\r\n");
  if (!r.chunked) {
    absl::StrAppend(&out, "Content-Length: ", r.body.size(), "\r\n\r\n", r.body);
    return out;
  }
  absl::StrAppend(&out, "Transfer-Encoding: chunked\r\n\r\n");
  // Two chunks (when there is more than one byte), to exercise reassembly.
  const size_t half = r.body.size() / 2;
  for (absl::string_view chunk :
       {absl::string_view(r.body).substr(0, half), absl::string_view(r.body).substr(half)}) {
    if (chunk.empty()) continue;
    absl::StrAppend(&out, absl::Hex(chunk.size()), "\r\n", chunk, "\r\n");
  }
  absl::StrAppend(&out, "0\r\n\r\n");
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FakeMetadataServer>> FakeMetadataServer::Start() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t length = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    const std::string error = strerror(errno);
    close(fd);
    return absl::InternalError(absl::StrCat("cannot listen on 127.0.0.1: ", error));
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("pipe: ", strerror(errno)));
  }
  std::unique_ptr<FakeMetadataServer> server(
      new FakeMetadataServer(fd, ntohs(addr.sin_port), wake[0], wake[1]));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

FakeMetadataServer::~FakeMetadataServer() {
  const char byte = 1;
  (void)!write(wake_write_, &byte, 1);
  accept_thread_.join();
  std::vector<std::thread> connections;
  {
    absl::MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  for (std::thread& t : connections) t.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

std::string FakeMetadataServer::base_url() const {
  return absl::StrCat("http://127.0.0.1:", port_);
}

void FakeMetadataServer::Set(const std::string& method, const std::string& path,
                             ScriptedResponse response) {
  absl::MutexLock lock(&mu_);
  script_[Key(method, path)] = std::move(response);
}

std::vector<ReceivedRequest> FakeMetadataServer::requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

int FakeMetadataServer::CountOf(const std::string& method, const std::string& path) const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const ReceivedRequest& r : requests_) n += r.method == method && r.path == path;
  return n;
}

int FakeMetadataServer::UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

ScriptedResponse FakeMetadataServer::ResponseFor(const std::string& method,
                                                 const std::string& path) const {
  absl::MutexLock lock(&mu_);
  auto it = script_.find(Key(method, path));
  if (it == script_.end()) return ScriptedResponse::Status(404, "not found");
  return it->second;
}

void FakeMetadataServer::AcceptLoop() {
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    const int n = poll(p, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (p[1].revents & POLLIN) != 0) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    absl::MutexLock lock(&mu_);
    connections_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeMetadataServer::Serve(int fd) {
  // Read the request head and any Content-Length body.
  std::string raw;
  size_t head_end = std::string::npos;
  size_t body_length = 0;
  char buffer[4096];
  while (head_end == std::string::npos || raw.size() < head_end + 4 + body_length) {
    if (!WaitReadable(fd, wake_read_, absl::Seconds(10))) break;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    raw.append(buffer, static_cast<size_t>(n));
    if (head_end == std::string::npos && (head_end = raw.find("\r\n\r\n")) != std::string::npos) {
      for (absl::string_view line : absl::StrSplit(raw.substr(0, head_end), "\r\n")) {
        const size_t colon = line.find(':');
        if (colon != absl::string_view::npos &&
            absl::AsciiStrToLower(line.substr(0, colon)) == "content-length") {
          (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(colon + 1)), &body_length);
        }
      }
    }
  }
  if (head_end == std::string::npos) {
    close(fd);
    return;
  }
  ReceivedRequest request;
  std::vector<std::string> lines = absl::StrSplit(raw.substr(0, head_end), "\r\n");
  std::vector<std::string> words = absl::StrSplit(lines[0], ' ');
  if (words.size() >= 2) {
    request.method = words[0];
    request.path = words[1].substr(0, words[1].find('?'));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    request.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  request.body = raw.substr(head_end + 4);
  const ScriptedResponse response = ResponseFor(request.method, request.path);
  {
    absl::MutexLock lock(&mu_);
    requests_.push_back(request);
  }
  if (response.delay > absl::ZeroDuration()) {
    // Sleeps on the wake pipe, so shutting the server down cuts the delay short.
    pollfd p{wake_read_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(response.delay))) != 0) {
      close(fd);
      return;
    }
  }
  switch (response.kind) {
    case ScriptedResponse::Kind::kHttp:
      if (response.drip_interval > absl::ZeroDuration()) {
        for (char c : Serialize(response)) {
          if (send(fd, &c, 1, MSG_NOSIGNAL) != 1) break;
          pollfd p{wake_read_, POLLIN, 0};  // the pause ends early at shutdown
          if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(response.drip_interval))) !=
              0) {
            break;
          }
        }
        break;
      }
      WriteAll(fd, Serialize(response));
      break;
    case ScriptedResponse::Kind::kGarbage:
      WriteAll(fd, response.body);
      break;
    case ScriptedResponse::Kind::kCloseWithoutAnswer:
      break;
    case ScriptedResponse::Kind::kTruncatedBody:
      WriteAll(fd, absl::StrCat("HTTP/1.1 ", response.status,
                                " Scripted\r\nConnection: close\r\nContent-Length: ",
                                response.body.size() + 100, "\r\n\r\n", response.body));
      break;
  }
  close(fd);
}

}  // namespace phalanx::agent::testing
