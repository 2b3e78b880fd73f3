// The per-job series (phalanx_operator_job_*): SampleJob reads them from a job's status, and
// OperatorMetrics::SetJobs keeps one set per job, moves the phase series with the phase and drops
// a deleted job's series.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "operator/api/codec.h"
#include "operator/controller/job_sample.h"
#include "operator/controller/metrics.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace phalanx::op {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

kube::Json Job(const std::string& ns, const std::string& name, const TrainingJobStatus& status) {
  kube::Json job = kube::Json::object();
  job["metadata"]["namespace"] = kube::Json::string(ns);
  job["metadata"]["name"] = kube::Json::string(name);
  job["status"] = EncodeStatus(status);
  return job;
}

TEST(SampleJob, ReadsPhaseCountersAndLostTimeByCause) {
  TrainingJobStatus status;
  status.phase = kPhaseRunning;
  status.restarts = 3;
  status.rank_restarts = 4;
  status.preemptions = 2;
  status.coordinator.restarts = 1;
  status.productive_seconds = 100;
  status.lost_seconds = 30;
  status.goodput.detection_seconds = 4;
  status.goodput.coordinator_outage_seconds = 5;
  status.goodput.rolled_back_seconds = 6;
  status.goodput.regroup_seconds = 2;
  status.goodput.before_first_step_seconds = 9;
  status.conditions.push_back({.type = "Unschedulable", .status = "True"});
  const JobSample s = SampleJob(Job("ml", "llm", status));
  EXPECT_EQ(s.ns, "ml");
  EXPECT_EQ(s.name, "llm");
  EXPECT_EQ(s.phase, "Running");
  EXPECT_TRUE(s.unschedulable);
  EXPECT_EQ(s.restarts, 3);
  EXPECT_EQ(s.rank_restarts, 4);
  EXPECT_EQ(s.preemptions, 2);
  EXPECT_EQ(s.coordinator_restarts, 1);
  EXPECT_DOUBLE_EQ(s.productive_seconds, 100);
  EXPECT_DOUBLE_EQ(s.lost_seconds.at(kLostDetection), 4);
  EXPECT_DOUBLE_EQ(s.lost_seconds.at(kLostCoordinatorOutage), 5);
  EXPECT_DOUBLE_EQ(s.lost_seconds.at(kLostRolledBack), 6);
  EXPECT_DOUBLE_EQ(s.lost_seconds.at(kLostRegroup), 2);
  // The rest of lostSeconds: the phases' own loss (Restarting, Starting after a run).
  EXPECT_DOUBLE_EQ(s.lost_seconds.at(kLostRecovery), 13);
  EXPECT_DOUBLE_EQ(s.before_first_step_seconds, 9);
}

TEST(SampleJob, AJobWithoutStatusIsPendingWithNothingBooked) {
  kube::Json job = kube::Json::object();
  job["metadata"]["namespace"] = kube::Json::string("default");
  job["metadata"]["name"] = kube::Json::string("new");
  const JobSample s = SampleJob(job);
  EXPECT_EQ(s.phase, "Pending");
  EXPECT_FALSE(s.unschedulable);
  EXPECT_EQ(s.lost_seconds.size(), 5u);
  EXPECT_EQ(s.before_first_step_seconds, 0);
  for (const auto& [cause, seconds] : s.lost_seconds) EXPECT_EQ(seconds, 0) << cause;
}

TEST(SampleJob, LostPartsLargerThanTheTotalLeaveNoNegativeRecovery) {
  TrainingJobStatus status;
  status.lost_seconds = 1;
  status.goodput.detection_seconds = 3;  // a hand-edited status
  EXPECT_DOUBLE_EQ(SampleJob(Job("a", "b", status)).lost_seconds.at(kLostRecovery), 0);
}

std::string Exposition(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

JobSample Sample(const std::string& name, const std::string& phase) {
  TrainingJobStatus status;
  status.phase = phase;
  status.restarts = 1;
  status.productive_seconds = 7;
  return SampleJob(Job("ml", name, status));
}

TEST(OperatorMetricsJobs, EachJobHasItsSeriesAndOnePhase) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  metrics.SetJobs({Sample("a", "Running"), Sample("b", "Failed")});
  const std::string text = Exposition(registry);
  EXPECT_THAT(
      text,
      HasSubstr(R"(phalanx_operator_job_phase{namespace="ml",phase="Running",trainingjob="a"} 1)"));
  EXPECT_THAT(
      text,
      HasSubstr(R"(phalanx_operator_job_phase{namespace="ml",phase="Failed",trainingjob="b"} 1)"));
  EXPECT_THAT(text,
              HasSubstr(R"(phalanx_operator_job_restarts{namespace="ml",trainingjob="a"} 1)"));
  EXPECT_THAT(
      text,
      HasSubstr(R"(phalanx_operator_job_productive_seconds{namespace="ml",trainingjob="b"} 7)"));
  EXPECT_THAT(text,
              HasSubstr(R"(phalanx_operator_job_unschedulable{namespace="ml",trainingjob="a"} 0)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(phalanx_operator_job_lost_seconds{cause="recovery",namespace="ml",trainingjob="a"} 0)"));
  // The cluster-wide gauges come from the same sample.
  EXPECT_THAT(text, HasSubstr(R"(phalanx_operator_jobs{phase="Running"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(phalanx_operator_jobs{phase="Failed"} 1)"));
  EXPECT_THAT(text, HasSubstr("phalanx_operator_jobs_unschedulable 0"));
}

