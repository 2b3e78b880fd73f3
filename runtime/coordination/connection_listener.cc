#include "runtime/coordination/connection_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/tcp_dial.h"
#include "runtime/coordination/wire_format.h"

namespace phalanx::coord {
namespace {

// The peer address as gRPC's ServerContext::peer() spells it for a connection it did not
// accept itself (grpc_sockaddr_to_uri: IPv4-mapped IPv6 addresses read as IPv4).
std::string PeerUri(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    return absl::StrCat("ipv4:", text, ":", ntohs(v4.sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(addr);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
      inet_ntop(AF_INET, &v6.sin6_addr.s6_addr[12], text, sizeof(text));
      return absl::StrCat("ipv4:", text, ":", ntohs(v6.sin6_port));
    }
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    return absl::StrCat("ipv6:[", text, "]:", ntohs(v6.sin6_port));
  }
  return "unknown";
}

bool OutOfDescriptors(int error) {
  return error == EMFILE || error == ENFILE || error == ENOBUFS || error == ENOMEM;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionListener>> ConnectionListener::Listen(
    Options options, base::Clock& clock, CoordinatorMetrics& metrics) {
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError("max_connections must be at least 1");
  }
  std::unique_ptr<ConnectionListener> listener(
      new ConnectionListener(std::move(options), clock, metrics));
  auto fd = base::ListenTcp(listener->options_.listen_address, &listener->port_);
  if (!fd.ok()) return fd.status();
  listener->listen_fd_ = *fd;
  listener->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  listener->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  listener->spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (listener->epoll_fd_ < 0 || listener->wake_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("epoll/eventfd: ", std::strerror(errno)));
  }
  for (int watched : {listener->listen_fd_, listener->wake_fd_}) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = watched;
    epoll_ctl(listener->epoll_fd_, EPOLL_CTL_ADD, watched, &event);
  }
  return listener;
}

ConnectionListener::~ConnectionListener() {
  Stop();
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_, spare_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void ConnectionListener::Start(Handoff handoff, WireHandoff wire_handoff) {
  handoff_ = std::move(handoff);
  wire_handoff_ = std::move(wire_handoff);
  thread_ = std::thread([this] { Loop(); });
}

void ConnectionListener::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stopping_ = true;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  for (auto& [peer, connection] : connections_) {
    close(connection.watch_fd);
    if (connection.unclassified_fd >= 0) close(connection.unclassified_fd);
  }
  connections_.clear();
  by_watch_fd_.clear();
  metrics_.SetOpenConnections(0);
}

void ConnectionListener::Loop() {
  std::vector<epoll_event> events(64);
  while (!stopping_) {
    // Bounded so a missed wake-up costs at most a second; shorter while accepting is paused.
    int timeout_ms = 1000;
    if (!accepting_) {
      const absl::Duration left = resume_accepting_ - clock_.Now();
      timeout_ms = std::clamp<int>(absl::ToInt64Milliseconds(left) + 1, 0, 1000);
    }
    const int n = epoll_wait(epoll_fd_, events.data(), events.size(), timeout_ms);
    // Hang-ups first, accepts last: a watch descriptor closed here may get its number back
    // from a new connection's dup, and a stale event in this batch must not end that one.
    bool can_accept = false;
    for (int i = 0; i < n && !stopping_; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) continue;
      if (fd == listen_fd_) {
        can_accept = true;
      } else if (Classify(fd)) {
        // Handed over, or ended before it sent a byte.
      } else if (events[i].events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
        Ended(fd);
      }
    }
    if (can_accept && !stopping_) AcceptPending();
    if (!accepting_ && clock_.Now() >= resume_accepting_) {
      accepting_ = true;
      epoll_event event{};
      event.events = EPOLLIN;
      event.data.fd = listen_fd_;
      epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &event);
    }
  }
}

void ConnectionListener::AcceptPending() {
  while (!stopping_ && accepting_) {
    sockaddr_storage peer{};
    socklen_t peer_length = sizeof(peer);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_length,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Admit(fd, PeerUri(peer));
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
    if (OutOfDescriptors(errno)) {
      PHX_LOG(WARNING) << "accept: " << std::strerror(errno) << "; shedding one connection and"
                       << " pausing accepts for " << absl::FormatDuration(options_.accept_backoff);
      ShedOneWithSpare();
      PauseAccepting();
    }
    return;  // EAGAIN, or an error the next readiness will retry
  }
}

