// The operator end to end on the local cluster when pods cannot be placed or nodes flap
// (issue 13 part F): a job whose tasks ask for more GPUs than any node has shows
// Unschedulable=True with the scheduler's message (and the operator's gauge counts it, which is
// what the PhalanxJobStuckRestarting alert reads); a preemption taint removed by hand while a
// task is being moved does not move the task again and again.
#include <cstdio>

#include "tests/e2e/operator_e2e_fixture.h"

namespace phalanx::e2e {
namespace {

// Three nodes with 2 GPUs each.
class OperatorSchedulabilityE2eTest : public OperatorE2eTest {
 protected:
  OperatorSchedulabilityE2eTest() {
    nodes_ = 3;
    gpus_per_node_ = 2;
  }

  // The job's condition `type`: {status, message}, or {"", ""}.
  std::pair<std::string, std::string> JobCondition(const std::string& type) {
    const kube::Json job = Job();
    for (const kube::Json& c :
         kube::ArrayOrEmpty(kube::FieldOrNull(job, "status"), "conditions").as_array()) {
      if (kube::StringAt(c, "type") == type) {
        return {kube::StringAt(c, "status"), kube::StringAt(c, "message")};
      }
    }
    return {"", ""};
  }

  int OperatorMetricsPort() {
    for (const std::string& line : operator_->Lines()) {
      const size_t at = line.find("ready metrics=127.0.0.1:");
      if (at != std::string::npos) return std::stoi(line.substr(at + 24));
    }
    return 0;
  }

  // The operator's per-job phase series of the job "train" in phase `phase`, as /metrics has it.
  static std::string JobPhaseSeries(const std::string& phase) {
    return absl::StrCat("\nphalanx_operator_job_phase{namespace=\"default\",phase=\"", phase,
                        "\",trainingjob=\"train\"} 1");
  }

