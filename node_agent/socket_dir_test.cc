#include "node_agent/socket_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::agent {
namespace {

using ::phalanx::testing::IsOk;
using ::testing::HasSubstr;

class SocketDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        std::filesystem::temp_directory_path() / ("phalanx-socket-dir-" + std::to_string(getpid()));
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::filesystem::path root_;
};

TEST_F(SocketDirTest, ParsesUidColonGid_RefusesAnythingElse) {
  absl::StatusOr<SocketDirOwner> owner = ParseSocketDirOwner("65532:100");
  ASSERT_THAT(owner, IsOk());
  EXPECT_EQ(owner->uid, 65532u);
  EXPECT_EQ(owner->gid, 100u);
  for (const char* bad : {"", "65532", "a:b", "1:2:3", "-1:0", "65532:"}) {
    EXPECT_FALSE(ParseSocketDirOwner(bad).ok()) << bad;
  }
}

TEST_F(SocketDirTest, AHostFolderMadeByTheKubelet_IsHandedToTheAgentsUser) {
  // As the kubelet's DirectoryOrCreate leaves it: mode 0755.
  const std::string dir = (root_ / "phalanx").string();
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  // Root (the init container) hands it to 65532; as another user, to that user itself.
  const SocketDirOwner owner =
      geteuid() == 0 ? SocketDirOwner{65532, 65532} : SocketDirOwner{geteuid(), getegid()};
  ASSERT_THAT(PrepareSocketDir(dir, owner), IsOk());
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(st.st_uid, owner.uid);
  EXPECT_EQ(st.st_gid, owner.gid);
  // Idempotent: a restarted pod runs it again.
  EXPECT_THAT(PrepareSocketDir(dir, owner), IsOk());
}

TEST_F(SocketDirTest, AMissingFolderIsCreated_ALinkInItsPlaceIsRefused) {
  const SocketDirOwner me{geteuid(), getegid()};
  const std::string fresh = (root_ / "fresh").string();
  ASSERT_THAT(PrepareSocketDir(fresh, me), IsOk());
  EXPECT_TRUE(std::filesystem::is_directory(fresh));

  const std::string target = (root_ / "target").string();
  ASSERT_EQ(mkdir(target.c_str(), 0755), 0);
  const std::string link = (root_ / "link").string();
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  absl::Status s = PrepareSocketDir(link, me);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("is not a folder"));
  struct stat st {};
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);  // the link's target was left alone
}

}  // namespace
}  // namespace phalanx::agent
