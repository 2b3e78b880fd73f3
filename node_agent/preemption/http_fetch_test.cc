#include "node_agent/preemption/http_fetch.h"

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node_agent/preemption/fake_metadata_server.h"

namespace phalanx::agent {
namespace {

using ::phalanx::agent::testing::FakeMetadataServer;
using ::phalanx::agent::testing::ScriptedResponse;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

TEST(HttpEndpointTest, ParsesHttpUrlsAndRejectsTheRest) {
  struct Case {
    const char* url;
    bool ok;
    const char* host;
    int port;
    const char* prefix;
  };
  const Case cases[] = {
      {"http://metadata.google.internal", true, "metadata.google.internal", 80, ""},
      {"http://169.254.169.254/", true, "169.254.169.254", 80, ""},
      {"http://127.0.0.1:8080", true, "127.0.0.1", 8080, ""},
      {"HTTP://127.0.0.1:8080/base/", true, "127.0.0.1", 8080, "/base"},
      {"http://[fd00:ec2::254]", true, "fd00:ec2::254", 80, ""},
      {"http://[::1]:9000/x", true, "::1", 9000, "/x"},
      {"https://metadata.google.internal", false, "", 0, ""},
      {"metadata.google.internal", false, "", 0, ""},
      {"", false, "", 0, ""},
      {"http://", false, "", 0, ""},
      {"http://:80", false, "", 0, ""},
      {"http://host:", false, "", 0, ""},
      {"http://host:0", false, "", 0, ""},
      {"http://host:70000", false, "", 0, ""},
      {"http://host:80x", false, "", 0, ""},
      {"http://user@host", false, "", 0, ""},
      {"http://[::1", false, "", 0, ""},
      {"http://host/a b", false, "", 0, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.url);
    absl::StatusOr<HttpEndpoint> endpoint = HttpEndpoint::Parse(c.url);
    if (!c.ok) {
      EXPECT_THAT(endpoint, StatusIs(absl::StatusCode::kInvalidArgument));
      continue;
    }
    ASSERT_THAT(endpoint, IsOk());
    EXPECT_EQ(endpoint->host, c.host);
    EXPECT_EQ(endpoint->port, c.port);
    EXPECT_EQ(endpoint->path_prefix, c.prefix);
  }
}

TEST(HttpStatusTest, UnexpectedStatusCodesMapToStatusCodes) {
  struct Case {
    int http;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {401, absl::StatusCode::kPermissionDenied}, {403, absl::StatusCode::kPermissionDenied},
      {404, absl::StatusCode::kNotFound},         {408, absl::StatusCode::kUnavailable},
      {429, absl::StatusCode::kUnavailable},      {500, absl::StatusCode::kUnavailable},
      {503, absl::StatusCode::kUnavailable},      {400, absl::StatusCode::kFailedPrecondition},
      {302, absl::StatusCode::kInternal},         {200, absl::StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.http);
    const absl::Status status = ErrorForHttpStatus({c.http, "boom"}, "GET /x");
    EXPECT_THAT(status, StatusIs(c.code, HasSubstr("GET /x: HTTP")));
    EXPECT_THAT(status.message(), HasSubstr("boom"));
  }
}

TEST(ExcerptTest, EscapesControlBytesAndTruncates) {
  EXPECT_EQ(Excerpt("TRUE"), "\"TRUE\"");
  EXPECT_EQ(Excerpt(std::string("a\r\n\0b", 5)), "\"a\\x0d\\x0a\\x00b\"");
  EXPECT_EQ(Excerpt("abcdef", 3), "\"abc...\"");
}

class HttpFetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<FakeMetadataServer>> server = FakeMetadataServer::Start();
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
    absl::StatusOr<HttpEndpoint> endpoint = HttpEndpoint::Parse(server_->base_url());
    ASSERT_THAT(endpoint, IsOk());
    endpoint_ = *endpoint;
  }

  absl::StatusOr<HttpResponse> Get(const std::string& path,
                                   absl::Duration timeout = absl::Seconds(5)) {
    HttpRequest request;
    request.path = path;
    return HttpFetch(endpoint_, request, IoDeadline::After(timeout));
  }

  std::unique_ptr<FakeMetadataServer> server_;
  HttpEndpoint endpoint_;
};

TEST_F(HttpFetchTest, GetReturnsStatusAndBodyAndSendsHeaders) {
  server_->Set("GET", "/a", ScriptedResponse::Ok("hello"));
  HttpRequest request;
  request.path = "/a";
  request.headers = {{"Metadata-Flavor", "Google"}};
  absl::StatusOr<HttpResponse> response =
      HttpFetch(endpoint_, request, IoDeadline::After(absl::Seconds(5)));
  ASSERT_THAT(response, IsOk());
  EXPECT_EQ(response->status_code, 200);
  EXPECT_EQ(response->body, "hello");
  const std::vector<testing::ReceivedRequest> requests = server_->requests();
  ASSERT_EQ(requests.size(), 1u);
  const std::map<std::string, std::string>& headers = requests[0].headers;
  EXPECT_EQ(headers.at("metadata-flavor"), "Google");
  EXPECT_EQ(headers.at("host"), absl::StrCat("127.0.0.1:", server_->port()));
  EXPECT_EQ(headers.at("connection"), "close");
}