  // What `kubectl ARGS` printed (stdout and stderr), or "" when it failed.
  std::string KubectlOut(const std::string& args) {
    const std::string command =
        absl::StrCat("/usr/bin/kubectl --kubeconfig ", kubeconfig_, " ", args, " 2>&1");
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return "";
    std::string out;
    char buffer[512];
    while (fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
    return pclose(pipe) == 0 ? out : "";
  }

  // Event reasons recorded about the job, in any order.
  std::multiset<std::string> JobEventReasons() {
    std::multiset<std::string> reasons;
    absl::StatusOr<kube::ObjectList> events = client_->List(kube::kEvents, "default", {});
    if (!events.ok()) return reasons;
    for (const kube::Json& e : events->items) {
      if (kube::StringAt(e, "involvedObject.kind") == "TrainingJob") {
        reasons.insert(kube::StringAt(e, "reason"));
      }
    }
    return reasons;
  }
};

TEST_F(OperatorSchedulabilityE2eTest, TasksAskingForMoreGpusThanAnyNodeHasShowUnschedulable) {
  ASSERT_OK_JOB(CreateJob(JobOptions{.steps = 20, .gpus = 4}));
  // Both tasks, once the scheduler has tried each (one pass may see only the first).
  ASSERT_TRUE(Eventually(
      [&] {
        const auto [status, message] = JobCondition("Unschedulable");
        return status == "True" && absl::StrContains(message, "task 1: ");
      },
      absl::Seconds(90)))
      << Job().serialize();
  const std::string message = JobCondition("Unschedulable").second;
  EXPECT_THAT(message, ::testing::HasSubstr("task 0: 0/3 nodes are available: 3 Insufficient "
                                            "nvidia.com/gpu."));
  EXPECT_TRUE(
      Eventually([&] { return JobEventReasons().count("Unschedulable") == 1; }, absl::Seconds(30)));
  const std::string phase = kube::StringAt(Job(), "status.phase");
  EXPECT_TRUE(phase == "Pending" || phase == "Starting") << phase;

  // The gauge the PhalanxJobStuckRestarting alert reads (sampled every 5 s).
  const int port = OperatorMetricsPort();
  ASSERT_GT(port, 0);
  EXPECT_TRUE(Eventually(
      [&] {
        auto metrics = phalanx::testing::HttpGet(port, "/metrics");
        return metrics.has_value() &&
               absl::StrContains(metrics->body, "\nphalanx_operator_jobs_unschedulable 1");
      },
      absl::Seconds(30)));
  // And the per-job series that say which job: Unschedulable, and its phase.
  EXPECT_TRUE(Eventually(
      [&] {
        auto metrics = phalanx::testing::HttpGet(port, "/metrics");
        return metrics.has_value() &&
               absl::StrContains(metrics->body,
                                 "\nphalanx_operator_job_unschedulable{namespace=\"default\","
                                 "trainingjob=\"train\"} 1") &&
               (absl::StrContains(metrics->body, JobPhaseSeries("Pending")) ||
                absl::StrContains(metrics->body, JobPhaseSeries("Starting")));
      },
      absl::Seconds(30)));

  // kubectl still lists the job (the condition's message does not break its table).
  if (access("/usr/bin/kubectl", X_OK) == 0) {
    std::string out;
    ASSERT_TRUE(Eventually(
        [&] {
          out = KubectlOut("get tj -n default");
          return absl::StrContains(out, "train");
        },
        absl::Seconds(30)))
        << out;
  }
}

// Issue 13: removing a node's preemption taint by hand while its task was being moved made the
// local cluster evict every replacement the scheduler put back on that node until it re-tainted
// it, and the operator moved the task six times in one second. Now the removal calls the
// preemption off, and the operator moves a task at most 3 times a minute whatever happens.
TEST_F(OperatorSchedulabilityE2eTest,
       APreemptionTaintRemovedByHandDoesNotMoveTheTaskAgainAndAgain) {
  // Long enough (40 s of steps) to still run after the 20 s watch below; since fail fast the
  // survivor no longer waits out a barrier, and 400 steps ended inside the watch.
  ASSERT_OK_JOB(CreateJob(JobOptions{.steps = 1000, .gpus = 2}));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                         absl::Seconds(90)));
  absl::StatusOr<kube::Json> victim = client_->Get(op::kPods, "default", "train-task-0-0");
  ASSERT_TRUE(victim.ok());
  const std::string node = kube::StringAt(*victim, "spec.nodeName");
  // The cloud's notice with a 1 s grace: the task is moved almost at once.
  ASSERT_TRUE(
      client_->Raw("POST", absl::StrCat("/admin/nodes/", node, "/preempt?graceSeconds=1")).ok());
  ASSERT_TRUE(Eventually([&] { return !PodExists("train-task-0-0"); }, absl::Seconds(60)));
  // kubectl taint nodes <node> cloud.google.com/impending-node-termination-
  ASSERT_TRUE(Eventually(
      [&] {
        absl::StatusOr<kube::Json> n = client_->Get(kube::kNodes, "", node);
        if (!n.ok()) return false;
        kube::Json taints = kube::Json::array();
        for (const kube::Json& t :
             kube::ArrayOrEmpty(kube::FieldOrNull(*n, "spec"), "taints").as_array()) {
          if (kube::StringAt(t, "key") != "cloud.google.com/impending-node-termination") {
            taints[taints.size()] = t;
          }
        }
        (*n)["spec"]["taints"] = taints;
        return client_->Update(kube::kNodes, "", *n).ok();  // a conflict: read and try again
      },
      absl::Seconds(30)));
  // Give a loop time to show: 20 s is hundreds of passes.
  absl::SleepFor(absl::Seconds(20));
  const kube::Json job = Job();
  const int preemptions = static_cast<int>(job.at("status").at("preemptions").as_integer());
  EXPECT_GE(preemptions, 1) << job.serialize();
  EXPECT_LE(preemptions, 2) << "moved again and again: " << job.serialize();
  absl::StatusOr<kube::Json> n = client_->Get(kube::kNodes, "", node);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(kube::ArrayOrEmpty(kube::FieldOrNull(*n, "spec"), "taints").size(), 0u)
      << "the local cluster tainted the node again: " << n->serialize();
  // Not stuck: running on, or done already on a slow or fast machine.
  EXPECT_TRUE(Eventually(
      [&] {
        const std::string phase = kube::StringAt(Job(), "status.phase");
        return phase == "Running" || phase == "Succeeded";
      },
      absl::Seconds(60)))
      << Job().serialize();
}

// Issue 31 (1): two 4-task jobs (one GPU a task) on 6 GPUs: room for one. Whichever got only
// part of the cluster gives it back after spec.gang.timeoutSeconds and tries again after a
// back-off, so one job runs to completion, then the other; no GPU is held by a partial gang for
// good, and nothing counts as a restart.
TEST_F(OperatorSchedulabilityE2eTest, TwoGangsWithRoomForOneRunOneAfterTheOther) {
  for (const std::string name : {"gang-a", "gang-b"}) {
    ASSERT_OK_JOB(CreateJob(JobOptions{
        .replicas = 4, .steps = 150, .gpus = 1, .name = name, .gang = R"({"timeoutSeconds":3})"}));
  }
  auto job = [&](const std::string& name) {
    absl::StatusOr<kube::Json> j = client_->Get(op::kTrainingJobs, ns_, name);
    return j.ok() ? *j : kube::Json::null();
  };
  ASSERT_TRUE(Eventually(
      [&] {
        return kube::StringAt(job("gang-a"), "status.phase") == "Succeeded" &&
               kube::StringAt(job("gang-b"), "status.phase") == "Succeeded";
      },
      absl::Seconds(240)))
      << job("gang-a").serialize() << "\n"
      << job("gang-b").serialize();
  const kube::Json a = job("gang-a"), b = job("gang-b");
  // One after the other: the later one ran with every task only once the earlier one was done.
  const auto at = [](const kube::Json& j, const std::string& field) {
    return kube::ParseKubeTime(kube::StringAt(j, "status." + field)).value_or(absl::InfinitePast());
  };
  const bool a_first = at(a, "startTime") < at(b, "startTime");
  const kube::Json& first = a_first ? a : b;
  const kube::Json& second = a_first ? b : a;
  // (Each job trains 6 s at least, so overlapping runs would start 6 s or more early; the slack
  // is for the operator's passes over the two jobs coming in either order on a loaded machine.)
  EXPECT_GE(at(second, "startTime") + absl::Seconds(3), at(first, "completionTime"))
      << "the two gangs ran at the same time on 6 GPUs";
  const int64_t releases = kube::FieldOrNull(a.at("status"), "gangReleases").is_integer()
                               ? a.at("status").at("gangReleases").as_integer()
                               : 0;
  const int64_t releases_b = kube::FieldOrNull(b.at("status"), "gangReleases").is_integer()
                                 ? b.at("status").at("gangReleases").as_integer()
                                 : 0;
  EXPECT_GE(releases + releases_b, 1) << "no partial gang gave its GPUs back";
  EXPECT_EQ(a.at("status").at("restarts").as_integer(), 0);
  EXPECT_EQ(b.at("status").at("restarts").as_integer(), 0);
  // The gang's state is a column of `kubectl get tj -o wide` (the real API server's table):
  // the job that gave its GPUs back ran together in the end.
  if (access("/usr/bin/kubectl", X_OK) == 0) {
    const std::string out = KubectlOut("get tj -o wide -n " + ns_);
    EXPECT_THAT(out, ::testing::HasSubstr("GANG"));
    EXPECT_THAT(out, ::testing::ContainsRegex("gang-[ab] .* GangRunning"));
  }
  std::fprintf(stderr,
               "gang releases: %s %lld, %s %lld; the second started %.1fs after the "
               "first completed\n",
               kube::MetaString(a, "name").c_str(), static_cast<long long>(releases),
               kube::MetaString(b, "name").c_str(), static_cast<long long>(releases_b),
               absl::ToDoubleSeconds(at(second, "startTime") - at(first, "completionTime")));
}

}  // namespace
}  // namespace phalanx::e2e
