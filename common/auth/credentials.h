// Job tokens and per-task credentials (docs/security.md, ADR 0003).
//
// Who derives what:
//   operator key  random, in one Secret in the operator's own namespace (never leaves it)
//   job token     HMAC-SHA256(operator key, "phalanx/job/v1/<ns>/<name>/<uid>"): the operator
//                 recomputes it on demand, so it never has to read a job's Secret back; the uid
//                 makes a re-created job of the same name get a new token
//   task cred     "task.<id>.<lo>-<hi>." + HMAC-SHA256(job token,
//   "phalanx/task/v2/<id>/<lo>/<hi>"):
//                 handed to the one pod of task <id> that runs incarnations <lo>..<hi> (one
//                 incarnation, or a pod's launcher range with nprocPerNode > 1); it may register
//                 and act only as those, so a zombie of an older incarnation cannot come back
//                 as a newer one (ADR 0006). The coordinator, which holds the job token,
//                 recomputes it, so it needs no list of credentials
//   unbound task cred  "task.<id>." + HMAC-SHA256(job token, "phalanx/task/v1/<id>"): any
//                 incarnation of task <id>; what operators before ADR 0006 wrote into a job's
//                 Secret, still accepted for the jobs they made
//   spare cred    "spare.<slot>." + HMAC-SHA256(job token, "phalanx/spare/v1/<slot>"): handed to
//                 a spare pod (spec.spares, ADR 0007); it may only wait to be assigned a task,
//                 and the coordinator answers the assignment with that task's credential
// The job token is the admin credential (operator, coordinator); a task credential may only
// act as its own task. Used by the operator (derive) and the coordinator (check).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace phalanx::auth {

// Lower-case hex of HMAC-SHA256(key, message).
std::string HmacSha256Hex(absl::string_view key, absl::string_view message);
// Lower-case hex of SHA-256(data): a fingerprint that can be shown without revealing `data`.
std::string Sha256Hex(absl::string_view data);
// `bytes` random bytes from the OS CSPRNG, hex encoded.
std::string RandomHex(int bytes);

std::string JobToken(absl::string_view operator_key, absl::string_view ns, absl::string_view name,
                     absl::string_view uid);
std::string TaskCredential(absl::string_view job_token, int task_id);  // unbound (v1)
// Bound to incarnations [lo, hi] of the task (v2).
std::string TaskCredential(absl::string_view job_token, int task_id, int64_t lo, int64_t hi);
std::string SpareCredential(absl::string_view job_token, int slot);

// Who a presented bearer credential speaks for.
struct Principal {
  static constexpr int kAdmin = -1;
  static constexpr int kNoTask = -4;  // a spare's: it acts as no task until assigned one
  int task_id = kAdmin;  // kAdmin: the job token (operator, tools); else the one task it may act as
  int spare = -1;        // >= 0: a spare credential of this slot (task_id is kNoTask)
  // The incarnations a task credential may act as (all, for the job token and v1 ones).
  int64_t min_incarnation = 0;
  int64_t max_incarnation = std::numeric_limits<int64_t>::max();
  bool admin() const { return task_id == kAdmin; }
  bool is_spare() const { return spare >= 0; }
  bool incarnation_bound() const {
    return min_incarnation != 0 || max_incarnation != std::numeric_limits<int64_t>::max();
  }
};

// Unauthenticated for anything that is neither the job token nor a valid task or spare
// credential.
// Compares in constant time so a credential cannot be guessed byte by byte from timings.
absl::StatusOr<Principal> Authenticate(absl::string_view job_token, absl::string_view presented);

// The coordinator's exit code when the token it was given is not the one its --token_sha256
// names: the job's token Secret was not written by the operator (an object squatting its name).
// The operator turns this exit into a ChildConflict on the Secret, since it may not read Secrets
// to find out itself (ADR 0003). 78 is sysexits' EX_CONFIG; no other coordinator exit uses it.
inline constexpr int kExitTokenMismatch = 78;

// True when a and b are equal; time depends only on their lengths.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace phalanx::auth
