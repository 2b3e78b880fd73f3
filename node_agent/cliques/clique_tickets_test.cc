// The clique channel with tickets (the chart's default): a (job, task) can be claimed only with
// the ticket the operator issued into that task's pod (common/auth/clique_ticket.h), so a pod of
// another job — or another task of this job — can neither claim nor keep the task, and a GPU
// failure's abort reaches only the real task. Through HandleCliqueRequest, the lines the socket
// serves; the TCP path is in clique_socket_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/synchronization/mutex.h"
#include "common/auth/clique_ticket.h"
#include "common/testing/fake_clock.h"
#include "node_agent/cliques/clique_registry.h"
#include "node_agent/cliques/clique_socket.h"

namespace phalanx::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kOperatorKey[] = "an-operator-key-of-at-least-32-characters";

class CliqueTicketsTest : public ::testing::Test {
 protected:
  CliqueTicketsTest() : registry_(Options()) {}

  CliqueRegistryOptions Options() {
    CliqueRegistryOptions options;
    options.ttl = absl::Seconds(30);
    options.process_alive = [](int) { return true; };
    options.ticket_key = [this]() -> absl::StatusOr<std::string> {
      absl::MutexLock lock(&mu_);
      if (agent_key_.empty()) return absl::NotFoundError("/var/run/phalanx/agent-clique/key");
      return agent_key_;
    };
    return options;
  }
  static std::string Ticket(const std::string& ns, const std::string& job, int task,
                            const std::string& uid = "uid-1") {
    return auth::CliqueTicket(auth::AgentCliqueKey(kOperatorKey), ns, job, uid, task);
  }
  // A REPORT of job `job` task `task` on GPU 0, over TCP (no peer pid).
  std::string Report(const std::string& job, int task, const std::string& key, int inc = 1) {
    return HandleCliqueRequest(registry_,
                               "REPORT job=" + job + " task=" + std::to_string(task) +
                                   " inc=" + std::to_string(inc) +
                                   " clique=c state=READY devices=0 key=" + key,
                               clock_.Now(), 0);
  }

  absl::Mutex mu_;
  std::string agent_key_ ABSL_GUARDED_BY(mu_) = auth::AgentCliqueKey(kOperatorKey);
  testing::FakeClock clock_;
  CliqueRegistry registry_;
};

TEST_F(CliqueTicketsTest, OnlyTheTasksOwnTicketClaimsIt_EvenBeforeTheTaskReports) {
  // Before the real task reports, nobody else can take its place: a made-up key, another job's
  // ticket, another task's ticket of this job.
  EXPECT_THAT(Report("train", 0, "made-up-key"), StartsWith("ERR permission denied"));
  EXPECT_THAT(Report("train", 0, Ticket("team-b", "other", 0)),
              HasSubstr("not task 0 of job train"));
  EXPECT_THAT(Report("train", 0, Ticket("team-a", "train", 1)),
              HasSubstr("the ticket is task 1 of job team-a/train's"));
  // A ticket made with another cluster's operator key.
  EXPECT_THAT(Report("train", 0,
                     auth::CliqueTicket(auth::AgentCliqueKey("another-operator-key-xxxxxxxxxxx"),
                                        "team-a", "train", "uid-1", 0)),
              HasSubstr("did not sign"));
  EXPECT_TRUE(registry_.List().empty());
  // The task itself.
  EXPECT_EQ(Report("train", 0, Ticket("team-a", "train", 0)), "OK");
  ASSERT_EQ(registry_.List().size(), 1u);
  // Its refresh keeps it; nothing else can refresh, forget or read it.
  clock_.Advance(absl::Seconds(20));
  EXPECT_EQ(Report("train", 0, Ticket("team-a", "train", 0)), "OK");
  EXPECT_THAT(
      HandleCliqueRequest(registry_, "FORGET job=train task=0 key=made-up-key", clock_.Now(), 0),
      StartsWith("ERR permission denied"));
  EXPECT_EQ(HandleCliqueRequest(registry_, "LIST key=made-up-key", clock_.Now(), 0), "END");
  EXPECT_THAT(
      HandleCliqueRequest(registry_, "LIST key=" + Ticket("team-a", "train", 0), clock_.Now(), 0),
      HasSubstr("job=team-a/train/uid-1 task=0"));
}

