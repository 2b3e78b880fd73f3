// Test-only builders for the planner's stage tests (CONVENTIONS.md "Tests"): a TrainingJob
// (TrainingJobBuilder("j").Tasks(4).Build()), task and coordinator pods (PodBuilder), a healthy
// world, and TestPass, which owns everything a pass reads so a test can hand PlanInputs to a
// stage. Header-only; for tests under operator/controller.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"
#include "operator/controller/pass.h"

namespace phalanx::op::builders {

inline const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

class TrainingJobBuilder {
 public:
  explicit TrainingJobBuilder(std::string name) : name_(std::move(name)) {
    spec_.replicas = 2;
    spec_.pod_template = Json::parse(
        R"({"metadata":{"labels":{"team":"a"}},"spec":{"containers":[{"name":"main","image":"x",
            "command":["train"],"env":[{"name":"PHALANX_TASK_ID","value":"wrong"},{"name":"KEEP","value":"1"},{"name":"MASTER_PORT","value":"1234"}]}]}})");
  }
  TrainingJobBuilder& Tasks(int n) {
    spec_.replicas = n;
    return *this;
  }
  TrainingJobBuilder& Generation(int64_t g) {
    generation_ = g;
    return *this;
  }
  TrainingJobBuilder& Scope(RestartScope s) {
    spec_.failure_policy.restart_scope = s;
    return *this;
  }
  TrainingJobBuilder& MaxRestarts(int n) {
    spec_.failure_policy.max_restarts = n;
    return *this;
  }
  TrainingJobBuilder& Backoff(absl::Duration base, absl::Duration max) {
    spec_.failure_policy.backoff = {base, max};
    return *this;
  }
  TrainingJobBuilder& FatalExitCodes(std::vector<int> codes) {
    spec_.failure_policy.fatal_exit_codes = std::move(codes);
    return *this;
  }
  TrainingJobBuilder& Grace(absl::Duration d) {
    spec_.preemption.checkpoint_grace = d;
    return *this;
  }
  TrainingJobBuilder& PreemptionsCountTowardMaxRestarts() {
    spec_.failure_policy.preemptions_count_toward_max_restarts = true;
    return *this;
  }
  TrainingJobBuilder& Suspend(bool suspend = true) {
    spec_.suspend = suspend;
    return *this;
  }
  TrainingJobBuilder& TaskZeroSucceeds() {
    spec_.success_policy = SuccessPolicy::kTaskZero;
    return *this;
  }
  TrainingJobBuilder& IgnoreNodeTaints() {
    spec_.preemption.on_node_taints = false;
    return *this;
  }

  // The TrainingJob object (namespace "ns", uid "u1"); the planner reads its metadata and takes
  // the spec as Spec().
  Json Build() const {
    return Json::parse(absl::StrCat(
        R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":")", name_,
        R"(","namespace":"ns","uid":"u1","generation":)", generation_, R"(},"spec":{"replicas":)",
        spec_.replicas, "}}"));
  }
  const TrainingJobSpec& Spec() const { return spec_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int64_t generation_ = 3;
  TrainingJobSpec spec_;
};

class PodBuilder {
 public:
  // Task `index`'s pod at `incarnation` of job `job`: Running, ready, on node-0.
  PodBuilder(const std::string& job, int index, Incarnation incarnation = 0) {
    pod_.index = index;
    pod_.incarnation = incarnation;
    pod_.name = TaskPodName(job, index, incarnation);
    pod_.phase = PodPhase::kRunning;
    pod_.ready = true;
    pod_.node = "node-0";
  }
  // The coordinator pod of `job`: Running and ready at 10.0.0.9.
  static PodBuilder Coordinator(const std::string& job) {
    PodBuilder b(job, -1);
    b.pod_.index = -1;
    b.pod_.incarnation = base::kNoIncarnation;
    b.pod_.name = CoordinatorName(job);
    b.pod_.ip = "10.0.0.9";
    return b;
  }
  PodBuilder& Phase(PodPhase phase) {
    pod_.phase = phase;
    return *this;
  }
  PodBuilder& Failed(std::optional<int> exit_code = std::nullopt, std::string reason = "") {
    pod_.phase = PodPhase::kFailed;
    pod_.exit_code = exit_code;
    pod_.reason = std::move(reason);
    return *this;
  }
  PodBuilder& NotReady() {
    pod_.ready = false;
    return *this;
  }
  PodBuilder& On(std::string node) {
    pod_.node = std::move(node);
    return *this;
  }
  PodBuilder& Deleting() {
    pod_.being_deleted = true;
    return *this;
  }
  PodBuilder& Disrupted() {
    pod_.disruption_target = true;
    return *this;
  }
  PodBuilder& Reason(std::string reason) {
    pod_.reason = std::move(reason);
    return *this;
  }
  PodBuilder& Message(std::string message) {
    pod_.message = std::move(message);
    return *this;
  }
  PodView Build() const { return pod_; }

 private:
  PodView pod_;
};

// Every child there, the coordinator running, `tasks` task pods of incarnation 0 running.
inline JobObservation HealthyWorld(const std::string& job, int tasks) {
  JobObservation w;
  w.has_secret = w.has_coordinator_service = w.has_tasks_service = true;
  w.coordinator = PodBuilder::Coordinator(job).Build();
  for (int i = 0; i < tasks; ++i) w.task_pods.push_back(PodBuilder(job, i).Build());
  return w;
}

// Everything one pass reads, owned, so that Inputs() can lend it to a stage or the pipeline.
struct TestPass {
  explicit TestPass(const TrainingJobBuilder& b)
      : job(b.Build()), spec(b.Spec()), world(HealthyWorld(b.name(), b.Spec().replicas)) {}

  PlanInputs Inputs() const { return {job, spec, previous, world, placement, "tok", now}; }
  // The pass as stage `stage` receives it.
  JobPass Before(std::string_view stage) const { return PassBefore(Inputs(), stage); }

  Json job;
  TrainingJobSpec spec;
  TrainingJobStatus previous;
  JobObservation world;
  CoordinatorPlacement placement;
  absl::Time now = kNow;
};

// The names of `objects` (metadata.name), in order.
inline std::vector<std::string> Names(const std::vector<Json>& objects) {
  std::vector<std::string> names;
  for (const Json& o : objects) names.push_back(kube::MetaString(o, "name"));
  return names;
}

// Reasons of `events`, in order.
inline std::vector<std::string> Reasons(const std::vector<EventNote>& events) {
  std::vector<std::string> out;
  for (const EventNote& e : events) out.push_back(e.reason);
  return out;
}

// "type=status/reason" of condition `type`, or "none".
inline std::string ConditionOf(const TrainingJobStatus& s, const std::string& type) {
  for (const Condition& c : s.conditions) {
    if (c.type == type) return c.status + "/" + c.reason;
  }
  return "none";
}

}  // namespace phalanx::op::builders
