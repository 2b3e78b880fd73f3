// Semantic validation of a TrainingJob: the checks the CRD's schema and CEL rules make at
// `kubectl apply`, made again by the operator on every spec it decodes (codec.h's DecodeSpec),
// because a spec can slip past them (an older CRD, a cluster without its validation). Each
// returns one "<json path>: <what is wrong>" message per problem; empty means valid.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "operator/api/types.h"

namespace phalanx::op {

// The longest TrainingJob name whose children all have valid names: the job's name is the stem
// of every child's (operator/controller/desired_state.h), and "<job>-coordinator", a Service
// name, must be a DNS-1035 label of at most 63 characters (63 - len("-coordinator") = 51). The
// other derived names are shorter: "<job>-tasks" (Service), "<job>-task-<i>" with i < 10000
// (host name, a label), the label value phalanx.dev/job=<job>. The CRD's root CEL rule says
// the same; desired_state_test checks every derived name of a job this long.
inline constexpr int kMaxJobNameLength = 51;

// The checks on a job's name that the CRD makes with CEL: at most kMaxJobNameLength characters,
// and a DNS-1035 label (a lowercase letter first, then lowercase letters, digits and '-', not
// ending in '-'), because it names Services and host names, which allow no '.'.
// Returns one "metadata.name: <what is wrong>" message per problem; empty means valid.
std::vector<std::string> ValidateName(const std::string& name);

// The semantic checks the operator re-runs on a decoded spec: replicas in [1, 10000],
// maxRestarts >= 0, every duration > 0, backoff base <= max, heartbeat timeout > interval, exit
// codes in [0, 255] and never both fatal and retryable, and a template whose spec.containers
// lists at least one container, each (and each init container) with a name and an image (the
// Pod API refuses a pod otherwise; the CRD's generated schema says the same).
// Returns one "<json path>: <what is wrong>" message per problem; empty means valid.
std::vector<std::string> ValidateSpec(const TrainingJobSpec& spec);

// The container env names the operator sets and spec.template may not (task identity,
// coordinator address, credentials); the CRD's CEL rule (scripts/gen-crd-podtemplate.py
// RESERVED_ENV, the same list) refuses them at `kubectl apply`. Every other name the operator
// sets (MASTER_ADDR, RANK, JAX_*, ...) is a default that the container's own entry overrides.
inline constexpr const char* kReservedEnvNames[] = {"PHALANX_COORDINATOR",
                                                    "PHALANX_JOB",
                                                    "PHALANX_TASK_ID",
                                                    "PHALANX_NUM_TASKS",
                                                    "PHALANX_INCARNATION",
                                                    "PHALANX_TOKEN",
                                                    "PHALANX_TOKEN_FILE",
                                                    "PHALANX_NPROC_PER_NODE",
                                                    "PHALANX_CLIQUE_ADDRESS",
                                                    "PHALANX_NODE_IP",
                                                    "PHALANX_CLIQUE_TICKET_FILE",
                                                    "PHALANX_SPARE",
                                                    "PHALANX_POD_NAME"};
bool IsReservedEnvName(const std::string& name);

}  // namespace phalanx::op
