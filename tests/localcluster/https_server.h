// HttpsServer: a small HTTP/1.1-over-TLS server for the local cluster (OpenSSL, one thread per
// connection, keep-alive, chunked streaming responses for watches). It exists because the API
// server must stream watch events and the project's other HTTP server (civetweb, Debian build)
// crashes when TLS is enabled against OpenSSL 3. It does not negotiate HTTP/2 (clients such as
// kubectl then speak HTTP/1.1), and it bounds everything a client controls: header and body
// sizes, idle time between requests, the number of connections. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace phalanx::localcluster {

struct HttpRequest {
  std::string method;
  std::string target;                          // the request-target as sent (a proxy forwards it)
  std::string path;                            // percent-decoded, without the query
  std::map<std::string, std::string> params;   // query parameters, decoded (last one wins)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  std::string Header(const std::string& lower_name) const;
  std::string Param(const std::string& name) const;
};

// How a handler answers. Either Respond once, or StartStream + WriteChunk* + (EndStream).
class HttpResponse {
 public:
  virtual ~HttpResponse() = default;
  virtual void Respond(int status, absl::string_view content_type, absl::string_view body,
                       const std::map<std::string, std::string>& headers = {}) = 0;
  // Chunked transfer encoding. False when the client is gone or the server is stopping:
  // streaming handlers must then return.
  // `headers` go out with the status line (a proxy relays the upstream's Warning headers).
  virtual bool StartStream(int status, absl::string_view content_type,
                           const std::map<std::string, std::string>& headers = {}) = 0;
  virtual bool WriteChunk(absl::string_view data) = 0;
  virtual void EndStream() = 0;
  // True once the server is stopping (streaming handlers poll it between waits).
  virtual bool Stopping() const = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

class HttpsServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: pick a free one
    std::string cert_pem;
    std::string key_pem;
    int max_connections = 512;
    absl::Duration idle_timeout = absl::Seconds(120);  // between requests on one connection
    size_t max_body_bytes = 16 << 20;
  };

  HttpsServer() = default;
  ~HttpsServer();
  HttpsServer(const HttpsServer&) = delete;
  HttpsServer& operator=(const HttpsServer&) = delete;

  // Listens and starts accepting. Returns the bound port.
  absl::StatusOr<int> Start(Options options, HttpHandler handler);
  // Stops accepting, wakes every connection (streams see Stopping()), joins all threads.
  void Stop();

 private:
  class Connection;
  void AcceptLoop();
  void Serve(int fd);

  Options options_;
  HttpHandler handler_;
  void* ssl_ctx_ = nullptr;  // SSL_CTX*, kept opaque so users need no OpenSSL headers
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  absl::Mutex mu_;
  std::set<int> open_fds_ ABSL_GUARDED_BY(mu_);
  // Connection threads are detached and counted; Stop waits for the count to reach zero.
  int active_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace phalanx::localcluster
