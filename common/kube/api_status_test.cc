#include "common/kube/api_status.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::kube {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

std::string StatusBody(const std::string& reason, const std::string& message) {
  return R"({"kind":"Status","apiVersion":"v1","status":"Failure","reason":")" + reason +
         R"(","message":")" + message + R"("})";
}

TEST(ApiStatus, MapsEveryHttpCodeByTheTable) {
  struct Case {
    int http;
    std::string body;
    absl::StatusCode code;
  };
  const std::vector<Case> cases = {
      {200, "{}", absl::StatusCode::kOk},
      {201, "", absl::StatusCode::kOk},
      {400, "", absl::StatusCode::kInvalidArgument},
      {401, "", absl::StatusCode::kPermissionDenied},
      {403, "", absl::StatusCode::kPermissionDenied},
      {404, StatusBody("NotFound", "pods \\\"p\\\" not found"), absl::StatusCode::kNotFound},
      {409, StatusBody("AlreadyExists", "exists"), absl::StatusCode::kAlreadyExists},
      {409, StatusBody("Conflict", "the object has been modified"), absl::StatusCode::kAborted},
      {410, StatusBody("Expired", "too old resource version"), absl::StatusCode::kOutOfRange},
      {422, StatusBody("Invalid", "spec.replicas: Invalid value"),
       absl::StatusCode::kInvalidArgument},
      {429, "", absl::StatusCode::kUnavailable},
      {500, "boom", absl::StatusCode::kUnavailable},
      {503, "", absl::StatusCode::kUnavailable},
      {418, "", absl::StatusCode::kUnknown},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.http);
    absl::Status status = StatusFromResponse(c.http, c.body, "GET /x");
    EXPECT_EQ(status.code(), c.code) << status;
  }
}

TEST(ApiStatus, MessageUsesTheStatusBodyOrQuotesTheStart) {
  EXPECT_THAT(StatusFromResponse(422, StatusBody("Invalid", "spec.replicas: must be >= 1"),
                                 "POST /apis/phalanx.dev/v1alpha1/trainingjobs"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("POST /apis/phalanx.dev/v1alpha1/trainingjobs: HTTP 422 "
                                 "Invalid: spec.replicas: must be >= 1")));
  EXPECT_THAT(StatusFromResponse(502, std::string(1000, 'x'), "GET /api"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("HTTP 502: xxx")));
}

TEST(ApiStatus, GarbageBodies_NeverThrow) {
  for (const std::string& body : {std::string("{"), std::string("\xff\xfe"), std::string("[1,2"),
                                  std::string(R"({"kind":5})"), std::string("null")}) {
    EXPECT_FALSE(StatusFromResponse(500, body, "GET /").ok());
  }
  EXPECT_THAT(StatusFromResponse(200, "{", "GET /"), IsOk());
}

TEST(ApiStatus, OnlyTransientFailuresAreRetryable) {
  EXPECT_TRUE(IsRetryable(StatusFromResponse(429, "", "")));
  EXPECT_TRUE(IsRetryable(StatusFromResponse(503, "", "")));
  EXPECT_FALSE(IsRetryable(StatusFromResponse(409, "", "")));
  EXPECT_FALSE(IsRetryable(StatusFromResponse(404, "", "")));
}

}  // namespace
}  // namespace phalanx::kube
