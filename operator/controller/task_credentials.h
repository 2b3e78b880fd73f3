// Credentials bound to a task pod's incarnation (ADR 0006, common/auth/credentials.h v2), so a
// zombie of an earlier incarnation (a partitioned process that kept its credential) cannot
// register as a newer one. The first pods (incarnation 0) find theirs in the job's Secret, written
// with it (bound to incarnation 0): creating a job costs no request more than before (issue 33
// counts them). Every later pod, a replacement, gets its own Secret, named as the pod, holding its
// tasks' credentials for its incarnation only: one request per replacement.
//
// The Secret is owned by its pod (the garbage collector deletes it with the pod, so the operator
// needs no right to delete Secrets) and therefore made right after the pod, once its UID is
// known; the kubelet retries the volume until it exists. The operator may not read Secrets
// (ADR 0003): after its own restart it writes the Secret of every task pod that has not started
// yet once more (AlreadyExists is success), which covers a crash between the two creates.
//
// Jobs whose Secret an operator from before this wrote keep the unbound credentials in their
// Secret for life (status.incarnationBoundCredentials records which a job has).
// Thread-safety: pure functions.
#pragma once

#include <cpprest/json.h>

#include <string>
#include <utility>
#include <vector>

#include "operator/api/types.h"

namespace phalanx::op {

// A task pod as its Secret needs it: its name and UID (the Secret's owner), task and
// incarnation.
struct TaskPodRef {
  std::string name;
  std::string uid;
  int index = -1;
  Incarnation incarnation = -1;
};
// `pod` (as the API server returned it) as a TaskPodRef; InvalidArgument when it lacks its UID
// or its task and incarnation labels.
absl::StatusOr<TaskPodRef> TaskPodRefOf(const Json& pod);

// The Secret of task pod `pod`: the credential of each of the pod's tasks, bound to the pod's
// incarnation (with nprocPerNode > 1, to the launcher's range of it: kLocalIncarnationStride).
Json DesiredTaskCredentialSecret(const Json& job, const TrainingJobSpec& spec,
                                 const TaskPodRef& pod, const std::string& token);

// The incarnations the credentials of a task pod at `incarnation` cover: that one, or with
// nprocPerNode > 1 the launcher's range of it (its local ranks' in-place restarts are
// I * kLocalIncarnationStride + r).
std::pair<Incarnation, Incarnation> CredentialIncarnations(const TrainingJobSpec& spec,
                                                           Incarnation incarnation);
// Whether a task pod at `incarnation` has a Secret of its own (a replacement), rather than its
// keys in the job's Secret (the first pod of its task).
inline bool HasOwnCredentialSecret(Incarnation incarnation) { return incarnation > 0; }

// The files a task pod of task `index` mounts from its own Secret ({key, file name}), as the
// token volume's items: "token", or token-<task> for each local task.
std::vector<std::pair<std::string, std::string>> TaskCredentialFiles(const TrainingJobSpec& spec,
                                                                     int index);

// Whether `status`'s job uses bound credentials: recorded when its Secret is first written
// (an operator from before did not record it: its jobs keep the unbound ones).
bool JobUsesBoundCredentials(const TrainingJobStatus& status, bool has_children);

}  // namespace phalanx::op
