#include "node_agent/gpu/node_checks.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::agent {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(NodeChecksTest, ParseThpSetting_ReadsTheBracketedValue) {
  struct Case {
    const char* contents;
    const char* value;  // nullptr: malformed
  };
  const Case cases[] = {
      {"[always] madvise never\n", "always"},
      {"always [madvise] never\n", "madvise"},
      {"always madvise [never]", "never"},
      {"  [madvise]  ", "madvise"},
      {"", nullptr},
      {"always madvise never", nullptr},
      {"[always] [madvise] never", nullptr},
      {"[] madvise never", nullptr},
      {"[always madvise never", nullptr},
      {"always] madvise", nullptr},
      {"[always]madvise never", nullptr},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.contents);
    auto value = ParseThpSetting(c.contents);
    if (c.value == nullptr) {
      EXPECT_THAT(value, StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("want one bracketed value")));
    } else {
      ASSERT_THAT(value, IsOk());
      EXPECT_EQ(*value, c.value);
    }
  }
}

class ThpFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& contents) {
    const char* dir = std::getenv("TEST_TMPDIR");
    std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/phalanx_thp_" +
                       ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::ofstream(path) << contents;
    return path;
  }
};

TEST_F(ThpFileTest, CheckTransparentHugePages_FlagsAlwaysOnly) {
  struct Case {
    const char* contents;
    bool ok;
    const char* message;
  };
  const Case cases[] = {
      {"[always] madvise never\n", false, "transparent hugepages is \"always\""},
      {"always [madvise] never\n", true, "transparent hugepages is \"madvise\""},
      {"always madvise [never]\n", true, "transparent hugepages is \"never\""},
      {"garbage\n", true, "not checked: "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.contents);
    CheckResult result = CheckTransparentHugePages(Write(c.contents));
    EXPECT_EQ(result.name, "transparent_hugepages");
    EXPECT_EQ(result.ok, c.ok);
    EXPECT_THAT(result.message, StartsWith(c.message));
  }
}

TEST(NodeChecksTest, CheckTransparentHugePages_MissingFile_IsNotChecked) {
  CheckResult result = CheckTransparentHugePages("/nonexistent/transparent_hugepage/enabled");
  EXPECT_TRUE(result.ok);
  EXPECT_THAT(result.message, StartsWith("not checked: "));
}

TEST(NodeChecksTest, CheckNvidiaDriver_SaysWhatWasFoundOrWhy) {
  GpuInventory inventory{"550.54.15", 12040, "12.4", std::vector<GpuInfo>(8)};
  EXPECT_EQ(CheckNvidiaDriver(absl::OkStatus(), inventory),
            (CheckResult{"nvidia_driver", true, "NVIDIA driver 550.54.15 (CUDA 12.4), 8 GPUs"}));
  EXPECT_EQ(CheckNvidiaDriver(absl::NotFoundError("no NVIDIA driver: cannot load NVML"), {}),
            (CheckResult{"nvidia_driver", false, "no NVIDIA driver: cannot load NVML"}));
  EXPECT_EQ(CheckNvidiaDriver(absl::InternalError("boom"), {}),
            (CheckResult{"nvidia_driver", false, "no NVIDIA driver: boom"}));
}

TEST(NodeChecksTest, ParseCudaVersion_AcceptsMajorMinor) {
  struct Case {
    const char* text;
    int code;  // 0: invalid
  };
  const Case cases[] = {{"12.4", 12040}, {"12", 12000},   {"12.4.1", 12040}, {"11.8", 11080},
                        {"", 0},         {"12.", 0},      {"x", 0},          {"12.x", 0},
                        {"-12.4", 0},    {"12.4.1.2", 0}, {"0.1", 0},        {" 12.4", 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto code = ParseCudaVersion(c.text);
    if (c.code == 0) {
      EXPECT_THAT(code, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("MAJOR.MINOR")));
    } else {
      ASSERT_THAT(code, IsOk());
      EXPECT_EQ(*code, c.code);
    }
  }
}

TEST(NodeChecksTest, CheckCudaCompatibility_NeedsADriverAtLeastAsNew) {
  struct Case {
    const char* name;
    int driver;
    const char* requested;
    bool ok;
    const char* message;
  };
  const Case cases[] = {
      {"same", 12040, "12.4", true, "driver supports CUDA 12.4, the job asks for 12.4"},
      {"newer minor", 12060, "12.4", true, "driver supports CUDA 12.6, the job asks for 12.4"},
      {"newer major", 13000, "12.4", true, "driver supports CUDA 13.0, the job asks for 12.4"},
      {"patch ignored", 12040, "12.4.1", true, "driver supports CUDA 12.4, the job asks for 12.4"},
      {"older minor", 12020, "12.4", false, "driver supports CUDA 12.2 but the job asks for 12.4"},
      {"older major", 11080, "12.0", false, "driver supports CUDA 11.8 but the job asks for 12.0"},
      {"no driver", 0, "12.4", false,
       "the driver's CUDA version is unknown but the job asks "
       "for 12.4"},
      {"bad request", 12040, "twelve", false,
       "CUDA version \"twelve\": want MAJOR.MINOR, e.g. "
       "12.4"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(CheckCudaCompatibility(c.driver, c.requested),
              (CheckResult{"cuda_compatibility", c.ok, c.message}));
  }
}

}  // namespace
}  // namespace phalanx::agent
