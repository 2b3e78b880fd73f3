#include "tests/localcluster/api_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/log.h"

namespace phalanx::localcluster {
namespace {

SSL_CTX* Ctx(void* ctx) { return static_cast<SSL_CTX*>(ctx); }

// Request headers that describe one hop, not the request.
bool HopByHop(const std::string& lower_name) {
  static const char* const kHop[] = {"connection",
                                     "keep-alive",
                                     "transfer-encoding",
                                     "te",
                                     "upgrade",
                                     "host",
                                     "content-length",
                                     "proxy-connection",
                                     "proxy-authorization",
                                     "accept-encoding",
                                     "trailer"};
  for (const char* h : kHop) {
    if (lower_name == h) return true;
  }
  return false;
}

// Response headers worth relaying on a non-streamed answer.
bool Relayed(const std::string& lower_name) {
  return lower_name == "warning" || lower_name == "retry-after" || lower_name == "audit-id" ||
         lower_name == "cache-control" || lower_name == "x-kubernetes-pf-flowschema-uid" ||
         lower_name == "x-kubernetes-pf-prioritylevel-uid";
}

// A watch streams until it is ended; every other answer ends on its own.
bool IsWatch(const HttpRequest& request) {
  const std::string watch = request.Param("watch");
  return watch == "true" || watch == "1" || absl::StrContains(request.path, "/watch/");
}

}  // namespace

// One request over one TLS connection to the API server (Connection: close), with reads that
// wake every 200 ms so a relay can notice a dropped watch or a stopping server.
class ApiProxy::Upstream {
 public:
  Upstream(SSL_CTX* ctx, std::string address, int port)
      : ctx_(ctx), address_(std::move(address)), port_(port) {}
  ~Upstream() {
    if (ssl_ != nullptr) {
      SSL_shutdown(ssl_);
      SSL_free(ssl_);
    }
    if (fd_ >= 0) close(fd_);
  }

  absl::Status Connect() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return absl::UnavailableError("socket() failed");
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    if (inet_pton(AF_INET, address_.c_str(), &addr.sin_addr) != 1 ||
        connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return absl::UnavailableError(
          absl::StrCat("the API server on ", address_, ":", port_, " refused the connection"));
    }
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), address_.c_str());
    if (SSL_connect(ssl_) != 1) {
      return absl::UnavailableError("TLS handshake with the API server failed");
    }
    return absl::OkStatus();
  }

  bool WriteAll(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      const int n = SSL_write(ssl_, data.data() + done, static_cast<int>(data.size() - done));
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads more into buffer_. False on end of stream, error, deadline, or when `keep_going`
  // says stop (checked every 200 ms while nothing arrives).
  bool Fill(const std::function<bool()>& keep_going, absl::Time deadline) {
    char chunk[16384];
    while (true) {
      if (SSL_pending(ssl_) == 0) {
        pollfd p{fd_, POLLIN, 0};
        const int ready = poll(&p, 1, 200);
        if (ready < 0) return false;
        if (ready == 0) {
          if (!keep_going() || absl::Now() >= deadline) return false;
          continue;
        }
      }
      const int n = SSL_read(ssl_, chunk, sizeof(chunk));
      if (n > 0) {
        buffer_.append(chunk, static_cast<size_t>(n));
        return true;
      }
      const int err = SSL_get_error(ssl_, n);
      if (err == SSL_ERROR_WANT_READ) continue;
      return false;
    }
  }

  bool ReadLine(std::string& line, const std::function<bool()>& keep_going, absl::Time deadline) {
    size_t eol;
    while ((eol = buffer_.find("\r\n")) == std::string::npos) {
      if (buffer_.size() > (1 << 20) || !Fill(keep_going, deadline)) return false;
    }
    line = buffer_.substr(0, eol);
    buffer_.erase(0, eol + 2);
    return true;
  }

  bool ReadExactly(size_t n, std::string& out, const std::function<bool()>& keep_going,
                   absl::Time deadline) {
    while (buffer_.size() < n) {
      if (!Fill(keep_going, deadline)) return false;
    }
    out = buffer_.substr(0, n);
    buffer_.erase(0, n);
    return true;
  }

  std::string TakeRest(const std::function<bool()>& keep_going, absl::Time deadline) {
    while (Fill(keep_going, deadline)) {
    }
    return std::move(buffer_);
  }

 private:
  SSL_CTX* ctx_;
  std::string address_;
  int port_;
  int fd_ = -1;
  SSL* ssl_ = nullptr;
  std::string buffer_;
};

