#include "common/auth/clique_ticket.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/auth/credentials.h"

namespace phalanx::auth {
namespace {

constexpr absl::string_view kTicketPrefix = "clique/v1/";

std::string SignedPart(absl::string_view ns, absl::string_view name, absl::string_view uid,
                       int task) {
  return absl::StrCat(kTicketPrefix, ns, "/", name, "/", uid, "/", task, "/");
}

}  // namespace

std::string AgentCliqueKey(absl::string_view operator_key) {
  return HmacSha256Hex(operator_key, "phalanx/agent-clique/v1");
}

std::string CliqueTicket(absl::string_view agent_key, absl::string_view ns, absl::string_view name,
                         absl::string_view uid, int task) {
  const std::string signed_part = SignedPart(ns, name, uid, task);
  return absl::StrCat(signed_part, HmacSha256Hex(agent_key, signed_part));
}

absl::StatusOr<CliqueTicketClaims> VerifyCliqueTicket(absl::string_view agent_key,
                                                      absl::string_view ticket) {
  if (agent_key.empty()) return absl::PermissionDeniedError("the agent has no clique key");
  // clique / v1 / ns / name / uid / task / mac
  const std::vector<absl::string_view> parts = absl::StrSplit(ticket, '/');
  CliqueTicketClaims claims;
  if (parts.size() != 7 || parts[0] != "clique" || parts[1] != "v1" || parts[2].empty() ||
      parts[3].empty() || parts[4].empty() || !absl::SimpleAtoi(parts[5], &claims.task) ||
      claims.task < 0) {
    return absl::PermissionDeniedError(
        "not a clique ticket (clique/v1/<ns>/<name>/<uid>/<task>/…)");
  }
  const std::string expected = CliqueTicket(agent_key, parts[2], parts[3], parts[4], claims.task);
  if (!ConstantTimeEquals(expected, ticket)) {
    return absl::PermissionDeniedError(
        "a clique ticket this node's agent key did not sign (forged, or from another cluster)");
  }
  claims.ns = std::string(parts[2]);
  claims.name = std::string(parts[3]);
  claims.uid = std::string(parts[4]);
  return claims;
}

}  // namespace phalanx::auth