TEST_F(HttpFetchTest, PutSendsItsBodyWithContentLength) {
  server_->Set("PUT", "/token", ScriptedResponse::Ok("t"));
  HttpRequest request;
  request.method = "PUT";
  request.path = "/token";
  absl::StatusOr<HttpResponse> response =
      HttpFetch(endpoint_, request, IoDeadline::After(absl::Seconds(5)));
  ASSERT_THAT(response, IsOk());
  EXPECT_EQ(response->body, "t");
  request.body = "payload";
  ASSERT_THAT(HttpFetch(endpoint_, request, IoDeadline::After(absl::Seconds(5))), IsOk());
  const std::vector<testing::ReceivedRequest> seen = server_->requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].headers.at("content-length"), "0");
  EXPECT_EQ(seen[1].body, "payload");
}

TEST_F(HttpFetchTest, ErrorStatusesAreResponsesNotErrors) {
  server_->Set("GET", "/down", ScriptedResponse::Status(503, "busy"));
  absl::StatusOr<HttpResponse> response = Get("/down");
  ASSERT_THAT(response, IsOk());
  EXPECT_EQ(response->status_code, 503);
  EXPECT_EQ(response->body, "busy");
  response = Get("/unscripted");
  ASSERT_THAT(response, IsOk());
  EXPECT_EQ(response->status_code, 404);
}

TEST_F(HttpFetchTest, ChunkedBodiesAreReassembled) {
  server_->Set("GET", "/c", ScriptedResponse::Ok("TERMINATE_ON_HOST_MAINTENANCE").Chunked());
  absl::StatusOr<HttpResponse> response = Get("/c");
  ASSERT_THAT(response, IsOk());
  EXPECT_EQ(response->body, "TERMINATE_ON_HOST_MAINTENANCE");
}

TEST_F(HttpFetchTest, BrokenAnswersAreUnavailableWithAClearMessage) {
  struct Case {
    const char* name;
    ScriptedResponse response;
    const char* message;
  };
  const Case cases[] = {
      {"not HTTP", ScriptedResponse::Garbage("\x16\x03\x01garbage"), "not an HTTP response"},
      {"bad status line", ScriptedResponse::Garbage("HTTP/1.1 abc\r\n\r\n"),
       "malformed HTTP status line"},
      {"bad header", ScriptedResponse::Garbage("HTTP/1.1 200 OK\r\nnocolon\r\n\r\n"),
       "malformed HTTP header"},
      {"bad content length",
       ScriptedResponse::Garbage("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"),
       "malformed Content-Length"},
      {"bad chunk",
       ScriptedResponse::Garbage("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
       "malformed chunk size"},
      {"closed without an answer", ScriptedResponse::CloseWithoutAnswer(),
       "closed the connection without a response"},
      {"closed in the headers", ScriptedResponse::Garbage("HTTP/1.1 200 OK\r\nContent-"),
       "in the middle of the response headers"},
      {"truncated body", ScriptedResponse::TruncatedBody("TR"), "after 2 of 102 body bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    server_->Set("GET", "/x", c.response);
    EXPECT_THAT(Get("/x"), StatusIs(absl::StatusCode::kUnavailable, HasSubstr(c.message)));
  }
}

TEST_F(HttpFetchTest, OversizedResponseIsUnavailable) {
  server_->Set("GET", "/big", ScriptedResponse::Ok(std::string(kMaxResponseBytes + 10, 'a')));
  EXPECT_THAT(Get("/big"), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("larger than")));
}

TEST_F(HttpFetchTest, SlowServerIsDeadlineExceededWithinTheTimeout) {
  server_->Set("GET", "/slow", ScriptedResponse::Ok("late").After(absl::Seconds(30)));
  const absl::Time start = absl::Now();
  EXPECT_THAT(Get("/slow", absl::Milliseconds(200)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("/slow")));
  // Bounded by the timeout, not by the server's 30 s (generous slack for loaded machines).
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST_F(HttpFetchTest, ExpiredDeadlineFailsWithoutWaiting) {
  server_->Set("GET", "/a", ScriptedResponse::Ok("x"));
  EXPECT_THAT(Get("/a", absl::ZeroDuration()), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST(HttpFetchServerDownTest, ConnectionRefusedIsUnavailable) {
  absl::StatusOr<HttpEndpoint> endpoint =
      HttpEndpoint::Parse(absl::StrCat("http://127.0.0.1:", FakeMetadataServer::UnusedPort()));
  ASSERT_THAT(endpoint, IsOk());
  HttpRequest request;
  request.path = "/a";
  EXPECT_THAT(HttpFetch(*endpoint, request, IoDeadline::After(absl::Seconds(5))),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("refused")));
}

TEST(HttpFetchServerDownTest, UnresolvableHostFailsWithinTheTimeout) {
  absl::StatusOr<HttpEndpoint> endpoint =
      HttpEndpoint::Parse("http://phalanx-no-such-host.invalid");
  ASSERT_THAT(endpoint, IsOk());
  HttpRequest request;
  request.path = "/a";
  const absl::Time start = absl::Now();
  const absl::Status status =
      HttpFetch(*endpoint, request, IoDeadline::After(absl::Milliseconds(500))).status();
  EXPECT_TRUE(absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(HttpFetchRequestTest, HeadersWithLineBreaksAreRejected) {
  HttpEndpoint endpoint{"127.0.0.1", 1, ""};
  HttpRequest request;
  request.path = "/a";
  request.headers = {{"X-Token", "a\r\nInjected: yes"}};
  EXPECT_THAT(HttpFetch(endpoint, request, IoDeadline::After(absl::Seconds(1))),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace phalanx::agent
