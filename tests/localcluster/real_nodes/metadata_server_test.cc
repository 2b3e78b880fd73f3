// The real nodes' metadata server, read by the node agent's own GCE notice source: what
// `preempt-node` turns on is what an agent configured with `gce` sees.
#include "tests/localcluster/real_nodes/metadata_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "node_agent/preemption/gce_metadata_source.h"

namespace phalanx::localcluster {
namespace {

TEST(NodeMetadataServerTest, TheAgentsGceSourceSeesPreemptionOnlyAfterItIsSet) {
  absl::StatusOr<std::unique_ptr<NodeMetadataServer>> server =
      NodeMetadataServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  agent::GceMetadataOptions options;
  options.base_url = (*server)->url();
  absl::StatusOr<std::unique_ptr<agent::GceMetadataSource>> source =
      agent::GceMetadataSource::Create(options);
  ASSERT_TRUE(source.ok()) << source.status();

  absl::StatusOr<std::optional<agent::NodeNotice>> before = (*source)->Poll(absl::Now());
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_FALSE(before->has_value()) << "FALSE and NONE are no notice";

  (*server)->SetPreempted(true);
  absl::StatusOr<std::optional<agent::NodeNotice>> after = (*source)->Poll(absl::Now());
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_TRUE(after->has_value());
  EXPECT_EQ((*after)->kind, "preemption");
  EXPECT_EQ((*after)->source, "gce-metadata");
}

TEST(NodeMetadataServerTest, AnAddressThatCannotBeBoundIsAnError) {
  absl::StatusOr<std::unique_ptr<NodeMetadataServer>> server =
      NodeMetadataServer::Start("192.0.2.1", 0);  // TEST-NET-1: no interface has it
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable) << server.status();
}

}  // namespace
}  // namespace phalanx::localcluster