ApiProxy::ApiProxy(Options options) : options_(std::move(options)) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  BIO* bio = BIO_new_mem_buf(options_.upstream_ca_pem.data(),
                             static_cast<int>(options_.upstream_ca_pem.size()));
  X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  if (ca != nullptr) {
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca);
    X509_free(ca);
  }
  BIO_free(bio);
  ssl_ctx_ = ctx;
}

ApiProxy::~ApiProxy() { SSL_CTX_free(Ctx(ssl_ctx_)); }

void ApiProxy::Handle(const HttpRequest& request, HttpResponse& response) {
  if (absl::StartsWith(request.path, "/admin/")) {
    if (request.Header("authorization") != "Bearer " + options_.admin_token) {
      return RespondError(response, absl::UnauthenticatedError("Unauthorized"));
    }
    return faults_.HandleAdmin(request, response);
  }
  // Discovery and health go through untouched; the fault share applies to resource requests,
  // as on the built-in back end.
  const std::vector<std::string> parts = absl::StrSplit(request.path, '/', absl::SkipEmpty());
  const bool resource_request =
      (parts.size() >= 3 && parts[0] == "api") || (parts.size() >= 4 && parts[0] == "apis");
  if (resource_request && faults_.InjectedError(response)) return;
  // /api/v1/namespaces/NS/pods/NAME/log
  if (!options_.log_dir.empty() && request.method == "GET" && parts.size() == 7 &&
      parts[0] == "api" && parts[1] == "v1" && parts[2] == "namespaces" && parts[4] == "pods" &&
      parts[6] == "log") {
    return PodLog(request, response, parts[3], parts[5]);
  }
  Forward(request, response);
}

void ApiProxy::Forward(const HttpRequest& request, HttpResponse& response) {
  Upstream upstream(Ctx(ssl_ctx_), options_.upstream_address, options_.upstream_port);
  if (absl::Status s = upstream.Connect(); !s.ok()) {
    return RespondError(response, s);
  }
  std::string head = absl::StrCat(request.method, " ", request.target, " HTTP/1.1\r\n",
                                  "Host: ", options_.upstream_address, ":", options_.upstream_port,
                                  "\r\n", "Connection: close\r\n");
  for (const auto& [name, value] : request.headers) {
    if (!HopByHop(name)) absl::StrAppend(&head, name, ": ", value, "\r\n");
  }
  if (!request.body.empty() || request.method == "POST" || request.method == "PUT" ||
      request.method == "PATCH") {
    absl::StrAppend(&head, "Content-Length: ", request.body.size(), "\r\n");
  }
  head += "\r\n";
  if (!upstream.WriteAll(head + request.body)) {
    return RespondError(response, absl::UnavailableError("the API server closed the connection"));
  }

  const uint64_t epoch = faults_.watch_epoch();
  auto keep_going = [&] { return !response.Stopping() && faults_.watch_epoch() == epoch; };
  // The API server bounds its own requests (60 s, a watch's timeoutSeconds); this only stops a
  // wedged connection from holding a thread forever.
  const absl::Time deadline = absl::Now() + absl::Minutes(15);
  std::string status_line;
  if (!upstream.ReadLine(status_line, keep_going, deadline)) {
    return RespondError(response, absl::UnavailableError("no answer from the API server"));
  }
  const std::vector<std::string> status_parts =
      absl::StrSplit(status_line, absl::MaxSplits(' ', 2));
  int status = 0;
  if (status_parts.size() < 2 || !absl::SimpleAtoi(status_parts[1], &status)) {
    return RespondError(response, absl::InternalError("malformed answer from the API server"));
  }
  std::map<std::string, std::string> headers;  // lower-case name → value (repeats joined)
  std::string line;
  while (upstream.ReadLine(line, keep_going, deadline) && !line.empty()) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = absl::AsciiStrToLower(line.substr(0, colon));
    std::string value(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    std::string& slot = headers[name];
    slot = slot.empty() ? value : absl::StrCat(slot, ", ", value);
  }
  const std::string content_type = headers["content-type"];
  std::map<std::string, std::string> relayed;
  for (const auto& [name, value] : headers) {
    if (Relayed(name)) relayed[name] = value;
  }

  const bool chunked = absl::AsciiStrToLower(headers["transfer-encoding"]) == "chunked";
  if (chunked && !IsWatch(request)) {
    // An answer the server chose to chunk (a Node, a Pod, a large list) but that ends: relayed
    // whole with a Content-Length, so the client's connection stays open for its next request.
    // (Relayed as a stream it ended the connection, and every client paid a new TLS handshake
    // per request: the node agent's 100 ms node poll cost it 30% of a core in the tests.)
    std::string whole, size_line, data, crlf;
    while (upstream.ReadLine(size_line, keep_going, deadline)) {
      size_t size = 0;
      if (!absl::SimpleHexAtoi(size_line.substr(0, size_line.find(';')), &size)) break;
      if (size == 0) return response.Respond(status, content_type, whole, relayed);
      if (!upstream.ReadExactly(size, data, keep_going, deadline) ||
          !upstream.ReadExactly(2, crlf, keep_going, deadline)) {
        break;
      }
      whole += data;
    }
    return RespondError(response, absl::UnavailableError("the API server's answer was cut"));
  }
  if (chunked) {
    // A watch: relayed chunk by chunk, Warning headers included, until the server ends the
    // stream, the client goes, or DropWatches.
    if (!response.StartStream(status, content_type, relayed)) return;
    std::string size_line, data, crlf;
    while (upstream.ReadLine(size_line, keep_going, deadline)) {
      size_t size = 0;
      const std::string hex = size_line.substr(0, size_line.find(';'));
      if (!absl::SimpleHexAtoi(hex, &size)) break;
      if (size == 0) break;
      if (!upstream.ReadExactly(size, data, keep_going, deadline) ||
          !upstream.ReadExactly(2, crlf, keep_going, deadline) || !response.WriteChunk(data)) {
        break;
      }
    }
    response.EndStream();
    return;
  }
  std::string body;
  size_t length = 0;
  if (headers.contains("content-length") && absl::SimpleAtoi(headers["content-length"], &length)) {
    if (length > 0 && !upstream.ReadExactly(length, body, keep_going, deadline)) {
      return RespondError(response, absl::UnavailableError("the API server's answer was cut"));
    }
  } else {
    body = upstream.TakeRest(keep_going, deadline);
  }
  response.Respond(status, content_type, body, relayed);
}

