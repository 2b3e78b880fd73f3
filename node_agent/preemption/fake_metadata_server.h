// FakeMetadataServer: a scripted HTTP/1.1 server on 127.0.0.1 (port 0) standing in for the GCE
// and AWS metadata servers in the notice sources' tests. Each "METHOD path" gets a scripted
// response: a normal answer (optionally chunked, with extra headers, or dripped one byte at a
// time), a delay before it, bytes
// that are not HTTP, a connection closed without an answer, or a body cut short. Unscripted
// paths answer 404. It records every request it receives so tests can check headers.
// Test-only (it waits on real time for scripted delays). Thread-safe: one accept thread and one
// thread per connection; the destructor interrupts delays and joins them all.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace phalanx::agent::testing {

struct ScriptedResponse {
  enum class Kind {
    kHttp,                // status line, headers, body
    kGarbage,             // `body` written raw, then the connection is closed
    kCloseWithoutAnswer,  // the connection is closed after the request is read
    kTruncatedBody,       // Content-Length promises more than `body`, then close
  };
  Kind kind = Kind::kHttp;
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool chunked = false;                         // Transfer-Encoding: chunked
  absl::Duration delay = absl::ZeroDuration();  // before anything is written
  // When positive, a kHttp answer is written one byte at a time with this pause between bytes
  // (a server that trickles its answer).
  absl::Duration drip_interval = absl::ZeroDuration();

  static ScriptedResponse Ok(std::string body) { return Status(200, std::move(body)); }
  static ScriptedResponse Status(int status, std::string body = "") {
    ScriptedResponse r;
    r.status = status;
    r.body = std::move(body);
    return r;
  }
  static ScriptedResponse Garbage(std::string bytes) {
    return Of(Kind::kGarbage, std::move(bytes));
  }
  static ScriptedResponse CloseWithoutAnswer() { return Of(Kind::kCloseWithoutAnswer, ""); }
  static ScriptedResponse TruncatedBody(std::string body) {
    return Of(Kind::kTruncatedBody, std::move(body));
  }
  static ScriptedResponse Of(Kind kind, std::string body) {
    ScriptedResponse r;
    r.kind = kind;
    r.body = std::move(body);
    return r;
  }
  ScriptedResponse&& After(absl::Duration d) && {
    delay = d;
    return std::move(*this);
  }
  ScriptedResponse&& Drip(absl::Duration interval) && {
    drip_interval = interval;
    return std::move(*this);
  }
  ScriptedResponse&& Chunked() && {
    chunked = true;
    return std::move(*this);
  }
};

struct ReceivedRequest {
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

class FakeMetadataServer {
 public:
  // Listens on 127.0.0.1 with a kernel-chosen port. Internal if the socket cannot be set up.
  static absl::StatusOr<std::unique_ptr<FakeMetadataServer>> Start();
  ~FakeMetadataServer();

  int port() const { return port_; }
  std::string base_url() const;  // "http://127.0.0.1:<port>"

  // Scripts the answer to every later `method` request for `path` (the path without a query).
  void Set(const std::string& method, const std::string& path, ScriptedResponse response);
  std::vector<ReceivedRequest> requests() const;
  int CountOf(const std::string& method, const std::string& path) const;

  // A 127.0.0.1 port nothing listens on (bound, then released), for "server down" tests.
  static int UnusedPort();

 private:
  FakeMetadataServer(int listen_fd, int port, int wake_read, int wake_write)
      : listen_fd_(listen_fd), port_(port), wake_read_(wake_read), wake_write_(wake_write) {}
  void AcceptLoop();
  void Serve(int fd);
  ScriptedResponse ResponseFor(const std::string& method, const std::string& path) const;

  const int listen_fd_;
  const int port_;
  // Written once at shutdown and never read, so it stays readable: every poll() that includes it
  // returns at once from then on.
  const int wake_read_;
  const int wake_write_;
  std::thread accept_thread_;

  mutable absl::Mutex mu_;
  std::map<std::string, ScriptedResponse> script_ ABSL_GUARDED_BY(mu_);
  std::vector<ReceivedRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::agent::testing
