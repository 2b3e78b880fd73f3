#include "bench/barrier_reference.h"

#include <arpa/inet.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/loopback_socket.h"
#include "bench/write_line.h"

namespace phalanx::bench {
namespace {

constexpr int kWaitSeconds = 120;  // a round that takes longer is an error, not a measurement

// Waits while *word == seen, at most kWaitSeconds; false on timeout.
bool FutexWaitWhile(std::atomic<int>& word, int seen) {
  const absl::Time deadline = absl::Now() + absl::Seconds(kWaitSeconds);
  while (word.load(std::memory_order_acquire) == seen) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    const timespec ts = absl::ToTimespec(left);
    syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
  }
  return true;
}

void FutexWakeOne(std::atomic<int>& word) {
  syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReferenceBarrierServer>> ReferenceBarrierServer::Start(
    int num_tasks) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::InternalError(absl::StrCat("reference server: ", why));
  }
  const int stop = eventfd(0, EFD_CLOEXEC);
  if (stop < 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  std::unique_ptr<ReferenceBarrierServer> server(
      new ReferenceBarrierServer(num_tasks, fd, stop, ntohs(addr.sin_port)));
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

ReferenceBarrierServer::ReferenceBarrierServer(int num_tasks, int listen_fd, int stop_fd, int port)
    : num_tasks_(num_tasks), listen_fd_(listen_fd), stop_fd_(stop_fd), port_(port) {}

ReferenceBarrierServer::~ReferenceBarrierServer() {
  const uint64_t one = 1;
  ssize_t unused = write(stop_fd_, &one, sizeof(one));
  (void)unused;
  if (thread_.joinable()) thread_.join();
  close(stop_fd_);
  close(listen_fd_);
}

std::string ReferenceBarrierServer::address() const { return absl::StrCat("127.0.0.1:", port_); }

void ReferenceBarrierServer::Serve() {
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = stop_fd_;
  epoll_ctl(ep, EPOLL_CTL_ADD, stop_fd_, &ev);
  std::map<int, int> arrived;  // connection -> arrivals this round
  int total = 0;
  std::vector<char> buffer(64 << 10);
  std::vector<char> release;
  bool stopping = false;
  while (!stopping) {
    epoll_event events[64];
    const int n = epoll_wait(ep, events, 64, -1);  // the destructor's eventfd ends it
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd_) {
        stopping = true;
      } else if (fd == listen_fd_) {
        const int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) continue;
        NoDelay(conn);
        arrived[conn] = 0;
        ev.data.fd = conn;
        epoll_ctl(ep, EPOLL_CTL_ADD, conn, &ev);
      } else {
        const ssize_t got = recv(fd, buffer.data(), buffer.size(), 0);
        if (got <= 0) {
          epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
          total -= arrived[fd];
          arrived.erase(fd);
          close(fd);
          continue;
        }
        arrived[fd] += got;
        total += got;
      }
    }
    if (total < num_tasks_) continue;
    // The round is complete: each connection gets one byte per task of it, in one send.
    for (auto& [conn, count] : arrived) {
      release.assign(count, 'r');
      SendAll(conn, release.data(), release.size());
      count = 0;
    }
    total = 0;
  }
  for (auto& [conn, count] : arrived) close(conn);
  close(ep);
}

int RunReferenceHost(const ReferenceHostOptions& options) {
  absl::StatusOr<int> dialled = DialTcp(options.address);
  if (!dialled.ok()) {
    WriteLine(absl::StrCat("ERROR task=", options.first, " ", dialled.status().ToString()));
    return 1;
  }
  const int fd = *dialled;

  // One futex word per task: the number of rounds released to it.
  std::deque<std::atomic<int>> released(options.count);
  std::thread reader([&] {
    std::vector<char> buffer(64 << 10);
    int64_t got = 0;
    while (true) {
      const ssize_t n = recv(fd, buffer.data(), buffer.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the host shuts the socket down when its tasks are done
      got += n;
      for (; got >= options.count; got -= options.count) {
        for (std::atomic<int>& word : released) {
          word.fetch_add(1, std::memory_order_release);
          FutexWakeOne(word);
        }
      }
    }
  });

  std::vector<std::thread> tasks;
  std::atomic<bool> failed{false};
  for (int k = 0; k < options.count; ++k) {
    tasks.emplace_back([&, k] {
      const int task = options.first + k;
      std::string passes;
      for (int b = -1; b < options.barriers; ++b) {
        const int seen = released[k].load(std::memory_order_acquire);
        if (!SendAll(fd, "a", 1) || !FutexWaitWhile(released[k], seen)) {
          WriteLine(absl::StrCat(passes, "ERROR task=", task, " barrier ", b, " did not complete"));
          failed = true;
          return;
        }
        absl::StrAppend(&passes, "PASS task=", task, " barrier=", b,
                        " t_us=", absl::ToUnixMicros(absl::Now()), "\n");
      }
      passes.pop_back();  // WriteLine adds the last newline
      WriteLine(passes);
    });
  }
  for (std::thread& t : tasks) t.join();
  shutdown(fd, SHUT_RDWR);
  reader.join();
  close(fd);
  return failed ? 1 : 0;
}

}  // namespace phalanx::bench
