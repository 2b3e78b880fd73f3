#include "node_agent/preemption/http_fetch.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "common/base/status_macros.h"

namespace phalanx::agent {
namespace {

// Owns one socket descriptor.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
};

std::vector<Address> AddressesOf(const addrinfo* list) {
  std::vector<Address> out;
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    Address a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.length = ai->ai_addrlen;
    out.push_back(a);
  }
  return out;
}

addrinfo Hints(int extra_flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | extra_flags;
  return hints;
}

// A name lookup running on its own detached thread, so the caller can give up at its deadline
// (getaddrinfo has no timeout of its own). Whichever of the two sides finishes last frees it.
struct Resolution {
  std::string host;
  std::string port;
  absl::Notification done;
  int rc = 0;
  std::vector<Address> addresses;
  std::atomic<int> refs{2};
};

void Release(Resolution* r) {
  if (r->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete r;
}

void ResolveOnThread(Resolution* r) {
  addrinfo hints = Hints(AI_ADDRCONFIG);
  addrinfo* list = nullptr;
  r->rc = getaddrinfo(r->host.c_str(), r->port.c_str(), &hints, &list);
  if (r->rc == 0) {
    r->addresses = AddressesOf(list);
    freeaddrinfo(list);
  }
  r->done.Notify();
  Release(r);
}

absl::StatusOr<std::vector<Address>> Resolve(const HttpEndpoint& endpoint,
                                             const IoDeadline& deadline) {
  const std::string port = absl::StrCat(endpoint.port);
  // Address literals resolve without a lookup, on this thread.
  addrinfo hints = Hints(AI_NUMERICHOST);
  addrinfo* list = nullptr;
  if (getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &list) == 0) {
    std::vector<Address> out = AddressesOf(list);
    freeaddrinfo(list);
    return out;
  }
  auto* r = new Resolution;
  r->host = endpoint.host;
  r->port = port;
  try {
    std::thread(ResolveOnThread, r).detach();
  } catch (const std::system_error& e) {
    delete r;
    return absl::UnavailableError(absl::StrCat("cannot start a name lookup: ", e.what()));
  }
  if (!r->done.WaitForNotificationWithTimeout(deadline.Remaining())) {
    Release(r);
    return absl::DeadlineExceededError(
        absl::StrCat("resolving ", endpoint.host, " did not finish in time"));
  }
  const int rc = r->rc;
  std::vector<Address> out = std::move(r->addresses);
  Release(r);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", endpoint.host, ": ", gai_strerror(rc)));
  }
  if (out.empty()) return absl::UnavailableError(absl::StrCat(endpoint.host, " has no address"));
  return out;
}

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status WaitFor(int fd, short events, const IoDeadline& deadline, absl::string_view what) {
  while (true) {
    const absl::Duration remaining = deadline.Remaining();
    if (remaining <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("timed out ", what));
    }
    pollfd p{fd, events, 0};
    const int ms = static_cast<int>(absl::ToInt64Milliseconds(remaining)) + 1;
    const int n = poll(&p, 1, ms);
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat("poll failed ", what, ": ", strerror(errno)));
    }
  }
}

