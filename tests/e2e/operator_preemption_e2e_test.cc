// The operator end to end on the local cluster when nodes are preempted: a node preemption
// (taint) checkpoints every task at one step; a coordinator killed right after a round opened
// still gets the round; node agents turn a GCE notice into the same coordinated checkpoint.
#include "tests/e2e/operator_e2e_fixture.h"

namespace phalanx::e2e {
namespace {

// Three nodes with 2 GPUs each; every task asks for 2, so each task has a node of its own.
class OperatorPreemptionE2eTest : public OperatorE2eTest {
 protected:
  OperatorPreemptionE2eTest() {
    nodes_ = 3;
    gpus_per_node_ = 2;
  }

  // A 2-task job (2 GPUs each), Running, both tasks past their first periodic checkpoint.
  void StartTrainingJob(int checkpoint_grace_seconds = 20) {
    ASSERT_TRUE(CreateJob(JobOptions{.steps = 250,
                                     .preemption = absl::StrCat(R"({"checkpointGraceSeconds":)",
                                                                checkpoint_grace_seconds, "}"),
                                     .gpus = 2})
                    .ok());
    ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                           absl::Seconds(90)));
    ASSERT_TRUE(
        Eventually([&] { return WorkerEvents("checkpoint").size() == 2; }, absl::Seconds(60)));
  }

  // A first-incarnation task pod whose node does not also hold the coordinator, and that node.
  void PickVictim(std::string& victim_pod, std::string& node) {
    absl::StatusOr<kube::Json> coordinator =
        client_->Get(op::kPods, "default", "train-coordinator");
    ASSERT_TRUE(coordinator.ok());
    for (int i = 0; i < 2 && node.empty(); ++i) {
      absl::StatusOr<kube::Json> pod =
          client_->Get(op::kPods, "default", absl::StrCat("train-task-", i, "-0"));
      ASSERT_TRUE(pod.ok());
      if (kube::StringAt(*pod, "spec.nodeName") != kube::StringAt(*coordinator, "spec.nodeName")) {
        victim_pod = kube::MetaString(*pod, "name");
        node = kube::StringAt(*pod, "spec.nodeName");
      }
    }
    ASSERT_FALSE(node.empty());
  }

  // After the job succeeded: a preemption and no restart were counted, every first-incarnation
  // task checkpointed at one sync step, `victim_pod` left at that step, no recovery lost a
  // step. Returns the sync step.
  std::string ExpectOneSyncStepAndNoStepLost(const std::string& victim_pod) {
    const kube::Json done = Job();
    EXPECT_GE(done.at("status").at("preemptions").as_integer(), 1) << done.serialize();
    EXPECT_EQ(done.at("status").at("restarts").as_integer(), 0) << done.serialize();
    std::set<std::string> sync_steps;
    const auto sync = WorkerEvents("sync_checkpoint");
    for (int i = 0; i < 2; ++i) {
      const auto it = sync.find(absl::StrCat("default_train-task-", i, "-0"));
      EXPECT_NE(it, sync.end()) << "task " << i << " never checkpointed at the sync step";
      if (it == sync.end()) continue;
      for (const std::string& line : it->second) sync_steps.insert(EventField(line, "step"));
    }
    EXPECT_EQ(sync_steps.size(), 1u);
    if (sync_steps.empty()) return "";
    const auto left = WorkerEvents("left_for_preemption");
    EXPECT_TRUE(left.contains("default_" + victim_pod)) << victim_pod << " was evicted first";
    if (left.contains("default_" + victim_pod)) {
      EXPECT_EQ(EventField(left.at("default_" + victim_pod).front(), "step"), *sync_steps.begin());
    }
    for (const auto& [pod, lines] : WorkerEvents("recovered")) {
      for (const std::string& line : lines) EXPECT_EQ(EventField(line, "lost"), "0") << line;
    }
    return *sync_steps.begin();
  }
};

