#include "operator/controller/schedulability.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/kube/object_meta.h"

namespace phalanx::op {
namespace {

constexpr char kCondition[] = "Unschedulable";

const Condition* Find(const std::vector<Condition>& conditions, const std::string& type) {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

}  // namespace

bool JobIsUnschedulable(const Json& job) {
  for (const Json& c :
       kube::ArrayOrEmpty(kube::FieldOrNull(job, "status"), "conditions").as_array()) {
    if (kube::StringAt(c, "type") == kCondition) return kube::StringAt(c, "status") == "True";
  }
  return false;
}

Next MarkUnschedulable(const PlanInputs& in, JobPass& pass) {
  std::vector<std::string> named;
  int count = 0;
  for (const TaskRecord& record : pass.tasks) {
    // Only the current incarnation's pod counts: a stale pod that never got a node is being
    // replaced already and says nothing about the job now.
    if (!record.pod.has_value() || record.pod->being_deleted || !record.pod->unschedulable) {
      continue;
    }
    if (++count > kMaxUnschedulableTasksNamed) continue;
    std::string why = record.pod->unschedulable_message.empty() ? std::string("no node fits")
                                                                : record.pod->unschedulable_message;
    if (why.size() > kMaxSchedulerMessage) why = why.substr(0, kMaxSchedulerMessage) + "...";
    named.push_back(absl::StrCat("task ", record.status.index, ": ", why));
  }
  const Condition* before = Find(pass.out.status.conditions, kCondition);
  const bool was = before != nullptr && before->status == "True";
  if (count == 0) {
    if (before == nullptr) return Next::kContinue;  // never unschedulable: no condition at all
    Mark(pass, kCondition, false, "AllTasksScheduled", "every task pod has a node", in.now);
    if (was) pass.out.events.push_back({false, "Scheduled", "every task pod has a node again"});
    return Next::kContinue;
  }
  std::string message = absl::StrJoin(named, "; ");
  if (count > kMaxUnschedulableTasksNamed) {
    absl::StrAppend(&message, "; and ", count - kMaxUnschedulableTasksNamed, " more");
  }
  Mark(pass, kCondition, true, "PodUnschedulable", message, in.now);
  if (!was) pass.out.events.push_back({true, "Unschedulable", message});
  return Next::kContinue;
}

}  // namespace phalanx::op