absl::StatusOr<std::unique_ptr<ScopedFd>> ConnectOne(const Address& address,
                                                     const HttpEndpoint& endpoint,
                                                     const IoDeadline& deadline) {
  auto fd = std::make_unique<ScopedFd>(
      socket(address.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd->get() < 0) {
    return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  }
  const std::string where = endpoint.ToString();
  if (connect(fd->get(), reinterpret_cast<const sockaddr*>(&address.storage), address.length) ==
      0) {
    return fd;
  }
  if (errno != EINPROGRESS) {
    return absl::UnavailableError(absl::StrCat("connecting to ", where, ": ", strerror(errno)));
  }
  RETURN_IF_ERROR(WaitFor(fd->get(), POLLOUT, deadline, absl::StrCat("connecting to ", where)));
  int error = 0;
  socklen_t length = sizeof(error);
  if (getsockopt(fd->get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
  if (error != 0) {
    return absl::UnavailableError(absl::StrCat("connecting to ", where, ": ", strerror(error)));
  }
  return fd;
}

absl::StatusOr<std::unique_ptr<ScopedFd>> Connect(const HttpEndpoint& endpoint,
                                                  const IoDeadline& deadline) {
  ASSIGN_OR_RETURN(std::vector<Address> addresses, Resolve(endpoint, deadline));
  absl::Status last = absl::UnavailableError(absl::StrCat(endpoint.host, " has no address"));
  for (const Address& address : addresses) {
    absl::StatusOr<std::unique_ptr<ScopedFd>> fd = ConnectOne(address, endpoint, deadline);
    if (fd.ok() || absl::IsDeadlineExceeded(fd.status())) return fd;
    last = fd.status();
  }
  return last;
}

absl::Status SendAll(int fd, absl::string_view data, const IoDeadline& deadline,
                     const std::string& where) {
  while (!data.empty()) {
    RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline, absl::StrCat("sending to ", where)));
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return absl::UnavailableError(absl::StrCat("sending to ", where, ": ", strerror(errno)));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

bool HasLineBreak(absl::string_view s) {
  return s.find('\r') != absl::string_view::npos || s.find('\n') != absl::string_view::npos;
}

absl::StatusOr<std::string> SerializeRequest(const HttpEndpoint& endpoint,
                                             const HttpRequest& request) {
  if (request.method.empty() || HasLineBreak(request.method) || HasLineBreak(request.path) ||
      request.method.find(' ') != std::string::npos ||
      request.path.find(' ') != std::string::npos) {
    return absl::InvalidArgumentError("HTTP method and path must be single words");
  }
  const bool ipv6 = endpoint.host.find(':') != std::string::npos;
  std::string host = ipv6 ? absl::StrCat("[", endpoint.host, "]") : endpoint.host;
  if (endpoint.port != 80) absl::StrAppend(&host, ":", endpoint.port);
  std::string path = absl::StrCat(endpoint.path_prefix, request.path);
  // push_back, not `path = "/"`: assigning a literal here trips GCC 12's false -Wrestrict
  // (GCC bug 105329).
  if (path.empty()) path.push_back('/');
  std::string out = absl::StrCat(request.method, " ", path, " HTTP/1.1\r\nHost: ", host,
                                 "\r\nConnection: close\r\n");
  if (request.method != "GET" || !request.body.empty()) {
    absl::StrAppend(&out, "Content-Length: ", request.body.size(), "\r\n");
  }
  for (const auto& [name, value] : request.headers) {
    if (name.empty() || HasLineBreak(name) || HasLineBreak(value) ||
        name.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("bad HTTP header name or value: ", name));
    }
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  absl::StrAppend(&out, "\r\n", request.body);
  return out;
}

// Decodes a chunked body. nullopt while more bytes are needed.
absl::StatusOr<std::optional<std::string>> DecodeChunked(absl::string_view raw) {
  std::string body;
  size_t pos = 0;
  while (true) {
    const size_t line_end = raw.find("\r\n", pos);
    if (line_end == absl::string_view::npos) return std::nullopt;
    absl::string_view size_text = raw.substr(pos, line_end - pos);
    size_text = size_text.substr(0, size_text.find(';'));  // chunk extensions
    size_text = absl::StripAsciiWhitespace(size_text);
    uint64_t size = 0;
    if (size_text.empty() || size_text.size() > 8 || !absl::SimpleHexAtoi(size_text, &size)) {
      return absl::UnavailableError(
          absl::StrCat("malformed chunk size in HTTP response: ", Excerpt(size_text)));
    }
    pos = line_end + 2;
    if (size == 0) return body;  // trailers, if any, are ignored
    if (raw.size() < pos + size + 2) return std::nullopt;
    body.append(raw.data() + pos, size);
    pos += size + 2;
  }
}

// The response in `raw` once it is complete; nullopt while more bytes are needed and the
// connection is open (`eof` false). Errors for responses that are not HTTP or are cut short.
absl::StatusOr<std::optional<HttpResponse>> ParseResponse(absl::string_view raw, bool eof,
                                                          const std::string& where) {
  constexpr absl::string_view kPrefix = "HTTP/1.";
  if (!absl::StartsWith(raw, kPrefix.substr(0, std::min(raw.size(), kPrefix.size())))) {
    return absl::UnavailableError(
        absl::StrCat("not an HTTP response from ", where, ": ", Excerpt(raw)));
  }
  const size_t header_end = raw.find("\r\n\r\n");
  if (header_end == absl::string_view::npos) {
    if (!eof) return std::nullopt;
    return absl::UnavailableError(absl::StrCat(
        where, raw.empty() ? " closed the connection without a response"
                           : " closed the connection in the middle of the response headers"));
  }
  std::vector<absl::string_view> lines =
      absl::StrSplit(raw.substr(0, header_end), absl::ByString("\r\n"));
  // "HTTP/1.1 200 OK": the code is the three digits after the first space.
  const absl::string_view status_line = lines[0];
  HttpResponse response;
  if (status_line.size() < 12 || status_line[8] != ' ' ||
      (status_line.size() > 12 && status_line[12] != ' ') ||
      !absl::SimpleAtoi(status_line.substr(9, 3), &response.status_code) ||
      response.status_code < 100) {
    return absl::UnavailableError(
        absl::StrCat("malformed HTTP status line from ", where, ": ", Excerpt(status_line)));
  }
  std::optional<uint64_t> content_length;
  bool chunked = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) {
      return absl::UnavailableError(
          absl::StrCat("malformed HTTP header from ", where, ": ", Excerpt(lines[i])));
    }
    const std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    const absl::string_view value = absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
    if (name == "content-length") {
      uint64_t n = 0;
      if (!absl::SimpleAtoi(value, &n)) {
        return absl::UnavailableError(
            absl::StrCat("malformed Content-Length from ", where, ": ", Excerpt(value)));
      }
      content_length = n;
    } else if (name == "transfer-encoding") {
      chunked = absl::StrContains(absl::AsciiStrToLower(value), "chunked");
    }
  }
  const absl::string_view rest = raw.substr(header_end + 4);
  if (response.status_code == 204 || response.status_code == 304) return response;
  if (chunked) {
    ASSIGN_OR_RETURN(std::optional<std::string> body, DecodeChunked(rest));
    if (!body.has_value()) {
      if (!eof) return std::nullopt;
      return absl::UnavailableError(
          absl::StrCat(where, " closed the connection in the middle of a chunked body"));
    }
    response.body = std::move(*body);
    return response;
  }
  if (content_length.has_value()) {
    if (rest.size() < *content_length) {
      if (!eof) return std::nullopt;
      return absl::UnavailableError(absl::StrCat(where, " closed the connection after ",
                                                 rest.size(), " of ", *content_length,
                                                 " body bytes"));
    }
    response.body = std::string(rest.substr(0, *content_length));
    return response;
  }
  if (!eof) return std::nullopt;  // the body runs to the end of the connection
  response.body = std::string(rest);
  return response;
}

}  // namespace

