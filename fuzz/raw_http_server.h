// RawHttpServer: for the metadata-source fuzz targets, a loopback server that answers the n-th
// connection with the n-th byte string it was given, verbatim (status line and all, or garbage),
// then closes. The sources' whole path is fuzzed that way: HttpFetch's response parser (status
// line, headers, Content-Length, chunked bodies) and the source's reading of the body. Test-only:
// one accept thread; a reply is written only after the request has been read, so the client
// never sees a reset instead of the answer.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace phalanx::fuzz {

class RawHttpServer {
 public:
  RawHttpServer() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listen_fd_, 64) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      perror("RawHttpServer");
      abort();
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Loop(); });
  }
  ~RawHttpServer() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
  }

  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // The answers for the next connections, in order; a connection beyond them gets none (closed).
  void Script(std::vector<std::string> replies) {
    absl::MutexLock lock(&mu_);
    replies_.assign(replies.begin(), replies.end());
  }

 private:
  void Loop() {
    while (true) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        continue;
      }
      std::string reply;
      {
        absl::MutexLock lock(&mu_);
        if (!replies_.empty()) {
          reply = std::move(replies_.front());
          replies_.pop_front();
        }
      }
      ReadRequest(fd);
      size_t off = 0;
      while (off < reply.size()) {
        const ssize_t n = send(fd, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
      shutdown(fd, SHUT_WR);
      // Drain until the client closes, so closing never turns into a reset it could see first.
      char buf[4096];
      pollfd p{fd, POLLIN, 0};
      while (poll(&p, 1, 2000) > 0 && recv(fd, buf, sizeof(buf), 0) > 0) {
      }
      close(fd);
    }
  }

  // Reads up to the end of the request headers (the sources send no body), or 2 s.
  static void ReadRequest(int fd) {
    std::string got;
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    while (got.find("\r\n\r\n") == std::string::npos && poll(&p, 1, 2000) > 0) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return;
      got.append(buf, static_cast<size_t>(n));
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::string> replies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::fuzz
