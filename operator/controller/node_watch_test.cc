// NodePreemptionFilter: a node's routine updates wake no job; a taint or cordon coming or going
// does.
#include "operator/controller/node_watch.h"

#include <gtest/gtest.h>

namespace phalanx::op {
namespace {

Json Node(const std::string& name, const std::string& spec) {
  return Json::parse(R"({"metadata":{"name":")" + name + R"("},"spec":)" + spec + "}");
}

TEST(NodePreemptionFilterTest, OnlyPreemptionFlipsCount) {
  NodePreemptionFilter filter;
  const std::string plain = "{}";
  const std::string tainted =
      R"({"taints":[{"key":"cloud.google.com/impending-node-termination","effect":"NoSchedule"}]})";
  EXPECT_FALSE(filter.Changed(Node("a", plain)));   // first seen, healthy
  EXPECT_FALSE(filter.Changed(Node("a", plain)));   // a heartbeat
  EXPECT_TRUE(filter.Changed(Node("a", tainted)));  // the termination notice
  EXPECT_FALSE(filter.Changed(Node("a", tainted)));
  EXPECT_TRUE(filter.Changed(Node("a", plain)));                        // the taint is lifted
  EXPECT_TRUE(filter.Changed(Node("b", R"({"unschedulable":true})")));  // first seen, cordoned
  EXPECT_FALSE(filter.Changed(Node("a", plain)));
}

TEST(NodePreemptionFilterTest, PodsAreIndexedByTheirNode) {
  EXPECT_EQ(PodNodeName(Json::parse(R"({"spec":{"nodeName":"n1"}})")),
            std::vector<std::string>{"n1"});
  EXPECT_TRUE(PodNodeName(Json::parse(R"({"spec":{}})")).empty());
  EXPECT_TRUE(PodNodeName(Json::parse(R"("garbage")")).empty());
}

}  // namespace
}  // namespace phalanx::op
