// Splitting, listening and dialing by address text, with real sockets on loopback.
#include "common/base/tcp_dial.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace phalanx::base {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;

TEST(TcpDialTest, SplitsEveryFormAndSaysWhatIsWrong) {
  EXPECT_THAT(*SplitHostPort("10.0.0.7:8470", "x"), Pair("10.0.0.7", "8470"));
  EXPECT_THAT(*SplitHostPort("[::1]:8470", "x"), Pair("::1", "8470"));
  EXPECT_THAT(*SplitHostPort("coord.ns.svc:8470", "x"), Pair("coord.ns.svc", "8470"));
  EXPECT_THAT(*SplitHostPort(":8470", "x"), Pair("", "8470"));
  for (const char* bad : {"", "8470", "host:"}) {
    absl::StatusOr<std::pair<std::string, std::string>> split =
        SplitHostPort(bad, "coordinator address");
    ASSERT_FALSE(split.ok()) << bad;
    EXPECT_THAT(split.status().message(), HasSubstr("coordinator address")) << bad;
  }
}

TEST(TcpDialTest, ListensDialsByNumberAndByNameAndRefusesWhatIsNotThere) {
  int port = 0;
  absl::StatusOr<int> listener = ListenTcp("127.0.0.1:0", &port);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_GT(port, 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (const std::string& address :
       {absl::StrCat("127.0.0.1:", port), absl::StrCat("localhost:", port)}) {
    absl::StatusOr<int> dialed = DialTcp(address, deadline, "coordinator");  // /etc/hosts
    ASSERT_TRUE(dialed.ok()) << address << ": " << dialed.status();
    close(*dialed);
  }
  close(*listener);
  // Nothing listens there any more.
  absl::StatusOr<int> refused = DialTcp(absl::StrCat("127.0.0.1:", port), deadline, "coordinator");
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("cannot connect to the coordinator at"));
  EXPECT_TRUE(absl::IsInvalidArgument(DialTcp(":1", deadline, "coordinator").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ListenTcp("nonsense", &port).status()));
}

}  // namespace
}  // namespace phalanx::base
