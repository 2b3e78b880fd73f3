// The children a TrainingJob should have, as pure functions of the job (CONVENTIONS.md "Operator
// shape": pure functions compute desired children; one reconciler talks to the client):
//   <job>-token          Secret with the per-job coordination token
//   <job>-coordinator    Pod running phalanx-coordinator, and a Service in front of it
//   <job>-tasks          headless Service giving task pods stable DNS names
//   <job>-task-<i>-<n>   one Pod per task i at incarnation n (the incarnation is in the name so a
//                        replacement never waits for its predecessor's graceful deletion)
// Every child carries a controller ownerReference to the job (deleting the job deletes them) and
// the labels below. Deterministic: the same inputs give byte-identical objects.
#pragma once

#include <cpprest/json.h>

#include <string>
#include <vector>

#include "operator/api/types.h"

namespace phalanx::op {

inline constexpr char kJobLabel[] = "phalanx.dev/job";
inline constexpr char kTaskLabel[] = "phalanx.dev/task";
inline constexpr char kIncarnationLabel[] = "phalanx.dev/incarnation";
inline constexpr char kRoleLabel[] = "phalanx.dev/role";  // "task" or "coordinator"
inline constexpr char kTokenKey[] = "token";
inline constexpr int kMasterPort = 29500;  // PyTorch rendezvous on task 0

std::string SecretName(const std::string& job);
std::string CoordinatorName(const std::string& job);  // the pod and its Service
std::string TasksServiceName(const std::string& job);
std::string TaskHostname(const std::string& job, int index);
std::string TaskPodName(const std::string& job, int index, Incarnation incarnation);

// Where and how the coordinator runs.
struct CoordinatorPlacement {
  std::string image = "ghcr.io/phalanx-dev/phalanx-coordinator:0.1";
  std::vector<std::string> command = {"phalanx-coordinator"};
  int port = 8470;  // gRPC; metrics on port + 1
  // Tasks reach the coordinator by its pod IP instead of its Service's DNS name (clusters
  // without DNS, such as the local cluster).
  bool address_by_pod_ip = false;
};

// The controller ownerReference to `job`.
Json OwnerReferenceTo(const Json& job);

Json DesiredSecret(const Json& job, const std::string& token);
Json DesiredCoordinatorPod(const Json& job, const TrainingJobSpec& spec,
                           const CoordinatorPlacement& placement);
Json DesiredCoordinatorService(const Json& job, const CoordinatorPlacement& placement);
Json DesiredTasksService(const Json& job);

// host:port the tasks dial; "" while address_by_pod_ip and the coordinator pod has no IP yet.
std::string CoordinatorAddress(const Json& job, const CoordinatorPlacement& placement,
                               const std::string& coordinator_pod_ip);

// The pod for task `index` at `incarnation`: the job's template with restartPolicy Never (the
// operator, not the kubelet, restarts tasks so that every restart is a new incarnation), stable
// hostname/subdomain, scheduler and priority pass-through, and the environment of DESIGN.md in
// every container: PHALANX_*, MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK, JAX_* .
Json DesiredTaskPod(const Json& job, const TrainingJobSpec& spec, int index,
                    Incarnation incarnation, const std::string& coordinator_address);

}  // namespace phalanx::op