absl::StatusOr<HttpEndpoint> HttpEndpoint::Parse(absl::string_view base_url) {
  constexpr absl::string_view kScheme = "http://";
  if (!absl::StartsWithIgnoreCase(base_url, kScheme)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata URL must start with http:// (TLS is not supported): \"", base_url, "\""));
  }
  absl::string_view rest = base_url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  HttpEndpoint endpoint;
  if (slash != absl::string_view::npos) {
    endpoint.path_prefix = std::string(rest.substr(slash));
    while (!endpoint.path_prefix.empty() && endpoint.path_prefix.back() == '/') {
      endpoint.path_prefix.pop_back();
    }
  }
  absl::string_view port_text;
  bool has_port = false;
  if (absl::StartsWith(authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("unclosed '[' in URL \"", base_url, "\""));
    }
    endpoint.host = std::string(authority.substr(1, close - 1));
    absl::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') {
        return absl::InvalidArgumentError(absl::StrCat("bad URL \"", base_url, "\""));
      }
      port_text = after.substr(1);
      has_port = true;
    }
  } else {
    const size_t colon = authority.find(':');
    endpoint.host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) {
      port_text = authority.substr(colon + 1);
      has_port = true;
    }
  }
  if (endpoint.host.empty() || endpoint.host.find('@') != std::string::npos ||
      HasLineBreak(endpoint.host) ||
      endpoint.path_prefix.find_first_of(" ?#\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("bad URL \"", base_url, "\""));
  }
  if (has_port) {
    if (!absl::SimpleAtoi(port_text, &endpoint.port) || endpoint.port <= 0 ||
        endpoint.port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("bad port in URL \"", base_url, "\""));
    }
  }
  return endpoint;
}

