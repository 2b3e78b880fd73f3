// Clique tickets: the agent accepts exactly the tickets its key signed, and reads the job and
// task from them (what binds a clique claim to a task: node_agent/cliques/clique_registry.h).
#include "common/auth/clique_ticket.h"

#include <gtest/gtest.h>

#include "common/auth/credentials.h"
#include "common/testing/status_matchers.h"

namespace phalanx::auth {
namespace {

using ::phalanx::testing::StatusIs;

TEST(CliqueTicket, TheAgentKeyVerifiesTheTicketsTheOperatorIssued) {
  const std::string agent_key = AgentCliqueKey("operator-key-of-at-least-32-characters");
  const std::string ticket = CliqueTicket(agent_key, "team-a", "train", "uid-1", 3);
  EXPECT_EQ(ticket.rfind("clique/v1/team-a/train/uid-1/3/", 0), 0u) << ticket;
  absl::StatusOr<CliqueTicketClaims> claims = VerifyCliqueTicket(agent_key, ticket);
  ASSERT_TRUE(claims.ok()) << claims.status();
  EXPECT_EQ(claims->ns, "team-a");
  EXPECT_EQ(claims->name, "train");
  EXPECT_EQ(claims->uid, "uid-1");
  EXPECT_EQ(claims->task, 3);
  // Not the operator key itself, nor anything a job's token is derived from.
  EXPECT_NE(agent_key, "operator-key-of-at-least-32-characters");
  EXPECT_NE(agent_key, JobToken("operator-key-of-at-least-32-characters", "", "", ""));
}

TEST(CliqueTicket, AnyChangeToATicketOrAnotherKeyIsRefused) {
  const std::string agent_key = AgentCliqueKey("operator-key-of-at-least-32-characters");
  const std::string ticket = CliqueTicket(agent_key, "team-a", "train", "uid-1", 3);
  // Another job's pod holds its own tickets: renaming one to this job breaks its MAC.
  const std::string other = CliqueTicket(agent_key, "team-b", "train", "uid-9", 3);
  std::string renamed = other;
  renamed.replace(renamed.find("team-b"), 6, "team-a");
  std::string other_task = ticket;
  other_task.replace(other_task.find("/3/"), 3, "/4/");
  std::string flipped = ticket;
  flipped.back() = flipped.back() == '0' ? '1' : '0';
  for (const std::string& bad :
       {renamed, other_task, flipped, std::string(""), std::string("clique/v1/a/b/c/1/"),
        std::string("clique/v1/a/b/c/-1/00"), ticket.substr(0, ticket.size() - 1), ticket + "0",
        ticket.substr(0, ticket.find("/3/")) + "/03/" + ticket.substr(ticket.find("/3/") + 3)}) {
    EXPECT_THAT(VerifyCliqueTicket(agent_key, bad).status(),
                StatusIs(absl::StatusCode::kPermissionDenied))
        << bad;
  }
  // A ticket of another cluster's operator; and an agent that has no key accepts nothing.
  EXPECT_THAT(
      VerifyCliqueTicket(AgentCliqueKey("another-operator-key-xxxxxxxxxxxxxxx"), ticket).status(),
      StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(VerifyCliqueTicket("", ticket).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_TRUE(VerifyCliqueTicket(agent_key, other).ok());
}

}  // namespace
}  // namespace phalanx::auth
