#include "runtime/clique/coordination_unique_id_exchange.h"

#include <map>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::clique {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

// A CoordinationClient with an in-memory KV store; every other call is Unimplemented.
class KvOnlyClient final : public client::CoordinationClient {
 public:
  std::map<std::string, std::string> kv;
  absl::Duration last_get_timeout = absl::ZeroDuration();

  absl::Status KvInsert(const std::string& key, const std::string& value,
                        bool allow_overwrite) override {
    if (!allow_overwrite && kv.contains(key)) return absl::AlreadyExistsError(key);
    kv[key] = value;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> KvGet(const std::string& key, absl::Duration timeout) override {
    last_get_timeout = timeout;
    if (!kv.contains(key)) return absl::DeadlineExceededError(key);
    return kv[key];
  }
  absl::StatusOr<std::string> KvTryGet(const std::string& key) override {
    if (!kv.contains(key)) return absl::NotFoundError(key);
    return kv[key];
  }

  client::TaskRef task() const override { return {}; }
  int num_tasks() const override { return 1; }
  absl::Status Connect(absl::Duration) override { return Unimplemented(); }
  absl::Status WaitUntilConnected(absl::Duration) override { return Unimplemented(); }
  bool connected() const override { return true; }
  absl::Status Barrier(const std::string&, absl::Duration, const std::vector<int>&) override {
    return Unimplemented();
  }
  void BarrierAsync(const std::string&, absl::Duration, const std::vector<int>&,
                    absl::AnyInvocable<void(absl::Status) &&> done) override {
    std::move(done)(Unimplemented());
  }
  absl::Status CancelBarrier(const std::string&) override { return Unimplemented(); }
  void CancelBarrierAsync(const std::string&,
                          absl::AnyInvocable<void(absl::Status) &&> done) override {
    std::move(done)(Unimplemented());
  }
  void KvInsertAsync(const std::string&, const std::string&, bool,
                     absl::AnyInvocable<void(absl::Status) &&> done) override {
    std::move(done)(Unimplemented());
  }
  void KvGetAsync(const std::string&, absl::Duration,
                  absl::AnyInvocable<void(absl::StatusOr<std::string>) &&> done) override {
    std::move(done)(Unimplemented());
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> KvGetDir(
      const std::string&) override {
    return Unimplemented();
  }
  absl::StatusOr<int> KvDelete(const std::string&) override { return Unimplemented(); }
  absl::Status ReportError(const std::string&) override { return Unimplemented(); }
  absl::StatusOr<client::JobSnapshot> WatchJobState(uint64_t, absl::Duration) override {
    return Unimplemented();
  }
  absl::StatusOr<std::vector<client::TaskRef>> GetAliveTasks(const std::vector<int>&,
                                                             absl::Duration) override {
    return Unimplemented();
  }
  absl::StatusOr<client::PreemptionRound> NotifyPreemption(
      const client::PreemptionNotice&) override {
    return Unimplemented();
  }
  absl::StatusOr<bool> ReachedSyncPoint(int64_t) override { return Unimplemented(); }
  absl::Status Shutdown(absl::Duration) override { return Unimplemented(); }

 private:
  static absl::Status Unimplemented() { return absl::UnimplementedError("not in this fake"); }
};

NcclUniqueId Id(char c) {
  NcclUniqueId id;
  id.bytes.fill(c);
  return id;
}

TEST(CoordinationUniqueIdExchangeTest, PublishedId_IsFetchedByteForByte) {
  KvOnlyClient client;
  CoordinationUniqueIdExchange exchange(client);
  EXPECT_THAT(exchange.Fetch("nccl/j/4r-0/id0", absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(exchange.Publish("nccl/j/4r-0/id0", Id('\0')), IsOk());
  auto fetched = exchange.Fetch("nccl/j/4r-0/id0", absl::ZeroDuration());
  ASSERT_THAT(fetched, IsOk());
  EXPECT_EQ(*fetched, Id('\0'));
  ASSERT_THAT(exchange.Fetch("nccl/j/4r-0/id0", absl::Seconds(3)), IsOk());
  EXPECT_EQ(client.last_get_timeout, absl::Seconds(3));
}

TEST(CoordinationUniqueIdExchangeTest, Republishing_TheSameIdIsFine_ADifferentOneIsNot) {
  KvOnlyClient client;
  CoordinationUniqueIdExchange exchange(client);
  ASSERT_THAT(exchange.Publish("k", Id('a')), IsOk());
  EXPECT_THAT(exchange.Publish("k", Id('a')), IsOk());
  EXPECT_THAT(exchange.Publish("k", Id('b')),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("another unique id")));
}

TEST(CoordinationUniqueIdExchangeTest, AValueThatIsNotAnId_IsInvalidArgument) {
  KvOnlyClient client;
  client.kv["k"] = "short";
  CoordinationUniqueIdExchange exchange(client);
  EXPECT_THAT(exchange.Fetch("k", absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("128 bytes, got 5")));
}

}  // namespace
}  // namespace phalanx::clique