void ApiProxy::PodLog(const HttpRequest& request, HttpResponse& response, const std::string& ns,
                      const std::string& pod) {
  // Let the API server authenticate and authorize the caller (and say whether the pod exists)
  // by asking it for the pod itself with the caller's credentials.
  Upstream upstream(Ctx(ssl_ctx_), options_.upstream_address, options_.upstream_port);
  absl::Status connected = upstream.Connect();
  if (!connected.ok()) return RespondError(response, connected);
  std::string head =
      absl::StrCat("GET /api/v1/namespaces/", ns, "/pods/", pod,
                   " HTTP/1.1\r\nHost: ", options_.upstream_address, ":", options_.upstream_port,
                   "\r\nConnection: close\r\nAccept: application/json\r\n");
  if (const std::string auth = request.Header("authorization"); !auth.empty()) {
    absl::StrAppend(&head, "Authorization: ", auth, "\r\n");
  }
  head += "\r\n";
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  auto forever = [] { return true; };
  std::string status_line;
  int status = 0;
  if (!upstream.WriteAll(head) || !upstream.ReadLine(status_line, forever, deadline)) {
    return RespondError(response, absl::UnavailableError("no answer from the API server"));
  }
  const std::vector<std::string> parts = absl::StrSplit(status_line, absl::MaxSplits(' ', 2));
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[1], &status)) status = 502;
  if (status != 200) {
    // The server's own refusal (401, 403, 404) goes back as it came.
    std::string line;
    size_t length = 0;
    while (upstream.ReadLine(line, forever, deadline) && !line.empty()) {
      if (absl::StartsWithIgnoreCase(line, "content-length:")) {
        (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(15)), &length);
      }
    }
    std::string body;
    if (length > 0) upstream.ReadExactly(length, body, forever, deadline);
    return response.Respond(status, "application/json", body);
  }
  std::ifstream in(absl::StrCat(options_.log_dir, "/", ns, "_", pod, ".log"));
  std::stringstream text;
  text << in.rdbuf();
  response.Respond(200, "text/plain", text.str());
}

}  // namespace phalanx::localcluster