TEST_F(OperatorPreemptionE2eTest, NodePreemptionCheckpointsEveryTaskAtOneStepAndLosesNoSteps) {
  StartTrainingJob();
  if (HasFatalFailure()) return;
  std::string victim_pod, node;
  PickVictim(victim_pod, node);
  if (HasFatalFailure()) return;
  // The cloud's notice: taint now, evict after 15 s.
  ASSERT_TRUE(
      client_->Raw("POST", absl::StrCat("/admin/nodes/", node, "/preempt?graceSeconds=15")).ok());
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(150)))
      << Job().serialize();
  const std::string sync_step = ExpectOneSyncStepAndNoStepLost(victim_pod);
  // The replacement resumed from the agreed step, and all tasks end in one state.
  for (const auto& [pod, lines] : WorkerEvents("start")) {
    if (absl::EndsWith(pod, "-0")) continue;  // the first incarnation started at step 0
    for (const std::string& line : lines) EXPECT_EQ(EventField(line, "resume_step"), sync_step);
  }
  std::set<std::string> final_states;
  for (const auto& [pod, lines] : WorkerEvents("done")) {
    for (const std::string& line : lines) final_states.insert(EventField(line, "state"));
  }
  EXPECT_EQ(final_states.size(), 1u);
}

// Issue 16 item 3: the coordinator is killed right after the operator opened a preemption round
// on it. Its replacement gets the round too (the operator re-sends every open notice to a new
// coordinator pod), the tasks checkpoint at an agreed step before the victim moves, and no step
// is lost.
TEST_F(OperatorPreemptionE2eTest, CoordinatorKilledRightAfterARoundOpenedStillGetsTheRound) {
  // 60 s of training, so the job is still running when the round is re-sent.
  ASSERT_TRUE(
      CreateJob(
          JobOptions{.steps = 1500, .preemption = R"({"checkpointGraceSeconds":60})", .gpus = 2})
          .ok());
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Running"; },
                         absl::Seconds(90)));
  ASSERT_TRUE(
      Eventually([&] { return WorkerEvents("checkpoint").size() == 2; }, absl::Seconds(60)));
  std::string victim_pod, node;
  PickVictim(victim_pod, node);
  if (HasFatalFailure()) return;
  const std::string other_pod =
      victim_pod == "train-task-0-0" ? "train-task-1-0" : "train-task-0-0";
  auto rounds_opened = [&] {
    absl::StatusOr<kube::ObjectList> events = client_->List(
        {"", "v1", "events", true}, "default", {.field_selector = "involvedObject.name=train"});
    int n = 0;
    if (events.ok()) {
      for (const kube::Json& e : events->items) {
        if (kube::StringAt(e, "reason") == "CheckpointRoundOpened") {
          n += std::max(1, static_cast<int>(kube::FieldOrNull(e, "count").is_integer()
                                                ? kube::FieldOrNull(e, "count").as_integer()
                                                : 1));
        }
      }
    }
    return n;
  };
  absl::StatusOr<kube::Json> before = client_->Get(op::kPods, "default", "train-coordinator");
  ASSERT_TRUE(before.ok());
  // The other task is frozen for a few seconds (well within its heartbeat timeout, 10 s), so
  // the round cannot reach its sync step before the coordinator dies.
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/" + other_pod + "/stop").ok());
  ASSERT_TRUE(
      client_->Raw("POST", absl::StrCat("/admin/nodes/", node, "/preempt?graceSeconds=60")).ok());
  ASSERT_TRUE(Eventually([&] { return rounds_opened() >= 1; }, absl::Seconds(30)));
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/train-coordinator/kill").ok());
  // A new coordinator pod, and the operator opens the round on it as well.
  const bool replaced = Eventually(
      [&] {
        absl::StatusOr<kube::Json> now = client_->Get(op::kPods, "default", "train-coordinator");
        return now.ok() && kube::MetaString(*now, "uid") != kube::MetaString(*before, "uid") &&
               kube::StringAt(*now, "status.phase") == "Running";
      },
      absl::Seconds(60));
  ASSERT_TRUE(client_->Raw("POST", "/admin/pods/default/" + other_pod + "/continue").ok());
  ASSERT_TRUE(replaced);
  if (!Eventually([&] { return rounds_opened() >= 2; }, absl::Seconds(60))) {
    std::ifstream log(dir_ / "operator.log");
    for (std::string line; std::getline(log, line);) std::cerr << "OPLOG " << line << "\n";
    absl::StatusOr<kube::ObjectList> events = client_->List(
        {"", "v1", "events", true}, "default", {.field_selector = "involvedObject.name=train"});
    for (const kube::Json& e : events->items) {
      std::cerr << "EVENT " << kube::StringAt(e, "reason") << " " << kube::StringAt(e, "message")
                << "\n";
    }
    std::cerr << "JOB " << Job().serialize() << "\n";
    FAIL() << "the new coordinator never got the open round";
  }
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(240)))
      << Job().serialize();
  const kube::Json done = Job();
  EXPECT_GE(done.at("status").at("preemptions").as_integer(), 1) << done.serialize();
  EXPECT_GE(done.at("status").at("coordinator").at("restarts").as_integer(), 1) << done.serialize();
  // The victim left at a step it checkpointed at (the round's agreed step), its replacement
  // resumed from that step, and no recovery lost a step.
  const auto sync = WorkerEvents("sync_checkpoint");
  const auto left = WorkerEvents("left_for_preemption");
  ASSERT_TRUE(left.contains("default_" + victim_pod)) << victim_pod << " never left at a step";
  const std::string left_at = EventField(left.at("default_" + victim_pod).front(), "step");
  ASSERT_TRUE(sync.contains("default_" + victim_pod));
  std::set<std::string> victim_sync;
  for (const std::string& line : sync.at("default_" + victim_pod)) {
    victim_sync.insert(EventField(line, "step"));
  }
  EXPECT_TRUE(victim_sync.contains(left_at)) << left_at;
  // The replacement's epoch: the membership after the move, which the survivors recover into.
  std::set<std::string> epochs_after_move;
  for (const auto& [pod, lines] : WorkerEvents("start")) {
    if (absl::EndsWith(pod, "-0")) continue;
    for (const std::string& line : lines) {
      EXPECT_EQ(EventField(line, "resume_step"), left_at);
      epochs_after_move.insert(EventField(line, "epoch"));
    }
  }
  // The preemption lost no step: every recovery into the membership after the move lost
  // nothing. The coordinator's restart rolls the tasks back to their last periodic checkpoint
  // first (its cost, not the preemption's), and the round may then agree on that very step, so
  // the step alone does not tell the two recoveries apart; the epoch does.
  int recoveries_after_move = 0;
  for (const auto& [pod, lines] : WorkerEvents("recovered")) {
    for (const std::string& line : lines) {
      RecordProperty("recovered_" + pod, line);
      if (!epochs_after_move.contains(EventField(line, "epoch"))) continue;
      ++recoveries_after_move;
      EXPECT_EQ(EventField(line, "resume_step"), left_at) << line;
      EXPECT_EQ(EventField(line, "lost"), "0") << line;
    }
  }
  EXPECT_GE(recoveries_after_move, 1);
}