void ConnectionListener::Admit(int fd, const std::string& peer) {
  {
    absl::MutexLock lock(&mu_);
    // A record under this address belongs to an earlier connection from the same client port
    // that has ended, whose HUP the loop has not handled yet.
    ForgetLocked(peer);
    MakeRoomForUnauthenticatedLocked();
    // Connections shut down (for the share, or unauthenticated too long) are on their way out:
    // they do not hold a slot against a newcomer, or a flood would still lock clients out
    // until the hang-ups are handled.
    const int live =
        static_cast<int>(std::count_if(connections_.begin(), connections_.end(),
                                       [](const auto& entry) { return !entry.second.shut_down; }));
    if (live >= options_.max_connections) {
      close(fd);
      metrics_.ConnectionClosed(ConnectionCloseReason::kLimit);
      return;
    }
  }
  const int watch_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (watch_fd < 0) {
    close(fd);
    metrics_.ConnectionClosed(ConnectionCloseReason::kOutOfDescriptors);
    PauseAccepting();
    return;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const bool classify = wire_handoff_ != nullptr;
  {
    absl::MutexLock lock(&mu_);
    connections_[peer] = Connection{watch_fd, classify ? fd : -1, clock_.Now(), false, false};
    by_watch_fd_[watch_fd] = peer;
    metrics_.SetOpenConnections(connections_.size());
  }
  epoll_event event{};
  // EPOLLHUP and EPOLLERR are always reported; EPOLLIN only until the first byte is seen.
  event.events = EPOLLRDHUP;
  if (classify) event.events |= EPOLLIN;
  event.data.fd = watch_fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, watch_fd, &event);
  if (!classify) {
    handoff_(listen_fd_, fd);
  } else {
    Classify(watch_fd);  // a client that wrote right after connecting needs no second wake-up
  }
}

bool ConnectionListener::Classify(int watch_fd) {
  int fd = -1;
  std::string peer;
  {
    absl::MutexLock lock(&mu_);
    auto by_fd = by_watch_fd_.find(watch_fd);
    if (by_fd == by_watch_fd_.end()) return false;
    auto it = connections_.find(by_fd->second);
    if (it == connections_.end() || it->second.unclassified_fd < 0) return false;
    fd = it->second.unclassified_fd;
    peer = by_fd->second;
  }
  unsigned char first = 0;
  const ssize_t n = recv(fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  if (n <= 0) {
    Ended(watch_fd);  // closed (or broken) before its first byte
    return true;
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = connections_.find(peer);
    if (it == connections_.end()) return true;
    it->second.unclassified_fd = -1;  // from here on the handler owns it
  }
  epoll_event event{};
  event.events = EPOLLRDHUP;
  event.data.fd = watch_fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, watch_fd, &event);
  if (first == kWireFirstByte) {
    wire_handoff_(fd, std::move(peer));
  } else {
    handoff_(listen_fd_, fd);
  }
  return true;
}

void ConnectionListener::Ended(int watch_fd) {
  absl::MutexLock lock(&mu_);
  auto it = by_watch_fd_.find(watch_fd);
  if (it == by_watch_fd_.end()) return;
  const std::string peer = it->second;
  ForgetLocked(peer);
}

void ConnectionListener::ForgetLocked(const std::string& peer) {
  auto it = connections_.find(peer);
  if (it == connections_.end()) return;
  const int watch_fd = it->second.watch_fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, watch_fd, nullptr);
  close(watch_fd);
  if (it->second.unclassified_fd >= 0) close(it->second.unclassified_fd);
  by_watch_fd_.erase(watch_fd);
  connections_.erase(it);
  metrics_.SetOpenConnections(connections_.size());
}

void ConnectionListener::ShedOneWithSpare() {
  if (spare_fd_ < 0) return;
  close(spare_fd_);
  spare_fd_ = -1;
  const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    close(fd);
    metrics_.ConnectionClosed(ConnectionCloseReason::kOutOfDescriptors);
  }
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void ConnectionListener::PauseAccepting() {
  accepting_ = false;
  resume_accepting_ = clock_.Now() + options_.accept_backoff;
  epoll_event event{};
  event.events = 0;
  event.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &event);
}

int ConnectionListener::unauthenticated_share() const {
  if (options_.max_unauthenticated_connections > 0) return options_.max_unauthenticated_connections;
  return std::max(1, options_.max_connections / 4);
}

void ConnectionListener::MakeRoomForUnauthenticatedLocked() {
  if (options_.max_unauthenticated_connections < 0) return;  // no share
  int unauthenticated = 0;
  Connection* oldest = nullptr;
  for (auto& [peer, connection] : connections_) {
    if (connection.authenticated || connection.shut_down) continue;
    ++unauthenticated;
    if (oldest == nullptr || connection.accepted < oldest->accepted) oldest = &connection;
  }
  if (unauthenticated < unauthenticated_share() || oldest == nullptr) return;
  // As Tick does: the dup's HUP then tells the accept thread to forget it. It still holds its
  // slot until then, which the limit below counts.
  shutdown(oldest->watch_fd, SHUT_RDWR);
  oldest->shut_down = true;
  metrics_.ConnectionClosed(ConnectionCloseReason::kUnauthenticatedShare);
}

void ConnectionListener::MarkAuthenticated(std::string_view peer) {
  absl::MutexLock lock(&mu_);
  auto it = connections_.find(std::string(peer));
  if (it != connections_.end()) it->second.authenticated = true;
}

void ConnectionListener::Tick(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto& [peer, connection] : connections_) {
    if (connection.authenticated || connection.shut_down) continue;
    if (now - connection.accepted < options_.unauthenticated_timeout) continue;
    // gRPC sees the end of its stream and closes its descriptor; the dup's HUP then tells
    // the accept thread to forget the connection.
    shutdown(connection.watch_fd, SHUT_RDWR);
    connection.shut_down = true;
    metrics_.ConnectionClosed(ConnectionCloseReason::kUnauthenticated);
  }
}

int ConnectionListener::open_connections() {
  absl::MutexLock lock(&mu_);
  return connections_.size();
}

}  // namespace phalanx::coord
