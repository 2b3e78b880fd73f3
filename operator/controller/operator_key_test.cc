#include "operator/controller/operator_key.h"

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

TEST(OperatorKey, FirstStartCreatesTheKeyAndEveryLaterStartReadsTheSame) {
  testing::FakeClock clock;
  kube::fake::ObjectStore store(clock, 1000);
  kube::fake::FakeClient client(store);
  absl::StatusOr<std::string> first = LoadOrCreateOperatorKey(client, "phalanx-system", "k");
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(first->size(), 64u);
  absl::StatusOr<std::string> again = LoadOrCreateOperatorKey(client, "phalanx-system", "k");
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(*again, *first);
}

TEST(OperatorKey, TheSecretItCreates_IsOwnedByWhatTheCallerNames) {
  testing::FakeClock clock;
  kube::fake::ObjectStore store(clock, 1000);
  kube::fake::FakeClient client(store);
  ASSERT_THAT(LoadOrCreateOperatorKey(
                  client, "phalanx-system", "k",
                  {{.api_version = "v1", .kind = "ServiceAccount", .name = "op", .uid = "u-2"}}),
              IsOk());
  absl::StatusOr<Json> secret = client.Get(kube::kSecrets, "phalanx-system", "k");
  ASSERT_THAT(secret, IsOk());
  const std::vector<kube::OwnerReference> owners = kube::OwnerReferencesOf(*secret);
  ASSERT_EQ(owners.size(), 1u);
  EXPECT_EQ(owners[0].name, "op");
  EXPECT_EQ(owners[0].uid, "u-2");
}

TEST(OperatorKey, ASecretWithoutAUsableKeyIsRefused) {
  testing::FakeClock clock;
  kube::fake::ObjectStore store(clock, 1000);
  kube::fake::FakeClient client(store);
  ASSERT_THAT(store
                  .Create(kube::kSecrets.Qualified(), "ns",
                          Json::parse(R"({"metadata":{"name":"k"},"data":{"key":"c2hvcnQ="}})"))
                  .status(),
              IsOk());
  EXPECT_THAT(LoadOrCreateOperatorKey(client, "ns", "k").status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// The agents' key is written where the DaemonSet mounts it, kept when it is right, and replaced
// when it is not (the operator key changed); the operator key itself never goes there.
TEST(AgentCliqueKeySecret, IsCreatedKeptAndCorrected) {
  testing::FakeClock clock;
  kube::fake::ObjectStore store(clock, 1000);
  kube::fake::FakeClient client(store);
  auto held = [&]() -> std::string {
    absl::StatusOr<Json> secret = client.Get(kube::kSecrets, "phalanx-system", "agent");
    if (!secret.ok()) return "<" + std::string(secret.status().message()) + ">";
    std::string key;
    absl::Base64Unescape(secret->at("data").at("key").as_string(), &key);
    return key;
  };
  ASSERT_THAT(EnsureAgentCliqueKeySecret(client, "phalanx-system", "agent", "agent-key-1"), IsOk());
  EXPECT_EQ(held(), "agent-key-1");
  const std::string version =
      kube::MetaString(*client.Get(kube::kSecrets, "phalanx-system", "agent"), "resourceVersion");
  ASSERT_THAT(EnsureAgentCliqueKeySecret(client, "phalanx-system", "agent", "agent-key-1"), IsOk());
  EXPECT_EQ(
      kube::MetaString(*client.Get(kube::kSecrets, "phalanx-system", "agent"), "resourceVersion"),
      version)
      << "an unchanged key is not rewritten";
  ASSERT_THAT(EnsureAgentCliqueKeySecret(client, "phalanx-system", "agent", "agent-key-2"), IsOk());
  EXPECT_EQ(held(), "agent-key-2");
}

}  // namespace
}  // namespace phalanx::op
