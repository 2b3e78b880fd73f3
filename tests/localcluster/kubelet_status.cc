#include "tests/localcluster/kubelet_status.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/kube/object_meta.h"

namespace phalanx::localcluster {
namespace {

using kube::StringAt;

constexpr char kPodIp[] = "127.0.0.1";
constexpr char kPreemptionTaint[] = "cloud.google.com/impending-node-termination";

using kube::FieldOrNull;

Json IpList() {
  Json ip = Json::object();
  ip["ip"] = Json::string(kPodIp);
  Json list = Json::array();
  list[0] = ip;
  return list;
}

bool HasCondition(const Json& status, const std::string& type) {
  const Json& conditions = FieldOrNull(status, "conditions");
  if (!conditions.is_array()) return false;
  for (const Json& c : conditions.as_array()) {
    if (StringAt(c, "type") == type) return true;
  }
  return false;
}

}  // namespace

void SetCondition(Json& status, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, absl::Time now) {
  Json& conditions = status["conditions"];
  if (!conditions.is_array()) conditions = Json::array();
  size_t index = conditions.size();
  for (size_t i = 0; i < conditions.size(); ++i) {
    if (StringAt(conditions[i], "type") == type) index = i;
  }
  const std::string want = value ? "True" : "False";
  std::string transition = kube::FormatKubeTime(now);
  if (index < conditions.size() && StringAt(conditions[index], "status") == want) {
    transition = StringAt(conditions[index], "lastTransitionTime");
  }
  Json condition = Json::object();
  condition["type"] = Json::string(type);
  condition["status"] = Json::string(want);
  condition["lastProbeTime"] = Json::null();
  condition["lastTransitionTime"] = Json::string(transition);
  if (!reason.empty()) condition["reason"] = Json::string(reason);
  if (!message.empty()) condition["message"] = Json::string(message);
  conditions[index] = condition;
}

Json TerminatedState(int exit_code, std::optional<int> signal, const std::string& reason,
                     const std::string& message, absl::Time started, absl::Time finished) {
  Json t = Json::object();
  t["exitCode"] = Json::number(exit_code);
  t["reason"] = Json::string(reason);
  if (signal.has_value()) t["signal"] = Json::number(*signal);
  if (!message.empty()) t["message"] = Json::string(message);
  t["startedAt"] = Json::string(kube::FormatKubeTime(started));
  t["finishedAt"] = Json::string(kube::FormatKubeTime(finished));
  return t;
}

Json PodStatus(const Json& pod, const PodReport& report, absl::Time now) {
  const bool running = report.container == ContainerPhase::kRunning;
  const bool finished = report.phase == "Succeeded" || report.phase == "Failed";
  const Json& old_status = FieldOrNull(pod, "status");
  Json status = old_status.is_object() ? old_status : Json::object();
  status["phase"] = Json::string(report.phase);
  status["hostIP"] = Json::string(report.host_ip);
  // No status.hostIPs: Kubernetes 1.28 added it, and the oldest API server Phalanx supports
  // (1.26) refuses it under strict field validation.
  status["podIP"] = Json::string(kPodIp);
  status["podIPs"] = IpList();
  status["startTime"] = Json::string(kube::FormatKubeTime(report.start_time));

  std::vector<const Json*> containers;
  const Json& spec_containers = FieldOrNull(FieldOrNull(pod, "spec"), "containers");
  if (spec_containers.is_array()) {
    for (const Json& c : spec_containers.as_array()) {
      containers.push_back(&c);
      if (!report.all_containers) break;
    }
  }
  std::vector<std::string> names;
  for (const Json* c : containers) names.push_back(StringAt(*c, "name"));

  // Bound by something other than the scheduler (spec.nodeName set at creation).
  if (!HasCondition(status, "PodScheduled"))
    SetCondition(status, "PodScheduled", true, "", "", now);
  SetCondition(status, "Initialized", true, "", "", now);
  const std::string reason = finished ? "PodCompleted" : "ContainersNotReady";
  const std::string message =
      finished ? ""
               : absl::StrCat("containers with unready status: [", absl::StrJoin(names, " "), "]");
  if (running) {
    SetCondition(status, "ContainersReady", true, "", "", now);
  } else {
    SetCondition(status, "ContainersReady", false, reason, message, now);
  }
  if (running && report.node_ready) {
    SetCondition(status, "Ready", true, "", "", now);
  } else if (running) {
    SetCondition(status, "Ready", false, "NodeNotReady", "node is not ready", now);
  } else {
    SetCondition(status, "Ready", false, reason, message, now);
  }
  if (report.disruption_target) {
    SetCondition(status, "DisruptionTarget", true, "TerminationByKubelet",
                 "node is being preempted", now);
  } else if (HasCondition(status, "DisruptionTarget")) {
    // Only the mark this kubelet set: a preemption called off (its taint removed by hand) no
    // longer disrupts the pod, as kube-controller-manager's pod GC resets a stale
    // DisruptionTarget. Marks from evictions through the API are not ours to clear.
    for (const Json& c : FieldOrNull(status, "conditions").as_array()) {
      if (StringAt(c, "type") == "DisruptionTarget" && StringAt(c, "status") == "True" &&
          StringAt(c, "reason") == "TerminationByKubelet") {
        SetCondition(status, "DisruptionTarget", false, "PreemptionCancelled",
                     "the node's preemption was called off", now);
        break;
      }
    }
  }

  Json statuses = Json::array();
  for (const Json* c : containers) {
    Json cs = Json::object();
    cs["name"] = Json::string(StringAt(*c, "name"));
    cs["image"] = Json::string(StringAt(*c, "image"));
    cs["imageID"] = Json::string("");
    cs["ready"] = Json::boolean(running && report.node_ready);
    cs["started"] = Json::boolean(running);
    cs["restartCount"] = Json::number(report.restart_count);
    Json state = Json::object();
    switch (report.container) {
      case ContainerPhase::kRunning:
        cs["containerID"] = Json::string(report.container_id);
        state["running"]["startedAt"] = Json::string(kube::FormatKubeTime(report.started_at));
        break;
      case ContainerPhase::kBackOff:
        state["waiting"]["reason"] = Json::string("CrashLoopBackOff");
        state["waiting"]["message"] = Json::string(report.waiting_message);
        break;
      case ContainerPhase::kTerminated:
        state["terminated"] = report.terminated;
        break;
      case ContainerPhase::kCreating:
        state["waiting"]["reason"] = Json::string(
            report.waiting_reason.empty() ? "ContainerCreating" : report.waiting_reason);
        if (!report.waiting_reason.empty()) {
          state["waiting"]["message"] = Json::string(report.waiting_message);
        }
        break;
    }
    cs["state"] = state;
    Json last = Json::object();
    if (!report.last_terminated.is_null()) last["terminated"] = report.last_terminated;
    cs["lastState"] = last;
    statuses[statuses.size()] = cs;
  }
  status["containerStatuses"] = statuses;
  return status;
}

Json NewNodeObject(const std::string& name, const std::map<std::string, std::string>& labels,
                   const std::vector<Json>& taints) {
  Json object = Json::object();
  object["apiVersion"] = Json::string("v1");
  object["kind"] = Json::string("Node");
  object["metadata"]["name"] = Json::string(name);
  Json label_json = Json::object();
  for (const auto& [k, v] : labels) label_json[k] = Json::string(v);
  label_json["kubernetes.io/hostname"] = Json::string(name);
  object["metadata"]["labels"] = label_json;
  Json taint_json = Json::array();
  for (const Json& taint : taints) taint_json[taint_json.size()] = taint;
  object["spec"]["taints"] = taint_json;
  return object;
}

bool AddPreemptionTaint(Json& node, absl::Time now) {
  Json& taints = node["spec"]["taints"];
  if (!taints.is_array()) taints = Json::array();
  for (const Json& t : taints.as_array()) {
    if (StringAt(t, "key") == kPreemptionTaint) return false;
  }
  Json taint = Json::object();
  taint["key"] = Json::string(kPreemptionTaint);
  taint["value"] = Json::string("true");
  taint["effect"] = Json::string("NoSchedule");
  taint["timeAdded"] = Json::string(kube::FormatKubeTime(now));
  taints[taints.size()] = taint;
  return true;
}

Json NodeStatus(const Json& old_status, const NodeReport& report, absl::Time now,
                absl::Duration heartbeat_period) {
  Json status = old_status.is_object() ? old_status : Json::object();
  for (const char* field : {"capacity", "allocatable"}) {
    Json resources = Json::object();
    resources["nvidia.com/gpu"] = Json::string(absl::StrCat(report.gpus));
    resources["cpu"] = Json::string("16");
    resources["memory"] = Json::string("64Gi");
    resources["pods"] = Json::string("110");
    status[field] = resources;
  }
  std::string heartbeat = kube::FormatKubeTime(now);
  // The heartbeat moves only when due (or the condition flips): an idle node is not rewritten.
  const Json& conditions = FieldOrNull(status, "conditions");
  for (size_t i = 0; conditions.is_array() && i < conditions.size(); ++i) {
    const Json& c = conditions.at(i);
    const std::optional<absl::Time> last = kube::ParseKubeTime(StringAt(c, "lastHeartbeatTime"));
    if (StringAt(c, "type") == "Ready" &&
        StringAt(c, "status") == (report.ready ? "True" : "False") && last.has_value() &&
        now - *last < heartbeat_period) {
      heartbeat = StringAt(c, "lastHeartbeatTime");
    }
  }
  SetCondition(status, "Ready", report.ready, report.ready ? "KubeletReady" : "KubeletNotReady",
               report.ready ? "kubelet is posting ready status" : "node was marked not ready", now);
  for (Json& c : status["conditions"].as_array()) {
    if (StringAt(c, "type") != "Ready") continue;
    c.erase("lastProbeTime");  // nodes carry heartbeats instead
    c["lastHeartbeatTime"] = Json::string(heartbeat);
  }
  Json internal = Json::object();
  internal["type"] = Json::string("InternalIP");
  internal["address"] = Json::string(report.ip);
  Json hostname = Json::object();
  hostname["type"] = Json::string("Hostname");
  hostname["address"] = Json::string(report.name);
  Json addresses = Json::array();
  addresses[0] = internal;
  addresses[1] = hostname;
  status["addresses"] = addresses;
  Json info = Json::object();
  info["kubeletVersion"] = Json::string("v1.32.0-phalanx");
  info["operatingSystem"] = Json::string("linux");
  info["architecture"] = Json::string("amd64");
  info["containerRuntimeVersion"] =
      Json::string(report.simulated ? "simulated://0" : "process://0");
  status["nodeInfo"] = info;
  return status;
}

}  // namespace phalanx::localcluster
