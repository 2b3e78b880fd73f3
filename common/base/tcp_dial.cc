#include "common/base/tcp_dial.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace phalanx::base {
namespace {

// Milliseconds left until `deadline` for poll(), at least 0.
int PollMillis(absl::Time deadline) {
  return static_cast<int>(
      std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()) + 1));
}

}  // namespace

absl::StatusOr<std::pair<std::string, std::string>> SplitHostPort(const std::string& address,
                                                                  std::string_view what) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat(absl::string_view(what.data(), what.size()),
                                                   " '", address, "' must be host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, address.substr(colon + 1));
}

absl::StatusOr<int> ListenTcp(const std::string& address, int* port) {
  auto host_port = SplitHostPort(address, "listen address");
  if (!host_port.ok()) return host_port.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const char* host = host_port->first.empty() ? nullptr : host_port->first.c_str();
  if (int rc = getaddrinfo(host, host_port->second.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", address, "': ", gai_strerror(rc)));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) break;
    error = std::strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

absl::StatusOr<int> DialTcp(const std::string& address, absl::Time deadline,
                            std::string_view what) {
  const absl::string_view name(what.data(), what.size());
  auto host_port = SplitHostPort(address, absl::StrCat(name, " address"));
  if (!host_port.ok()) return host_port.status();
  const auto& [host, port] = *host_port;
  if (host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " address '", address, "' has no host"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  // An IP address (what the operator injects) needs no resolver.
  in6_addr numeric;
  if (inet_pton(AF_INET, host.c_str(), &numeric) == 1 ||
      inet_pton(AF_INET6, host.c_str(), &numeric) == 1) {
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  }
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", name, " '", host, "': ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    const int s = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    int rc = connect(s, a->ai_addr, a->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      pollfd p{s, POLLOUT, 0};
      rc = poll(&p, 1, PollMillis(deadline)) == 1 ? 0 : -1;
      int error = rc == 0 ? 0 : ETIMEDOUT;
      socklen_t length = sizeof(error);
      if (rc == 0) getsockopt(s, SOL_SOCKET, SO_ERROR, &error, &length);
      if (error != 0) {
        rc = -1;
        errno = error;
      }
    }
    if (rc < 0) {
      last_error = std::strerror(errno);
      close(s);
      continue;
    }
    fd = s;
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the ", name, " at ", address, ": ", last_error));
  }
  return fd;
}

}  // namespace phalanx::base
