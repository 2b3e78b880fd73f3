#include "common/base/stream_endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/tcp_dial.h"

namespace phalanx::base {
namespace {

// A sockaddr for `e`, or InvalidArgument.
struct Address {
  sockaddr_storage storage{};
  socklen_t size = 0;
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
};

absl::StatusOr<Address> ToAddress(const StreamEndpoint& e) {
  Address a;
  if (e.kind == StreamEndpoint::Kind::kUnix) {
    auto* un = reinterpret_cast<sockaddr_un*>(&a.storage);
    if (e.path.empty() || e.path.size() >= sizeof(un->sun_path)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unix socket path must be 1..", sizeof(un->sun_path) - 1, " bytes: '", e.path, "'"));
    }
    un->sun_family = AF_UNIX;
    std::memcpy(un->sun_path, e.path.c_str(), e.path.size());
    a.size = sizeof(sockaddr_un);
    return a;
  }
  auto* in4 = reinterpret_cast<sockaddr_in*>(&a.storage);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  if (inet_pton(AF_INET, e.host.c_str(), &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons(static_cast<uint16_t>(e.port));
    a.size = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, e.host.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(e.port));
    a.size = sizeof(sockaddr_in6);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", e.host, "' is not a numeric IPv4 or IPv6 address"));
  }
  return a;
}

std::string Errno() { return std::strerror(errno); }

}  // namespace

std::string StreamEndpoint::ToString() const {
  if (kind == Kind::kUnix) return path;
  if (absl::StrContains(host, ':')) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<StreamEndpoint> ParseStreamEndpoint(const std::string& text) {
  StreamEndpoint e;
  if (text.empty()) return absl::InvalidArgumentError("empty endpoint");
  if (absl::StartsWith(text, "unix:") || absl::StartsWith(text, "/") ||
      absl::StartsWith(text, ".")) {
    e.kind = StreamEndpoint::Kind::kUnix;
    e.path = absl::StartsWith(text, "unix:") ? text.substr(5) : text;
  } else {
    e.kind = StreamEndpoint::Kind::kTcp;
    auto host_port = SplitHostPort(text, "endpoint");
    if (!host_port.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("endpoint '", text, "' is neither a socket path nor host:port"));
    }
    e.host = host_port->first;
    if (!absl::SimpleAtoi(host_port->second, &e.port) || e.port < 0 || e.port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("endpoint '", text, "': bad port"));
    }
  }
  if (absl::StatusOr<Address> a = ToAddress(e); !a.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint '", text, "': ", a.status().message()));
  }
  return e;
}

absl::StatusOr<int> ConnectStream(const StreamEndpoint& endpoint, absl::Duration io_timeout) {
  absl::StatusOr<Address> address = ToAddress(endpoint);
  if (!address.ok()) return address.status();
  const int fd = socket(address->storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", Errno()));
  auto fail = [&](const std::string& why) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot reach ", endpoint.ToString(), ": ", why));
  };
  // Non-blocking connect, bounded by io_timeout (a TCP peer that drops SYNs would otherwise
  // hold us for minutes), then blocking I/O with SO_RCVTIMEO/SO_SNDTIMEO.
  if (connect(fd, address->get(), address->size) != 0) {
    if (errno != EINPROGRESS && errno != EAGAIN) return fail(Errno());
    pollfd p{fd, POLLOUT, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(io_timeout));
    const int ready = poll(&p, 1, ms);
    if (ready == 0) return fail("connect timed out");
    if (ready < 0) return fail(Errno());
    int error = 0;
    socklen_t size = sizeof(error);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
    if (error != 0) return fail(std::strerror(error));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv = absl::ToTimeval(io_timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

absl::StatusOr<int> ListenStream(const StreamEndpoint& endpoint) {
  absl::StatusOr<Address> address = ToAddress(endpoint);
  if (!address.ok()) return address.status();
  const int fd = socket(address->storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", Errno()));
  if (endpoint.kind == StreamEndpoint::Kind::kUnix) {
    unlink(endpoint.path.c_str());  // a stale socket from a previous process
  } else {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  }
  if (bind(fd, address->get(), address->size) != 0 || listen(fd, SOMAXCONN) != 0) {
    const std::string why = Errno();
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on ", endpoint.ToString(), ": ", why));
  }
  if (endpoint.kind == StreamEndpoint::Kind::kUnix) chmod(endpoint.path.c_str(), 0660);
  return fd;
}

int LocalPort(int fd) {
  sockaddr_storage storage{};
  socklen_t size = sizeof(storage);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &size) != 0) return 0;
  if (storage.ss_family == AF_INET)
    return ntohs(reinterpret_cast<sockaddr_in*>(&storage)->sin_port);
  if (storage.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port);
  }
  return 0;
}

}  // namespace phalanx::base
