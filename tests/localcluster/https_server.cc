#include "tests/localcluster/https_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/log.h"

namespace phalanx::localcluster {
namespace {

constexpr size_t kMaxHeaderBytes = 64 << 10;

std::string PercentDecode(absl::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size() && absl::ascii_isxdigit(in[i + 1]) &&
        absl::ascii_isxdigit(in[i + 2])) {
      int v = 0;
      // Always true: two hex digits, checked above.
      if (absl::SimpleHexAtoi(in.substr(i + 1, 2), &v)) out += static_cast<char>(v);
      i += 2;
    } else if (in[i] == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += in[i];
    }
  }
  return out;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

}  // namespace

std::string HttpRequest::Header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

std::string HttpRequest::Param(const std::string& name) const {
  auto it = params.find(name);
  return it == params.end() ? "" : it->second;
}

// One TLS connection: buffered reads, request parsing, and the HttpResponse a handler writes.
class HttpsServer::Connection final : public HttpResponse {
 public:
  Connection(SSL* ssl, const std::atomic<bool>& stopping) : ssl_(ssl), stopping_(stopping) {}

  // Reads one request. False on EOF, error or a request the server refuses (answered here).
  bool ReadRequest(HttpRequest& request, size_t max_body) {
    std::string head;
    while (true) {
      const size_t end = buffer_.find("\r\n\r\n");
      if (end != std::string::npos) {
        head = buffer_.substr(0, end);
        buffer_.erase(0, end + 4);
        break;
      }
      if (buffer_.size() > kMaxHeaderBytes) return Refuse(431, "request headers too large");
      if (!Fill()) return false;
    }
    std::vector<std::string> lines = absl::StrSplit(head, "\r\n");
    std::vector<std::string> first = absl::StrSplit(lines[0], ' ', absl::SkipEmpty());
    if (first.size() != 3 || !absl::StartsWith(first[2], "HTTP/1.")) {
      return Refuse(400, "malformed request line");
    }
    request = HttpRequest();
    request.method = first[0];
    const std::string& target = first[1];
    request.target = target;
    const size_t q = target.find('?');
    request.path = PercentDecode(target.substr(0, q), false);
    if (q != std::string::npos) {
      for (absl::string_view kv : absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
        const size_t eq = kv.find('=');
        request.params[PercentDecode(kv.substr(0, eq), true)] =
            eq == absl::string_view::npos ? "" : PercentDecode(kv.substr(eq + 1), true);
      }
    }
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == std::string::npos) return Refuse(400, "malformed header line");
      request.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
    keep_alive_ = absl::AsciiStrToLower(request.Header("connection")) != "close";
    if (absl::AsciiStrToLower(request.Header("transfer-encoding")) == "chunked") {
      return ReadChunkedBody(request.body, max_body);
    }
    size_t length = 0;
    const std::string cl = request.Header("content-length");
    if (!cl.empty() && !absl::SimpleAtoi(cl, &length)) return Refuse(400, "bad Content-Length");
    if (length > max_body) return Refuse(413, "request body too large");
    while (buffer_.size() < length) {
      if (!Fill()) return false;
    }
    request.body = buffer_.substr(0, length);
    buffer_.erase(0, length);
    return true;
  }

  void Respond(int status, absl::string_view content_type, absl::string_view body,
               const std::map<std::string, std::string>& headers) override {
    std::string out =
        absl::StrCat("HTTP/1.1 ", status, " ", Reason(status), "\r\nContent-Type: ", content_type,
                     "\r\nContent-Length: ", body.size(), "\r\n");
    for (const auto& [k, v] : headers) absl::StrAppend(&out, k, ": ", v, "\r\n");
    if (!keep_alive_) out += "Connection: close\r\n";
    out += "\r\n";
    out.append(body.data(), body.size());
    responded_ = true;
    if (!WriteAll(out)) broken_ = true;
  }

  bool StartStream(int status, absl::string_view content_type,
                   const std::map<std::string, std::string>& headers) override {
    responded_ = true;
    streaming_ = true;
    keep_alive_ = false;  // a stream ends the connection: simpler, and what clients expect
    std::string head =
        absl::StrCat("HTTP/1.1 ", status, " ", Reason(status), "\r\nContent-Type: ", content_type,
                     "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n");
    for (const auto& [k, v] : headers) absl::StrAppend(&head, k, ": ", v, "\r\n");
    head += "\r\n";
    return WriteAll(head) || (broken_ = true, false);
  }

  bool WriteChunk(absl::string_view data) override {
    if (broken_ || stopping_.load()) return false;
    if (data.empty()) return true;
    char size_line[32];
    snprintf(size_line, sizeof(size_line), "%zx\r\n", data.size());
    std::string out = absl::StrCat(size_line, data, "\r\n");
    if (!WriteAll(out)) broken_ = true;
    return !broken_;
  }

  void EndStream() override {
    if (!broken_ && streaming_) WriteAll("0\r\n\r\n");
    streaming_ = false;
  }

  bool Stopping() const override { return stopping_.load() || broken_; }

  bool responded() const { return responded_; }
  bool keep_alive() const { return keep_alive_ && !broken_; }
  void ResetForNextRequest() { responded_ = false; }

 private:
  bool Refuse(int status, absl::string_view why) {
    keep_alive_ = false;
    Respond(status, "text/plain", why, {});
    return false;
  }

  bool Fill() {
    char chunk[16384];
    const int n = SSL_read(ssl_, chunk, sizeof(chunk));
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  bool ReadChunkedBody(std::string& body, size_t max_body) {
    while (true) {
      size_t eol;
      while ((eol = buffer_.find("\r\n")) == std::string::npos) {
        if (buffer_.size() > kMaxHeaderBytes || !Fill()) return false;
      }
      size_t size = 0;
      const std::string size_text(absl::StripAsciiWhitespace(
          absl::string_view(buffer_).substr(0, std::min(eol, buffer_.find(';')))));
      if (!absl::SimpleHexAtoi(size_text, &size)) return Refuse(400, "bad chunk size");
      buffer_.erase(0, eol + 2);
      if (body.size() + size > max_body) return Refuse(413, "request body too large");
      while (buffer_.size() < size + 2) {
        if (!Fill()) return false;
      }
      body.append(buffer_, 0, size);
      buffer_.erase(0, size + 2);
      if (size == 0) return true;  // (trailers are not supported; none are sent by clients)
    }
  }

  bool WriteAll(absl::string_view data) {
    while (!data.empty()) {
      const int n = SSL_write(ssl_, data.data(), static_cast<int>(data.size()));
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  SSL* ssl_;
  const std::atomic<bool>& stopping_;
  std::string buffer_;
  bool keep_alive_ = true;
  bool responded_ = false;
  bool streaming_ = false;
  bool broken_ = false;
};

HttpsServer::~HttpsServer() { Stop(); }

absl::StatusOr<int> HttpsServer::Start(Options options, HttpHandler handler) {
  options_ = std::move(options);
  handler_ = std::move(handler);
  // A client that disconnects mid-write must not kill the process.
  signal(SIGPIPE, SIG_IGN);

  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed");
  ssl_ctx_ = ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  BIO* cert_bio =
      BIO_new_mem_buf(options_.cert_pem.data(), static_cast<int>(options_.cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  BIO_free(cert_bio);
  BIO* key_bio =
      BIO_new_mem_buf(options_.key_pem.data(), static_cast<int>(options_.key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  const bool loaded = cert != nullptr && key != nullptr &&
                      SSL_CTX_use_certificate(ctx, cert) == 1 &&
                      SSL_CTX_use_PrivateKey(ctx, key) == 1;
  X509_free(cert);
  EVP_PKEY_free(key);
  if (!loaded) return absl::InvalidArgumentError("server certificate or key is not valid PEM");

  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(options_.port));
  if (inet_pton(AF_INET, options_.host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad listen address ", options_.host));
  }
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 128) != 0) {
    const std::string err = strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", err));
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return static_cast<int>(ntohs(addr.sin_port));
}

void HttpsServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (poll(&pfd, 1, 200) <= 0) continue;  // bounded so Stop is noticed
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    absl::MutexLock lock(&mu_);
    if (active_ >= options_.max_connections) {
      close(fd);
      continue;
    }
    ++active_;
    open_fds_.insert(fd);
    std::thread([this, fd] { Serve(fd); }).detach();
  }
}

void HttpsServer::Serve(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // Reads time out so an idle or stalled client cannot pin a thread forever.
  timeval tv{static_cast<time_t>(absl::ToInt64Seconds(options_.idle_timeout)), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  timeval write_tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &write_tv, sizeof(write_tv));
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
  SSL_set_fd(ssl, fd);
  if (SSL_accept(ssl) == 1) {
    Connection conn(ssl, stopping_);
    HttpRequest request;
    while (!stopping_.load() && conn.ReadRequest(request, options_.max_body_bytes)) {
      conn.ResetForNextRequest();
      handler_(request, conn);
      if (!conn.responded()) conn.Respond(500, "text/plain", "handler sent no response", {});
      conn.EndStream();
      if (!conn.keep_alive()) break;
    }
    SSL_shutdown(ssl);
  }
  ERR_clear_error();
  SSL_free(ssl);
  absl::MutexLock lock(&mu_);
  open_fds_.erase(fd);
  close(fd);
  --active_;
}

void HttpsServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  {
    absl::MutexLock lock(&mu_);
    // Wakes connections blocked in reads; streaming handlers see Stopping() within their wait.
    for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
    if (!mu_.AwaitWithTimeout(absl::Condition(
                                  +[](int* n) { return *n == 0; }, &active_),
                              absl::Seconds(15))) {
      // Leaking the context beats freeing it under a thread that may still use it.
      PHX_LOG(WARNING) << "https server: " << active_ << " connections did not end within 15s";
      return;
    }
  }
  if (ssl_ctx_ != nullptr) SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
  ssl_ctx_ = nullptr;
}

}  // namespace phalanx::localcluster