// Found by a real Prometheus on the installed chart: the dashboard's per-phase stats (and any
// alert on a phase) read "no data" until some job had been in that phase.
TEST(OperatorMetricsJobs, EveryPhaseAndKnownReasonIsASeriesFromTheStart) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  const std::string text = Exposition(registry);
  for (const char* phase : {"Pending", "Starting", "Running", "Restarting", "Blocked", "Suspended",
                            "Succeeded", "Failed"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("phalanx_operator_jobs{phase=\"", phase, "\"} 0")));
  }
  // A counter by reason born at 1 hides its first event from increase(): the known reasons
  // start at 0.
  for (const char* reason : {"NodePreempted", "DisruptionTarget", "Evicted"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("phalanx_operator_preemptions_total{reason=\"", reason,
                                             "\"} 0")));
  }
  for (const char* reason : {"Error", "OOMKilled", "CoordinatorDeclaredFailed", "PodDeleted"}) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("phalanx_operator_task_restarts_total{reason=\"",
                                             reason, "\"} 0")));
  }
}

TEST(OperatorMetricsJobs, APhaseChangeMovesTheSeriesAndADeletedJobLosesAll) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  metrics.SetJobs({Sample("a", "Running"), Sample("b", "Running")});
  metrics.SetJobs({Sample("a", "Failed")});  // b deleted
  const std::string text = Exposition(registry);
  EXPECT_THAT(
      text,
      HasSubstr(R"(phalanx_operator_job_phase{namespace="ml",phase="Failed",trainingjob="a"} 1)"));
  EXPECT_THAT(text, Not(HasSubstr(R"(phase="Running",trainingjob="a")")));
  EXPECT_THAT(text, Not(HasSubstr(R"(trainingjob="b")")));
  EXPECT_THAT(text, HasSubstr(R"(phalanx_operator_jobs{phase="Running"} 0)"));
  EXPECT_THAT(text, HasSubstr(R"(phalanx_operator_jobs{phase="Failed"} 1)"));
  // Thirteen series for the one job left: phase, unschedulable, productive, before the first
  // step, five lost causes, restarts, rank restarts, preemptions, coordinator restarts.
  size_t series = 0;
  for (size_t at = text.find("trainingjob=\"a\""); at != std::string::npos;
       at = text.find("trainingjob=\"a\"", at + 1)) {
    ++series;
  }
  EXPECT_EQ(series, 13u);
}

// A job sampled again unchanged keeps its series as they are; one that leaves and comes back
// gets them again.
TEST(OperatorMetricsJobs, AnUnchangedJobKeepsItsSeries_AReturningOneGetsThemBack) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  const std::string phase =
      R"(phalanx_operator_job_phase{namespace="ml",phase="Running",trainingjob="a"} 1)";
  metrics.SetJobs({Sample("a", "Running")});
  metrics.SetJobs({Sample("a", "Running")});
  EXPECT_THAT(Exposition(registry), HasSubstr(phase));
  metrics.SetJobs({});
  EXPECT_THAT(Exposition(registry), Not(HasSubstr(R"(trainingjob="a")")));
  metrics.SetJobs({Sample("a", "Running")});
  EXPECT_THAT(Exposition(registry), HasSubstr(phase));
}

// The last recovery's length is a series once the job has had one.
TEST(OperatorMetricsJobs, TheLastRecoveryIsASeriesOnceThereWasOne) {
  prometheus::Registry registry;
  OperatorMetrics metrics(registry);
  JobSample sample = Sample("a", "Running");
  metrics.SetJobs({sample});
  EXPECT_THAT(Exposition(registry), Not(HasSubstr("phalanx_operator_job_last_recovery_seconds{")));
  sample.last_recovery_seconds = 2.5;
  metrics.SetJobs({sample});
  EXPECT_THAT(
      Exposition(registry),
      HasSubstr(
          R"(phalanx_operator_job_last_recovery_seconds{namespace="ml",trainingjob="a"} 2.5)"));
  metrics.SetJobs({});
  EXPECT_THAT(Exposition(registry), Not(HasSubstr("trainingjob=\"a\"")));
}

// The sampler decodes a job again only when its resourceVersion changed, and drops the jobs it
// was not given since the last Take (deleted).
TEST(JobSampleCache, DecodesAJobAgainOnlyWhenItChanged) {
  TrainingJobStatus status;
  status.phase = kPhaseRunning;
  status.restarts = 1;
  kube::Json a = Job("ml", "a", status);
  a["metadata"]["resourceVersion"] = kube::Json::string("7");
  const kube::Json b = Job("ml", "b", status);
  JobSampleCache cache;
  cache.Add(a);
  cache.Add(b);
  std::vector<JobSample> got = cache.Take();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].restarts, 1);
  // Same resourceVersion, other content (which a real object cannot have): the cached sample.
  status.restarts = 2;
  kube::Json same_version = Job("ml", "a", status);
  same_version["metadata"]["resourceVersion"] = kube::Json::string("7");
  cache.Add(same_version);
  got = cache.Take();
  ASSERT_EQ(got.size(), 1u) << "b was not added this round: deleted";
  EXPECT_EQ(got[0].name, "a");
  EXPECT_EQ(got[0].restarts, 1);
  same_version["metadata"]["resourceVersion"] = kube::Json::string("8");
  cache.Add(same_version);
  got = cache.Take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].restarts, 2);
}

}  // namespace
}  // namespace phalanx::op
