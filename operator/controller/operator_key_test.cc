#include "operator/controller/operator_key.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace phalanx::op
