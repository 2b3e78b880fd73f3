// HttpGet: a minimal blocking HTTP/1.0 GET against 127.0.0.1 for tests of /metrics and
// /healthz endpoints. Bounded by a receive timeout.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <string>

namespace phalanx::testing {

struct HttpResponse {
  int code = 0;
  std::string body;
};

inline std::optional<HttpResponse> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return std::nullopt;
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return std::nullopt;
  }
  std::string raw;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) raw.append(buffer, n);
  close(fd);
  HttpResponse response;
  if (raw.size() < 12 || raw.rfind("HTTP/", 0) != 0) return std::nullopt;
  response.code = std::stoi(raw.substr(9, 3));
  const size_t body = raw.find("\r\n\r\n");
  if (body != std::string::npos) response.body = raw.substr(body + 4);
  return response;
}

}  // namespace phalanx::testing
