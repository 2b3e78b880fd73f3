// Table test of when a container's waiting reason fails its task (waiting_failure.h).
#include "operator/controller/waiting_failure.h"

#include <gtest/gtest.h>

#include <string>

namespace phalanx::op {
namespace {

const absl::Time kCreated = absl::FromUnixSeconds(1'800'000'000);

TEST(JudgeWaiting, Table) {
  const absl::Time bound = kCreated + kStuckWaitingBound;
  struct Case {
    std::string name;
    std::string reason;
    absl::Duration age;  // now - created
    bool want_failed;
    absl::Time want_fails_at;
  } cases[] = {
      {"invalidImageNameAtOnce", "InvalidImageName", absl::ZeroDuration(), true, kCreated},
      {"pullErrorWithinTheBound", "ErrImagePull", absl::Minutes(4), false, bound},
      {"pullBackOffAtTheBound", "ImagePullBackOff", kStuckWaitingBound, true, bound},
      {"configErrorWithinTheBound", "CreateContainerConfigError", absl::Seconds(1), false, bound},
      {"configErrorPastTheBound", "CreateContainerConfigError", absl::Minutes(9), true, bound},
      {"containerCreatingNever", "ContainerCreating", absl::Hours(5), false,
       absl::InfiniteFuture()},
      {"crashLoopBackOffNever", "CrashLoopBackOff", absl::Hours(5), false, absl::InfiniteFuture()},
      {"notWaiting", "", absl::Hours(5), false, absl::InfiniteFuture()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PodView pod;
    pod.waiting_reason = c.reason;
    pod.created = kCreated;
    const WaitingVerdict v = JudgeWaiting(pod, kCreated + c.age);
    EXPECT_EQ(v.failed, c.want_failed);
    EXPECT_EQ(v.fails_at, c.want_fails_at);
  }
}

TEST(JudgeWaiting, UnknownCreationTime_NeverFailsAPull) {
  PodView pod;
  pod.waiting_reason = "ErrImagePull";
  EXPECT_FALSE(JudgeWaiting(pod, kCreated + absl::Hours(10)).failed);
}

TEST(WaitingFailure, CarriesTheWaitingReasonAndMessage) {
  PodView pod;
  pod.name = "j-task-0-0";
  pod.waiting_reason = "InvalidImageName";
  pod.waiting_message = "couldn't parse image reference \"Bad Image\"";
  const PodView f = WaitingFailure(pod);
  EXPECT_EQ(f.reason, "InvalidImageName");
  EXPECT_EQ(f.message, pod.waiting_message);
  EXPECT_EQ(f.exit_code, std::nullopt);
}

TEST(ViewOfPod, ReadsTheWaitingStateAndCreationTime) {
  const PodView v = ViewOfPod(Json::parse(R"({"metadata":{"name":"j-task-0-0",
      "creationTimestamp":"2027-01-15T08:00:00Z"},"status":{"phase":"Pending",
      "containerStatuses":[{"name":"main","state":{"waiting":{"reason":"InvalidImageName",
      "message":"couldn't parse image reference \"Bad\""}}}]}})"));
  EXPECT_EQ(v.waiting_reason, "InvalidImageName");
  EXPECT_EQ(v.waiting_message, "couldn't parse image reference \"Bad\"");
  EXPECT_EQ(v.created, kCreated);
  EXPECT_EQ(v.exit_code, std::nullopt);
}

}  // namespace
}  // namespace phalanx::op
