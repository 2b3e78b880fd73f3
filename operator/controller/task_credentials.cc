#include "operator/controller/task_credentials.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/auth/credentials.h"
#include "common/kube/object_meta.h"
#include "operator/controller/desired_state.h"

namespace phalanx::op {

namespace {

using kube::MetaString;
Json Str(const std::string& s) { return Json::string(s); }

}  // namespace

absl::StatusOr<TaskPodRef> TaskPodRefOf(const Json& pod) {
  TaskPodRef ref{MetaString(pod, "name"), MetaString(pod, "uid")};
  std::map<std::string, std::string> labels = kube::LabelsOf(pod);
  if (ref.name.empty() || ref.uid.empty() || !absl::SimpleAtoi(labels[kTaskLabel], &ref.index) ||
      !absl::SimpleAtoi(labels[kIncarnationLabel], &ref.incarnation) || ref.index < 0 ||
      ref.incarnation < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task pod '", ref.name, "' has no UID, task or incarnation: no credential for it"));
  }
  return ref;
}

Json DesiredTaskCredentialSecret(const Json& job, const TrainingJobSpec& spec,
                                 const TaskPodRef& pod, const std::string& token) {
  const std::string& pod_name = pod.name;
  const int index = pod.index;
  const Incarnation incarnation = pod.incarnation;
  const int n = std::max(1, spec.nproc_per_node);
  Json secret = Json::object();
  secret["apiVersion"] = Str("v1");
  secret["kind"] = Str("Secret");
  Json meta = Json::object();
  meta["name"] = Str(pod_name);
  meta["namespace"] = Str(MetaString(job, "namespace"));
  meta["labels"] = Json::object();
  meta["labels"][kJobLabel] = Str(MetaString(job, "name"));
  meta["labels"][kRoleLabel] = Str("credential");
  meta["labels"][kTaskLabel] = Str(absl::StrCat(index));
  meta["labels"][kIncarnationLabel] = Str(absl::StrCat(incarnation));
  // Owned by its pod, not the job: it goes with the pod (no delete right needed). Not a
  // controller reference and no blockOwnerDeletion, which would need the right to delete pods'
  // finalizers (OwnerReferencesPermissionEnforcement).
  Json owner = Json::object();
  owner["apiVersion"] = Str("v1");
  owner["kind"] = Str("Pod");
  owner["name"] = Str(pod_name);
  owner["uid"] = Str(pod.uid);
  meta["ownerReferences"] = Json::array({owner});
  secret["metadata"] = std::move(meta);
  secret["type"] = Str("Opaque");
  secret["stringData"] = Json::object();
  const auto [lo, hi] = CredentialIncarnations(spec, incarnation);
  for (int task = index * n; task < index * n + n; ++task) {
    secret["stringData"][n > 1 ? LocalTokenFileName(task) : std::string("token")] =
        Str(auth::TaskCredential(token, task, lo, hi));
  }
  return secret;
}

std::pair<Incarnation, Incarnation> CredentialIncarnations(const TrainingJobSpec& spec,
                                                           Incarnation incarnation) {
  if (spec.nproc_per_node <= 1) return {incarnation, incarnation};
  return {incarnation * kLocalIncarnationStride,
          incarnation * kLocalIncarnationStride + kLocalIncarnationStride - 1};
}

std::vector<std::pair<std::string, std::string>> TaskCredentialFiles(const TrainingJobSpec& spec,
                                                                     int index) {
  const int n = std::max(1, spec.nproc_per_node);
  if (n == 1) return {{"token", "token"}};
  std::vector<std::pair<std::string, std::string>> files;
  for (int task = index * n; task < index * n + n; ++task) {
    files.emplace_back(LocalTokenFileName(task), LocalTokenFileName(task));
  }
  return files;
}

bool JobUsesBoundCredentials(const TrainingJobStatus& status, bool has_children) {
  if (status.incarnation_bound_credentials.has_value()) {
    return *status.incarnation_bound_credentials;
  }
  return !has_children;  // children without the record: an operator from before made them
}

}  // namespace phalanx::op
