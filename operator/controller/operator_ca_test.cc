#include "operator/controller/operator_ca.h"

#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"
#include "common/kube/testing/fake_client.h"
#include "common/kube/testing/object_store.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"

namespace phalanx::op {
namespace {

using kube::Json;
using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

class OperatorCaTest : public ::testing::Test {
 protected:
  testing::FakeClock clock_;
  kube::fake::ObjectStore store_{clock_, 1000};
  kube::fake::FakeClient client_{store_};
};

TEST_F(OperatorCaTest, FirstStartCreatesTheCaAndEveryLaterStartReadsTheSame) {
  absl::StatusOr<auth::TlsKeyPair> first = LoadOrCreateOperatorCa(client_, "phalanx-system", "ca");
  ASSERT_THAT(first, IsOk());
  EXPECT_THAT(auth::CheckCertificateAuthority(*first), IsOk());
  absl::StatusOr<auth::TlsKeyPair> again = LoadOrCreateOperatorCa(client_, "phalanx-system", "ca");
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->cert_pem, first->cert_pem);
  EXPECT_EQ(again->key_pem, first->key_pem);
  // What is stored: the two PEMs under ca.crt and ca.key, and nothing else.
  absl::StatusOr<Json> secret = client_.Get(kube::kSecrets, "phalanx-system", "ca");
  ASSERT_THAT(secret, IsOk());
  std::string cert;
  ASSERT_TRUE(absl::Base64Unescape(secret->at("data").at("ca.crt").as_string(), &cert));
  EXPECT_EQ(cert, first->cert_pem);
  EXPECT_EQ(secret->at("data").size(), 2u);
  // It signs leaves (a job's coordinator certificate).
  EXPECT_THAT(auth::IssueServerCertificate(*again, {"j-coordinator.ns.svc"}, absl::Hours(1)),
              IsOk());
}

TEST_F(OperatorCaTest, TheSecretItCreates_IsOwnedByWhatTheCallerNames) {
  ASSERT_THAT(LoadOrCreateOperatorCa(
                  client_, "phalanx-system", "ca",
                  {{.api_version = "v1", .kind = "ServiceAccount", .name = "op", .uid = "u-2"}}),
              IsOk());
  absl::StatusOr<Json> secret = client_.Get(kube::kSecrets, "phalanx-system", "ca");
  ASSERT_THAT(secret, IsOk());
  const std::vector<kube::OwnerReference> owners = kube::OwnerReferencesOf(*secret);
  ASSERT_EQ(owners.size(), 1u);
  EXPECT_EQ(owners[0].name, "op");
  EXPECT_EQ(owners[0].uid, "u-2");
}

// A replica that saw no Secret but lost the race to create it signs with the winner's CA.
TEST_F(OperatorCaTest, AReplicaThatLosesTheRaceReadsTheWinnersCa) {
  absl::StatusOr<auth::TlsKeyPair> winner = LoadOrCreateOperatorCa(client_, "ns", "ca");
  ASSERT_THAT(winner, IsOk());
  client_.FailNext(1, absl::NotFoundError("not yet"));  // its Get ran before the winner's create
  absl::StatusOr<auth::TlsKeyPair> loser = LoadOrCreateOperatorCa(client_, "ns", "ca");
  ASSERT_THAT(loser, IsOk());
  EXPECT_EQ(loser->cert_pem, winner->cert_pem);
  EXPECT_EQ(loser->key_pem, winner->key_pem);
}

TEST_F(OperatorCaTest, ASecretWithoutAUsableCaIsRefusedSayingWhatToDo) {
  absl::StatusOr<auth::TlsKeyPair> other = auth::MakeCertificateAuthority("x", absl::Hours(1));
  absl::StatusOr<auth::TlsKeyPair> mine = auth::MakeCertificateAuthority("y", absl::Hours(1));
  ASSERT_THAT(other, IsOk());
  ASSERT_THAT(mine, IsOk());
  struct Case {
    const char* name;
    Json data;
  };
  auto data = [](const std::string& cert, const std::string& key) {
    Json d = Json::object();
    d["ca.crt"] = Json::string(absl::Base64Escape(cert));
    d["ca.key"] = Json::string(absl::Base64Escape(key));
    return d;
  };
  const std::vector<Case> cases = {
      {"no data", Json::object()},
      {"garbage", data("garbage", "garbage")},
      {"not base64", Json::parse(R"({"ca.crt":"%%%","ca.key":"%%%"})")},
      {"a key that is not the certificate's", data(mine->cert_pem, other->key_pem)},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string name = "ca-" + std::to_string(n++);
    Json secret = Json::object();
    secret["metadata"] = Json::object();
    secret["metadata"]["name"] = Json::string(name);
    secret["data"] = c.data;
    ASSERT_THAT(store_.Create(kube::kSecrets.Qualified(), "ns", secret).status(), IsOk());
    absl::StatusOr<auth::TlsKeyPair> loaded = LoadOrCreateOperatorCa(client_, "ns", name);
    EXPECT_THAT(loaded.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(loaded.status().message(), HasSubstr("delete it"));
    EXPECT_THAT(loaded.status().message(), HasSubstr("ns/" + name));
  }
}

TEST_F(OperatorCaTest, ApiErrorsAreReturnedForTheCallerToRetry) {
  client_.FailNext(1, absl::UnavailableError("429"));
  EXPECT_THAT(LoadOrCreateOperatorCa(client_, "ns", "ca").status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(LoadOrCreateOperatorCa(client_, "ns", "ca"), IsOk());
}

}  // namespace
}  // namespace phalanx::op
