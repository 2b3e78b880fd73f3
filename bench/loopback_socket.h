// Blocking TCP helpers the benchmark's hosts share: dial host:port, disable Nagle, send all.
// Header-only; errors are returned, never thrown.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace phalanx::bench {

inline void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Sends every byte (blocking socket); false when the connection broke.
inline bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= n;
  }
  return true;
}

// A connected, blocking, no-delay socket to `address` (an IPv4 host:port).
inline absl::StatusOr<int> DialTcp(const std::string& address) {
  std::vector<std::string> host_port = absl::StrSplit(address, ':');
  int port = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (host_port.size() != 2 || !absl::SimpleAtoi(host_port[1], &port) ||
      inet_pton(AF_INET, host_port[0].c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("not an IPv4 host:port: ", address));
  }
  addr.sin_port = htons(port);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect ", address, ": ", std::strerror(err)));
  }
  NoDelay(fd);
  return fd;
}

}  // namespace phalanx::bench