// The node agent end to end: one phalanx-agent per node (fake GPUs), each polling its own fake
// GCE metadata server. The victim node's server starts answering preempted=TRUE; its agent
// taints the node, the operator opens a preemption round, every task checkpoints at one step,
// the preempted task moves, and no step is lost.
class AgentPreemptionE2eTest : public OperatorPreemptionE2eTest {
 protected:
  std::unique_ptr<process::Subprocess> StartAgent(const std::string& node,
                                                  const std::string& metadata_url) {
    return Start({kBuild + "/node_agent/phalanx-agent", "--kubeconfig", kubeconfig_, "--node_name",
                  node, "--notice_sources", "gce,node-taint", "--gce_metadata_url", metadata_url,
                  "--fake_gpus", "2", "--poll_interval", "500ms", "--clique_socket",
                  (dir_ / (node + ".sock")).string(), "--metrics_listen", "127.0.0.1:0"},
                 "agent-" + node,
                 [](const std::string& l) { return absl::StartsWith(l, "ready "); });
  }
};

TEST_F(AgentPreemptionE2eTest, AGceNoticeOnOneNodeCheckpointsTheJobAtOneStepAndLosesNoSteps) {
  std::map<std::string, std::unique_ptr<agent::testing::FakeMetadataServer>> metadata;
  std::vector<std::unique_ptr<process::Subprocess>> agents;
  for (int n = 0; n < nodes_; ++n) {
    const std::string node = absl::StrCat("node-", n);
    auto server = agent::testing::FakeMetadataServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    (*server)->Set("GET", "/computeMetadata/v1/instance/preempted",
                   agent::testing::ScriptedResponse::Ok("FALSE"));
    (*server)->Set("GET", "/computeMetadata/v1/instance/maintenance-event",
                   agent::testing::ScriptedResponse::Ok("NONE"));
    agents.push_back(StartAgent(node, (*server)->base_url()));
    ASSERT_NE(agents.back(), nullptr) << node;
    metadata[node] = *std::move(server);
  }
  // A grace longer than GCE's 30 s: the node's own deadline must win (issue 12).
  StartTrainingJob(/*checkpoint_grace_seconds=*/60);
  if (HasFatalFailure()) return;
  std::string victim_pod, node;
  PickVictim(victim_pod, node);
  if (HasFatalFailure()) return;
  // The cloud says: this VM is being preempted.
  metadata[node]->Set("GET", "/computeMetadata/v1/instance/preempted",
                      agent::testing::ScriptedResponse::Ok("TRUE"));
  ASSERT_TRUE(Eventually([&] { return kube::StringAt(Job(), "status.phase") == "Succeeded"; },
                         absl::Seconds(150)))
      << Job().serialize();

  ExpectOneSyncStepAndNoStepLost(victim_pod);
  // The node carries the agent's taint, condition and Event.
  absl::StatusOr<kube::Json> marked = client_->Get(op::kNodes, "", node);
  ASSERT_TRUE(marked.ok());
  EXPECT_THAT(marked->serialize(), ::testing::HasSubstr("phalanx.dev/preempting"));
  EXPECT_THAT(marked->serialize(), ::testing::HasSubstr("PhalanxPreemptionNotice"));
  absl::StatusOr<kube::ObjectList> events = client_->List(
      {"", "v1", "events", true}, "default", {.field_selector = "involvedObject.name=" + node});
  ASSERT_TRUE(events.ok());
  bool noticed = false;
  for (const kube::Json& e : events->items)
    noticed |= kube::StringAt(e, "reason") == "PreemptionNotice";
  EXPECT_TRUE(noticed);
  // The agent put GCE's deadline on the Node with its taint, and the round the operator opened
  // ends by it: at most 30 s after the operator saw the notice, not checkpointGraceSeconds (60).
  const kube::Json& deadline_annotation =
      kube::FieldOrNull(kube::FieldOrNull(kube::FieldOrNull(*marked, "metadata"), "annotations"),
                        "phalanx.dev/preemption-deadline");
  ASSERT_TRUE(deadline_annotation.is_string()) << marked->serialize();
  const std::optional<absl::Time> node_deadline =
      kube::ParseKubeTime(deadline_annotation.as_string());
  ASSERT_TRUE(node_deadline.has_value()) << deadline_annotation.serialize();
  absl::StatusOr<kube::ObjectList> job_events = client_->List(
      {"", "v1", "events", true}, "default", {.field_selector = "involvedObject.name=train"});
  ASSERT_TRUE(job_events.ok());
  std::vector<std::string> notices;
  for (const kube::Json& e : job_events->items) {
    if (kube::StringAt(e, "reason") == "PreemptionNotice")
      notices.push_back(kube::StringAt(e, "message"));
  }
  ASSERT_EQ(notices.size(), 1u) << ::testing::PrintToString(notices);
  // "... asking its coordinator for a coordinated checkpoint, deadline <RFC 3339> (in <d>)"
  const std::string& notice = notices.front();
  const size_t at = notice.find("deadline ");
  ASSERT_NE(at, std::string::npos) << notice;
  const std::string when = notice.substr(at + 9, notice.find(' ', at + 9) - at - 9);
  EXPECT_EQ(kube::ParseKubeTime(when), node_deadline) << notice;
  const size_t in = notice.find("(in ");
  ASSERT_NE(in, std::string::npos) << notice;
  absl::Duration round;
  ASSERT_TRUE(absl::ParseDuration(notice.substr(in + 4, notice.find(')', in) - in - 4), &round))
      << notice;
  EXPECT_LE(round, absl::Seconds(30)) << notice;
  EXPECT_GT(round, absl::ZeroDuration()) << notice;
  RecordProperty("round_deadline", notice);
  for (auto& a : agents) {
    a->Signal(SIGINT);
    a->Wait(absl::Seconds(10));
  }
}

}  // namespace
}  // namespace phalanx::e2e
