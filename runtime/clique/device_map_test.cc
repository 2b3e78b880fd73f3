#include "runtime/clique/device_map.h"

#include <fstream>
#include <sstream>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::clique {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(DeviceMapTest, SameReportsInAnyOrder_GiveEveryTaskTheSameTable) {
  std::vector<TaskGpus> reports = {{1, {"GPU-b", "GPU-a"}}, {0, {"GPU-x"}}};
  std::vector<TaskGpus> reversed = {reports[1], reports[0]};
  auto a = BuildDeviceTable(reports);
  auto b = BuildDeviceTable(reversed);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(*a, *b);
  ASSERT_EQ(a->entries.size(), 3u);
  EXPECT_EQ(a->entries[0], (DeviceEntry{0, 0, 0, 0, "GPU-x"}));
  EXPECT_EQ(a->entries[1], (DeviceEntry{1, 0, 1, 1, "GPU-a"}));
  EXPECT_EQ(a->entries[2], (DeviceEntry{1, 1, 2, 0, "GPU-b"}));
}

TEST(DeviceMapTest, LogicalIds_FollowUuidOrder_NotCudaOrdinalOrder) {
  auto one = BuildDeviceTable({{0, {"GPU-2", "GPU-1"}}});
  auto other = BuildDeviceTable({{0, {"GPU-1", "GPU-2"}}});  // CUDA_VISIBLE_DEVICES reversed
  EXPECT_EQ(one->Find(0, 0)->uuid, "GPU-1");
  EXPECT_EQ(other->Find(0, 0)->uuid, "GPU-1");
  EXPECT_EQ(one->Find(0, 0)->cuda_ordinal, 1);
  EXPECT_EQ(other->Find(0, 0)->cuda_ordinal, 0);
}

TEST(DeviceMapTest, TaskRestartedOnOtherGpus_KeepsItsLogicalIds) {
  auto before = BuildDeviceTable({{0, {"GPU-a", "GPU-b"}}, {1, {"GPU-c", "GPU-d"}}});
  auto after = BuildDeviceTable({{0, {"GPU-a", "GPU-b"}}, {1, {"GPU-z", "GPU-y"}}});
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ(before->LogicalIds(1), after->LogicalIds(1));
  EXPECT_THAT(after->LogicalIds(1), ElementsAre(0, 1));
  EXPECT_EQ(after->Find(1, 0)->uuid, "GPU-y");
  EXPECT_EQ(before->Find(0, 1), after->Find(0, 1));  // the untouched task: same entries
  EXPECT_EQ(after->Find(2, 0), std::nullopt);
}

TEST(DeviceMapTest, RejectsInconsistentReports) {
  struct Case {
    const char* name;
    std::vector<TaskGpus> reports;
    const char* error;
  };
  const Case cases[] = {
      {"task twice", {{0, {"a"}}, {0, {"b"}}}, "task 0 reported twice"},
      {"negative task", {{-1, {"a"}}}, "negative task id"},
      {"empty uuid", {{0, {"a", ""}}}, "empty UUID for CUDA ordinal 1"},
      {"gpu in two tasks", {{0, {"a"}}, {3, {"a"}}}, "GPU a reported by task 0 and task 3"},
      {"gpu twice in a task", {{0, {"a", "a"}}}, "GPU a reported by task 0 and task 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_THAT(BuildDeviceTable(c.reports),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.error)));
  }
}

// The cases in testdata/device_tables.txt, which the Python DeviceMap must agree on too.
TEST(DeviceMapTest, SharedCases_GiveTheTablesTheFileSays) {
  std::ifstream in(PHALANX_SOURCE_DIR "/runtime/clique/testdata/device_tables.txt");
  ASSERT_TRUE(in) << "runtime/clique/testdata/device_tables.txt not found";
  std::string line, name, error;
  std::vector<TaskGpus> reports;
  std::vector<DeviceEntry> expected;
  int cases = 0;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string verb;
    words >> verb;
    if (verb == "case") {
      words >> name;
      reports.clear();
      expected.clear();
      error.clear();
    } else if (verb == "report") {
      TaskGpus report;
      words >> report.task_id;
      for (std::string uuid; words >> uuid;) report.uuids.push_back(uuid);
      reports.push_back(report);
    } else if (verb == "expect") {
      DeviceEntry e;
      words >> e.task_id >> e.logical_id >> e.global_index >> e.cuda_ordinal >> e.uuid;
      expected.push_back(e);
    } else if (verb == "error") {
      std::getline(words >> std::ws, error);
    } else if (verb == "end") {
      SCOPED_TRACE(name);
      ++cases;
      absl::StatusOr<DeviceTable> table = BuildDeviceTable(reports);
      if (!error.empty()) {
        EXPECT_THAT(table, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(error)));
      } else {
        ASSERT_THAT(table, IsOk());
        EXPECT_EQ(table->entries, expected);
      }
    }
  }
  EXPECT_GE(cases, 5);
}

}  // namespace
}  // namespace phalanx::clique