std::string HttpEndpoint::ToString() const {
  const bool ipv6 = host.find(':') != std::string::npos;
  return absl::StrCat("http://", ipv6 ? "[" : "", host, ipv6 ? "]" : "", ":", port, path_prefix);
}

IoDeadline IoDeadline::After(absl::Duration timeout) {
  return IoDeadline(std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout));
}

absl::Duration IoDeadline::Remaining() const {
  const auto left = at_ - std::chrono::steady_clock::now();
  return std::max(absl::FromChrono(left), absl::ZeroDuration());
}

absl::StatusOr<HttpResponse> HttpFetch(const HttpEndpoint& endpoint, const HttpRequest& request,
                                       const IoDeadline& deadline) {
  ASSIGN_OR_RETURN(const std::string wire, SerializeRequest(endpoint, request));
  const std::string where = absl::StrCat(endpoint.ToString(), request.path);
  ASSIGN_OR_RETURN(std::unique_ptr<ScopedFd> fd, Connect(endpoint, deadline));
  RETURN_IF_ERROR(SendAll(fd->get(), wire, deadline, where));
  std::string raw;
  char buffer[16384];
  while (true) {
    // A server that answers nothing and one that trickles its answer are different failures.
    RETURN_IF_ERROR(WaitFor(fd->get(), POLLIN, deadline,
                            raw.empty() ? absl::StrCat("waiting for ", where)
                                        : absl::StrCat("reading the answer from ", where, " (",
                                                       raw.size(), " bytes so far)")));
    const ssize_t n = recv(fd->get(), buffer, sizeof(buffer), 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return absl::UnavailableError(absl::StrCat("reading from ", where, ": ", strerror(errno)));
    }
    raw.append(buffer, static_cast<size_t>(n));
    if (raw.size() > kMaxResponseBytes) {
      // Say which: a header flood and a huge body are different failures to whoever reads the log.
      const bool in_headers = raw.find("\r\n\r\n") == std::string::npos;
      return absl::UnavailableError(
          absl::StrCat(in_headers ? "response headers from " : "response from ", where,
                       " larger than ", kMaxResponseBytes, " bytes"));
    }
    ASSIGN_OR_RETURN(std::optional<HttpResponse> response, ParseResponse(raw, n == 0, where));
    if (response.has_value()) return std::move(*response);
  }
}

absl::Status ErrorForHttpStatus(const HttpResponse& response, absl::string_view what) {
  const std::string message =
      absl::StrCat(what, ": HTTP ", response.status_code, " ", Excerpt(response.body));
  const int code = response.status_code;
  if (code == 401 || code == 403) return absl::PermissionDeniedError(message);
  if (code == 404) return absl::NotFoundError(message);
  if (code == 408 || code == 429 || (code >= 500 && code < 600)) {
    return absl::UnavailableError(message);
  }
  if (code >= 400 && code < 500) return absl::FailedPreconditionError(message);
  return absl::InternalError(message);
}

std::string Excerpt(absl::string_view text, size_t max) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  if (text.size() > max) out += "...";
  return absl::StrCat("\"", out, "\"");
}

}  // namespace phalanx::agent
