#include "operator/controller/own_status_writes.h"

#include "gtest/gtest.h"

namespace phalanx::op {
namespace {

TEST(OwnStatusWrites, ACacheHoldingAReplacedVersionLags_UntilItShowsAnother) {
  OwnStatusWrites writes;
  EXPECT_FALSE(writes.CacheLags("ns/j", "10")) << "no write yet";
  // A pass wrote twice: from 10 (to 11), then from 11 (to 12).
  writes.Wrote("ns/j", "10");
  writes.Wrote("ns/j", "11");
  EXPECT_TRUE(writes.CacheLags("ns/j", "10"));
  EXPECT_TRUE(writes.CacheLags("ns/j", "11"));
  EXPECT_FALSE(writes.CacheLags("ns/k", "10")) << "another job";
  // The cache caught up: the entry is forgotten, so an old version no longer counts (a
  // resourceVersion is opaque: only the ones replaced since the last catch-up are known).
  EXPECT_FALSE(writes.CacheLags("ns/j", "12"));
  EXPECT_FALSE(writes.CacheLags("ns/j", "10"));
}

TEST(OwnStatusWrites, AForgottenJobNeverLags) {
  OwnStatusWrites writes;
  writes.Wrote("ns/j", "10");
  writes.Forget("ns/j");
  EXPECT_FALSE(writes.CacheLags("ns/j", "10"));
}

}  // namespace
}  // namespace phalanx::op
