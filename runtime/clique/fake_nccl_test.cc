#include "runtime/clique/fake_nccl.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::clique {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;

TEST(FakeNcclTest, CommsOfOneId_ConnectOnlyOnceEveryRankJoined) {
  FakeNccl nccl;
  NcclUniqueId id = *nccl.GetUniqueId();
  CommHandle a = *nccl.CommInitRank(2, id, 0, kCurrentCudaDevice);
  EXPECT_EQ(*nccl.CommGetAsyncError(a), CommProgress::kInProgress);
  EXPECT_THAT(nccl.CommInitRank(2, id, 0, 0), StatusIs(absl::StatusCode::kInvalidArgument));
  CommHandle b = *nccl.CommInitRank(2, id, 1, 3);
  EXPECT_EQ(*nccl.CommGetAsyncError(a), CommProgress::kReady);
  EXPECT_EQ(nccl.Info(b)->cuda_device, 3);
  ASSERT_THAT(nccl.CommDestroy(a), IsOk());
  EXPECT_THAT(nccl.CommGetAsyncError(a), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(nccl.live_comms(), 1);
}

TEST(FakeNcclTest, Shrink_ChildConnectsWhenEverySurvivorShrank_AndRanksCloseTheGap) {
  FakeNccl nccl;
  NcclUniqueId id = *nccl.GetUniqueId();
  CommHandle c[3];
  for (int r = 0; r < 3; ++r) c[r] = *nccl.CommInitRank(3, id, r, kCurrentCudaDevice);
  ASSERT_THAT(nccl.CommRevoke(c[0]), IsOk());
  EXPECT_EQ(*nccl.CommGetAsyncError(c[0]), CommProgress::kInProgress);
  EXPECT_EQ(*nccl.CommGetAsyncError(c[0]), CommProgress::kReady);
  CommHandle s0 = *nccl.CommShrink(c[0], {1}, false);
  EXPECT_EQ(*nccl.CommGetAsyncError(s0), CommProgress::kInProgress);
  CommHandle s2 = *nccl.CommShrink(c[2], {1}, true);
  EXPECT_EQ(*nccl.CommGetAsyncError(s0), CommProgress::kReady);
  EXPECT_EQ(nccl.Info(s2)->rank, 1);
  EXPECT_EQ(nccl.Info(s2)->nranks, 2);
  EXPECT_THAT(nccl.CommShrink(c[2], {2}, true), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(nccl.counts().shrinks, 2);
}

TEST(FakeNcclTest, WithoutRevokeOrShrink_TheyAreUnimplemented) {
  FakeNccl nccl({.supports_revoke = false, .supports_shrink = false});
  NcclUniqueId id = *nccl.GetUniqueId();
  CommHandle c = *nccl.CommInitRank(1, id, 0, kCurrentCudaDevice);
  EXPECT_THAT(nccl.CommRevoke(c), StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(nccl.CommShrink(c, {}, false), StatusIs(absl::StatusCode::kUnimplemented));
}

}  // namespace
}  // namespace phalanx::clique
