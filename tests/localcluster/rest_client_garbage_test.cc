// Fuzz-style: the REST client against an HTTPS server that answers garbage — malformed JSON,
// wrong shapes, HTML errors, truncated and junk-filled watch streams, silence. Every case must
// end in a clear status, never a crash or a hang.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/kube/resources.h"
#include "common/kube/rest_client.h"
#include "common/testing/status_matchers.h"
#include "tests/localcluster/https_server.h"
#include "tests/localcluster/tls_material.h"

namespace phalanx::localcluster {
namespace {

using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

using kube::kPods;

class GarbageServerTest : public ::testing::Test {
 protected:
  void Serve(HttpHandler handler, absl::Duration client_timeout = absl::Seconds(20)) {
    absl::StatusOr<TlsMaterial> tls = GenerateTlsMaterial();
    ASSERT_TRUE(tls.ok());
    HttpsServer::Options options;
    options.cert_pem = tls->server_cert_pem;
    options.key_pem = tls->server_key_pem;
    absl::StatusOr<int> port = server_.Start(options, std::move(handler));
    ASSERT_TRUE(port.ok()) << port.status();
    kube::ClusterConfig config;
    config.server = "https://127.0.0.1:" + std::to_string(*port);
    config.ca_pem = tls->ca_cert_pem;
    config.token = "t";
    kube::RestClientOptions client_options;
    client_options.request_timeout = client_timeout;
    client_ = *kube::RestClient::Create(config, client_options);
  }
  void TearDown() override {
    release_.Notify();
    client_.reset();
    server_.Stop();
  }

  HttpsServer server_;
  std::unique_ptr<kube::RestClient> client_;
  absl::Notification release_;  // lets a deliberately stuck handler go
};

TEST_F(GarbageServerTest, MalformedAndMisshapenBodiesAreClearErrors) {
  Serve([](const HttpRequest& req, HttpResponse& resp) {
    if (req.path == "/api/v1/namespaces/ns/pods") {
      resp.Respond(200, "application/json", R"({"items": 5, "metadata": {}})");
    } else if (req.path == "/api/v1/namespaces/ns/pods/notjson") {
      resp.Respond(200, "application/json", "<<<not json>>>");
    } else if (req.path == "/api/v1/namespaces/ns/pods/array") {
      resp.Respond(200, "application/json", "[1,2,3]");
    } else if (req.path == "/api/v1/namespaces/ns/pods/html") {
      resp.Respond(502, "text/html", "<html><body>Bad Gateway</body></html>");
    } else {
      resp.Respond(
          404, "application/json",
          R"({"kind":"Status","reason":"NotFound","message":"pods \"x\" not found","code":404})");
    }
  });
  EXPECT_THAT(client_->List(kPods, "ns", {}).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("items is not an array")));
  EXPECT_THAT(client_->Get(kPods, "ns", "notjson").status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("not a JSON object")));
  EXPECT_THAT(client_->Get(kPods, "ns", "array").status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(client_->Get(kPods, "ns", "html").status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("Bad Gateway")));
  EXPECT_THAT(client_->Get(kPods, "ns", "x").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not found")));
}

TEST_F(GarbageServerTest, JunkLinesAreSkippedAndATruncatedStreamEndsCleanly) {
  Serve([](const HttpRequest&, HttpResponse& resp) {
    resp.StartStream(200, "application/json");
    resp.WriteChunk("this is not json\n");
    resp.WriteChunk(R"({"type":"WHATEVER","object":{}})"
                    "\n");
    resp.WriteChunk(R"({"type":"ADDED","object":{"metadata":{"name":"p","resourceVersion":"7"}}})");
    resp.WriteChunk("\n{\"type\":\"MODIFIED\",\"object\":{\"metad");  // cut mid-event
  });
  absl::StatusOr<std::unique_ptr<kube::WatchStream>> watch = client_->Watch(kPods, "ns", {});
  ASSERT_TRUE(watch.ok()) << watch.status();
  std::optional<kube::WatchEventData> event;
  absl::Status end;
  for (int i = 0; i < 200 && end.ok(); ++i) {
    absl::StatusOr<std::optional<kube::WatchEventData>> next =
        (*watch)->Next(absl::Milliseconds(100));
    if (!next.ok()) {
      end = next.status();
    } else if (next->has_value()) {
      event = *next;
    }
  }
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->type, "ADDED");
  EXPECT_EQ(event->resource_version, "7");
  EXPECT_THAT(end, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("truncated")));
}

TEST_F(GarbageServerTest, ASilentWatchNeitherBlocksNextNorItsDestruction) {
  Serve([this](const HttpRequest&, HttpResponse& resp) {
    resp.StartStream(200, "application/json");
    release_.WaitForNotificationWithTimeout(absl::Seconds(30));
  });
  absl::StatusOr<std::unique_ptr<kube::WatchStream>> watch = client_->Watch(kPods, "ns", {});
  ASSERT_TRUE(watch.ok()) << watch.status();
  absl::StatusOr<std::optional<kube::WatchEventData>> next =
      (*watch)->Next(absl::Milliseconds(200));
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());
  watch->reset();  // must return although the server never sends a byte
}

TEST_F(GarbageServerTest, AServerThatNeverAnswersTimesOut) {
  Serve(
      [this](const HttpRequest&, HttpResponse& resp) {
        release_.WaitForNotificationWithTimeout(absl::Seconds(30));
        resp.Respond(200, "application/json", "{}");
      },
      absl::Seconds(1));
  EXPECT_THAT(client_->Get(kPods, "ns", "p").status(), StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(GarbageServerTest, WatchErrorStatusesMapThroughTheTable) {
  Serve([](const HttpRequest&, HttpResponse& resp) {
    resp.Respond(410, "application/json",
                 R"({"kind":"Status","reason":"Expired","message":"too old","code":410})");
  });
  EXPECT_THAT(client_->Watch(kPods, "ns", {.resource_version = "1"}).status(),
              StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(RestClientConfigTest, UnusableConfigsAreRejected) {
  EXPECT_THAT(kube::RestClient::Create({}).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  kube::ClusterConfig config;
  config.server = "ftp://example";
  EXPECT_THAT(kube::RestClient::Create(config).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  config.server = "https://[not a host";
  EXPECT_THAT(kube::RestClient::Create(config).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace phalanx::localcluster