// Jobs of one name in two namespaces (or a deleted job's zombie beside its successor, another
// uid) report as "train" alike: the agent keeps each under its ticket's whole identity, so one
// can neither take the other's claim nor keep it out, nor read or forget its entries.
TEST_F(CliqueTicketsTest, JobsOfOneNameInTwoNamespacesNeverShareAClaim) {
  const std::string a = Ticket("team-a", "train", 0);
  const std::string b = Ticket("team-b", "train", 0, "uid-2");
  const std::string zombie = Ticket("team-a", "train", 0, "uid-0");
  EXPECT_EQ(Report("train", 0, b), "OK");  // first, and kept refreshing
  EXPECT_EQ(Report("train", 0, a), "OK");
  EXPECT_EQ(Report("train", 0, zombie), "OK");
  EXPECT_EQ(Report("train", 0, b), "OK");
  EXPECT_EQ(registry_.List().size(), 3u);
  const std::string listed_a = HandleCliqueRequest(registry_, "LIST key=" + a, clock_.Now(), 0);
  EXPECT_THAT(listed_a, HasSubstr("job=team-a/train/uid-1 task=0"));
  EXPECT_THAT(listed_a, ::testing::Not(HasSubstr("team-b")));
  EXPECT_EQ(HandleCliqueRequest(registry_, "FORGET job=train task=0 key=" + b, clock_.Now(), 0),
            "OK");
  EXPECT_EQ(registry_.List().size(), 2u);  // only team-b's went
  EXPECT_THAT(HandleCliqueRequest(registry_, "LIST key=" + a, clock_.Now(), 0),
              HasSubstr("job=team-a/train/uid-1 task=0"));
}

TEST_F(CliqueTicketsTest, AGpuFailuresAbortReachesOnlyTheRealTask) {
  ASSERT_EQ(Report("train", 0, Ticket("team-a", "train", 0)), "OK");
  ASSERT_EQ(registry_.RequestAbortForDevice(0, "Xid 79 on GPU 0"), 1);
  // An intruder reporting as the task (its own job's valid ticket, a made-up key) gets no abort
  // and leaves it pending.
  EXPECT_THAT(Report("train", 0, Ticket("team-b", "other", 0)), StartsWith("ERR"));
  EXPECT_THAT(Report("train", 0, "made-up-key", 2), StartsWith("ERR"));
  EXPECT_EQ(Report("train", 0, Ticket("team-a", "train", 0)),
            "OK abort=Xid_79_on_GPU_0");  // spaces escaped
}

TEST_F(CliqueTicketsTest, ARestartedTaskTakesItsClaimBackWithTheSameTicket) {
  ASSERT_EQ(Report("train", 0, Ticket("team-a", "train", 0), 1), "OK");
  // The next incarnation's pod mounts the same ticket: no wait for the TTL, the old
  // incarnation's cliques go.
  ASSERT_EQ(Report("train", 0, Ticket("team-a", "train", 0), 2), "OK");
  ASSERT_EQ(registry_.List().size(), 1u);
  EXPECT_EQ(registry_.List()[0].incarnation, 2u);
}

TEST_F(CliqueTicketsTest, WithoutItsKeyYetTheAgentRefusesEveryClaim_ThenAcceptsTickets) {
  {
    absl::MutexLock lock(&mu_);
    agent_key_.clear();
  }
  EXPECT_THAT(Report("train", 0, Ticket("team-a", "train", 0)),
              HasSubstr("cannot check clique tickets yet"));
  EXPECT_THAT(Report("train", 0, "made-up-key"), HasSubstr("cannot check clique tickets yet"));
  {
    absl::MutexLock lock(&mu_);
    agent_key_ = auth::AgentCliqueKey(kOperatorKey);
  }
  EXPECT_EQ(Report("train", 0, Ticket("team-a", "train", 0)), "OK");
}

}  // namespace
}  // namespace phalanx::agent
