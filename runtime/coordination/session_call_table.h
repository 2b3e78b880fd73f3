// The calls that may ride a task's session instead of a unary RPC (docs/coordination.md "Calls
// on the session"): one table for the server (RpcHandler's names for metrics), the client (which
// of its calls it sends on the session) and the docs, each checked against it by
// session_call_table_test.cc, which also checks it against coordination.proto's SessionCall
// oneof and the Coordination service. Adding a session call starts here.
#pragma once

#include <string_view>

#include "runtime/proto/coordination.pb.h"

namespace phalanx::coord {

namespace pb = ::phalanx::coord::v1;

struct SessionCallEntry {
  pb::SessionCall::CallCase call;  // the SessionCall oneof case
  std::string_view rpc;            // the unary RPC it stands for ("Barrier")
  std::string_view metric;         // its `method` label when on the session ("Session.Barrier")
};

inline constexpr SessionCallEntry kSessionCalls[] = {
    {pb::SessionCall::kBarrier, "Barrier", "Session.Barrier"},
    {pb::SessionCall::kKvInsert, "KeyValueInsert", "Session.KeyValueInsert"},
    {pb::SessionCall::kKvGet, "KeyValueGet", "Session.KeyValueGet"},
    {pb::SessionCall::kKvAdd, "KeyValueAdd", "Session.KeyValueAdd"},
    {pb::SessionCall::kKvTryGet, "KeyValueTryGet", "Session.KeyValueTryGet"},
    {pb::SessionCall::kKvCompareAndSet, "KeyValueCompareAndSet", "Session.KeyValueCompareAndSet"},
    {pb::SessionCall::kKvDelete, "KeyValueDelete", "Session.KeyValueDelete"},
};

// The table's entry for `call`, or nullptr (an unknown call: "Session.Unknown").
constexpr const SessionCallEntry* FindSessionCall(pb::SessionCall::CallCase call) {
  for (const SessionCallEntry& e : kSessionCalls) {
    if (e.call == call) return &e;
  }
  return nullptr;
}

}  // namespace phalanx::coord
