// The session-call table against everything that lists the same calls: coordination.proto's
// SessionCall oneof (each case has an entry), the Coordination service (each entry's RPC takes
// the oneof field's message), the server's metric names, and docs/coordination.md.
#include "runtime/coordination/session_call_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "runtime/coordination/rpc_handler.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::coord {
namespace {

TEST(SessionCallTableTest, EveryOneofCaseHasAnEntryWhoseRpcTakesItsMessage) {
  const google::protobuf::OneofDescriptor* oneof =
      pb::SessionCall::descriptor()->FindOneofByName("call");
  ASSERT_NE(oneof, nullptr);
  const google::protobuf::ServiceDescriptor* service =
      pb::SessionCall::descriptor()->file()->FindServiceByName("Coordination");
  ASSERT_NE(service, nullptr);
  ASSERT_EQ(static_cast<size_t>(oneof->field_count()), std::size(kSessionCalls));
  for (int i = 0; i < oneof->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = oneof->field(i);
    SCOPED_TRACE(field->name());
    const SessionCallEntry* entry =
        FindSessionCall(static_cast<pb::SessionCall::CallCase>(field->number()));
    ASSERT_NE(entry, nullptr) << "a SessionCall case without a table entry";
    const google::protobuf::MethodDescriptor* rpc =
        service->FindMethodByName(std::string(entry->rpc));
    ASSERT_NE(rpc, nullptr) << entry->rpc << " is not a Coordination RPC";
    EXPECT_EQ(rpc->input_type(), field->message_type());
    EXPECT_EQ(entry->metric, "Session." + std::string(entry->rpc));
    pb::SessionCall call;
    call.GetReflection()->MutableMessage(&call, field);
    EXPECT_EQ(RpcHandler::SessionCallName(call), entry->metric);
  }
  EXPECT_STREQ(RpcHandler::SessionCallName(pb::SessionCall()), "Session.Unknown");
}

TEST(SessionCallTableTest, TheDocsNameEveryCallAndItsMetric) {
  std::ifstream in(PHALANX_SOURCE_DIR "/docs/coordination.md");
  ASSERT_TRUE(in) << "docs/coordination.md not found";
  std::stringstream text;
  text << in.rdbuf();
  for (const SessionCallEntry& e : kSessionCalls) {
    EXPECT_THAT(text.str(), ::testing::HasSubstr("`" + std::string(e.rpc) + "`"));
    EXPECT_THAT(text.str(), ::testing::HasSubstr("`" + std::string(e.metric) + "`"));
  }
}

}  // namespace
}  // namespace phalanx::coord
