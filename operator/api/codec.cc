#include "operator/api/codec.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/kube/object_meta.h"
#include "operator/api/shown.h"

namespace phalanx::op {
namespace {

using kube::FieldOrNull;

// Reads the typed fields of the spec, collecting one "<path>: <problem>" per mistyped field.
// Every Read* leaves `out` as it was (the default) when the field is absent or null.
class SpecReader {
 public:
  std::vector<std::string> TakeErrors() { return std::move(errors_); }

  void Error(const std::string& path, const std::string& what) {
    errors_.push_back(absl::StrCat(path, ": ", what));
  }

  // The field, or nullptr when `obj` lacks it or it is null (the apiserver drops such nulls).
  static const Json* Get(const Json& obj, const std::string& key) {
    const Json& v = FieldOrNull(obj, key);
    return v.is_null() ? nullptr : &v;
  }

  // An object field; nullptr (and an error when present but not an object) otherwise.
  const Json* Object(const Json& obj, const std::string& key, const std::string& path) {
    const Json* v = Get(obj, key);
    if (v != nullptr && !v->is_object()) {
      Error(path, absl::StrCat("must be an object, got ", Shown(*v)));
      return nullptr;
    }
    return v;
  }

  void Int(const Json& obj, const std::string& key, const std::string& path, int& out) {
    const Json* v = Get(obj, key);
    if (v == nullptr) return;
    if (!v->is_integer()) {
      Error(path, absl::StrCat("must be an integer, got ", Shown(*v)));
    } else if (!v->as_number().is_int32()) {
      Error(path, absl::StrCat("must be a 32-bit integer, got ", Shown(*v)));
    } else {
      out = v->as_integer();
    }
  }

  // True when the field is there and was read into `out`.
  bool Seconds(const Json& obj, const std::string& key, const std::string& path,
               absl::Duration& out) {
    const Json* v = Get(obj, key);
    if (v == nullptr) return false;
    if (!v->is_integer() || !v->as_number().is_int64()) {
      Error(path, absl::StrCat("must be an integer number of seconds, got ", Shown(*v)));
      return false;
    }
    out = absl::Seconds(v->as_number().to_int64());
    return true;
  }

  // Seconds for a field whose absence (or null) means "none".
  void OptionalSeconds(const Json& obj, const std::string& key, const std::string& path,
                       std::optional<absl::Duration>& out) {
    absl::Duration d;
    if (Seconds(obj, key, path, d)) out = d;
  }

  void Bool(const Json& obj, const std::string& key, const std::string& path, bool& out) {
    const Json* v = Get(obj, key);
    if (v == nullptr) return;
    if (!v->is_boolean()) {
      Error(path, absl::StrCat("must be a boolean, got ", Shown(*v)));
    } else {
      out = v->as_bool();
    }
  }

  void String(const Json& obj, const std::string& key, const std::string& path, std::string& out) {
    const Json* v = Get(obj, key);
    if (v == nullptr) return;
    if (!v->is_string()) {
      Error(path, absl::StrCat("must be a string, got ", Shown(*v)));
    } else {
      out = v->as_string();
    }
  }

  // A string that must be one of `values`: writes the matching enumerator.
  template <typename E>
  void Enum(const Json& obj, const std::string& key, const std::string& path,
            std::initializer_list<std::pair<const char*, E>> values, E& out) {
    std::string text;
    const size_t errors_before = errors_.size();
    String(obj, key, path, text);
    if (errors_.size() != errors_before || Get(obj, key) == nullptr) return;
    std::vector<std::string> names;
    for (const auto& [name, value] : values) {
      if (text == name) {
        out = value;
        return;
      }
      names.push_back(name);
    }
    Error(path, absl::StrCat("must be ", absl::StrJoin(names, " or "), ", got ", Quoted(text)));
  }

  void IntList(const Json& obj, const std::string& key, const std::string& path,
               std::vector<int>& out) {
    const Json* v = Get(obj, key);
    if (v == nullptr) return;
    if (!v->is_array()) {
      Error(path, absl::StrCat("must be a list of integers, got ", Shown(*v)));
      return;
    }
    std::vector<int> values;
    for (size_t i = 0; i < v->size(); ++i) {
      const Json& item = v->at(i);
      if (!item.is_integer() || !item.as_number().is_int32()) {
        Error(absl::StrCat(path, "[", i, "]"),
              absl::StrCat("must be a 32-bit integer, got ", Shown(item)));
      } else {
        values.push_back(item.as_integer());
      }
    }
    out = std::move(values);
  }

  void StringList(const Json& obj, const std::string& key, const std::string& path,
                  std::vector<std::string>& out) {
    const Json* v = Get(obj, key);
    if (v == nullptr) return;
    if (!v->is_array()) {
      Error(path, absl::StrCat("must be a list of strings, got ", Shown(*v)));
      return;
    }
    std::vector<std::string> values;
    for (size_t i = 0; i < v->size(); ++i) {
      const Json& item = v->at(i);
      if (!item.is_string()) {
        Error(absl::StrCat(path, "[", i, "]"), absl::StrCat("must be a string, got ", Shown(item)));
      } else {
        values.push_back(item.as_string());
      }
    }
    out = std::move(values);
  }

 private:
  std::vector<std::string> errors_;
};

void ReadFailurePolicy(SpecReader& r, const Json& fp, FailurePolicy& out) {
  const std::string p = "spec.failurePolicy.";
  r.Enum(fp, "restartScope", p + "restartScope",
         {{"Task", RestartScope::kTask}, {"Job", RestartScope::kJob}}, out.restart_scope);
  r.Int(fp, "maxRestarts", p + "maxRestarts", out.max_restarts);
  if (const Json* b = r.Object(fp, "backoff", p + "backoff")) {
    r.Seconds(*b, "baseSeconds", p + "backoff.baseSeconds", out.backoff.base);
    r.Seconds(*b, "maxSeconds", p + "backoff.maxSeconds", out.backoff.max);
  }
  r.IntList(fp, "fatalExitCodes", p + "fatalExitCodes", out.fatal_exit_codes);
  r.IntList(fp, "retryableExitCodes", p + "retryableExitCodes", out.retryable_exit_codes);
  r.StringList(fp, "fatalReasons", p + "fatalReasons", out.fatal_reasons);
  r.Bool(fp, "preemptionsCountTowardMaxRestarts", p + "preemptionsCountTowardMaxRestarts",
         out.preemptions_count_toward_max_restarts);
  r.Int(fp, "keepFailedPods", p + "keepFailedPods", out.keep_failed_pods);
}

// spec.coordinator: the Kubernetes-typed fields are kept whole once their JSON shape is right
// (an object, a list of objects, a map of strings); the API server checks the rest when it
// creates the pod, and a refusal shows on the job (ChildrenReady=False, FailedCreate).
void ReadCoordinator(SpecReader& r, const Json& c, CoordinatorSpec& out) {
  const std::string p = "spec.coordinator.";
  for (const auto& [key, field] :
       {std::pair<const char*, Json*>{"nodeSelector", &out.node_selector},
        {"annotations", &out.annotations}}) {
    if (const Json* m = r.Object(c, key, p + key)) {
      bool strings = true;
      for (const auto& [k, v] : m->as_object()) {
        if (!v.is_string()) {
          r.Error(absl::StrCat(p, key, ".", k), absl::StrCat("must be a string, got ", Shown(v)));
          strings = false;
        }
      }
      if (strings) *field = *m;
    }
  }
  for (const auto& [key, field] :
       {std::pair<const char*, Json*>{"affinity", &out.affinity}, {"resources", &out.resources}}) {
    if (const Json* o = r.Object(c, key, p + key)) *field = *o;
  }
  for (const char* key : {"requests", "limits"}) {
    if (const Json* q = r.Object(out.resources, key, absl::StrCat(p, "resources.", key))) {
      for (const auto& [name, v] : q->as_object()) {
        if (!v.is_string() && !v.is_number()) {
          r.Error(absl::StrCat(p, "resources.", key, ".", name),
                  absl::StrCat("must be a quantity (\"100m\", \"256Mi\", 1), got ", Shown(v)));
        }
      }
    }
  }
  if (const Json* t = SpecReader::Get(c, "tolerations")) {
    if (!t->is_array()) {
      r.Error(p + "tolerations", absl::StrCat("must be a list of tolerations, got ", Shown(*t)));
    } else {
      for (size_t i = 0; i < t->size(); ++i) {
        if (!t->at(i).is_object()) {
          r.Error(absl::StrCat(p, "tolerations[", i, "]"),
                  absl::StrCat("must be an object, got ", Shown(t->at(i))));
        }
      }
      out.tolerations = *t;
    }
  }
  if (const Json* s = SpecReader::Get(c, "imagePullSecrets")) {
    if (!s->is_array()) {
      r.Error(p + "imagePullSecrets",
              absl::StrCat("must be a list of {name: <Secret>}, got ", Shown(*s)));
    } else {
      for (size_t i = 0; i < s->size(); ++i) {
        const Json& name = FieldOrNull(s->at(i), "name");
        if (!name.is_string() || name.as_string().empty()) {
          r.Error(absl::StrCat(p, "imagePullSecrets[", i, "]"),
                  absl::StrCat("must be {name: <Secret>}, got ", Shown(s->at(i))));
        } else {
          out.image_pull_secrets.push_back(name.as_string());
        }
      }
    }
  }
  r.String(c, "priorityClassName", p + "priorityClassName", out.priority_class_name);
  r.String(c, "serviceAccountName", p + "serviceAccountName", out.service_account_name);
}

// --- status helpers: tolerant readers ---

std::string StringOr(const Json& obj, const std::string& key) {
  const Json& v = FieldOrNull(obj, key);
  return v.is_string() ? v.as_string() : "";
}

std::optional<int> OptInt(const Json& obj, const std::string& key) {
  const Json& v = FieldOrNull(obj, key);
  if (!v.is_integer() || !v.as_number().is_int32()) return std::nullopt;
  return v.as_integer();
}

int IntOr(const Json& obj, const std::string& key) { return OptInt(obj, key).value_or(0); }

int64_t Int64Or(const Json& obj, const std::string& key) {
  const Json& v = FieldOrNull(obj, key);
  return v.is_integer() && v.as_number().is_int64() ? v.as_number().to_int64() : 0;
}

double DoubleOr(const Json& obj, const std::string& key) {
  const Json& v = FieldOrNull(obj, key);
  return v.is_number() ? v.as_double() : 0;
}

std::optional<absl::Time> TimeOr(const Json& obj, const std::string& key) {
  const Json& v = FieldOrNull(obj, key);
  return v.is_string() ? kube::ParseKubeTime(v.as_string()) : std::nullopt;
}

// RFC 3339 in UTC; a fraction of a second only when there is one (goodput accounting and
// preemption deadlines keep sub-second times; Kubernetes' own writes are whole seconds).
std::string FormatStatusTime(absl::Time t) {
  if (t == absl::FromUnixSeconds(absl::ToUnixSeconds(t))) return kube::FormatKubeTime(t);
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", t, absl::UTCTimeZone());
}

void PutString(Json& obj, const char* key, const std::string& value) {
  if (!value.empty()) obj[key] = Json::string(value);
}

void PutTime(Json& obj, const char* key, const std::optional<absl::Time>& t) {
  if (t.has_value()) obj[key] = Json::string(FormatStatusTime(*t));
}

Json EncodeCondition(const Condition& c) {
  Json out = Json::object();
  out["type"] = Json::string(c.type);
  out["status"] = Json::string(c.status);
  PutString(out, "reason", c.reason);
  PutString(out, "message", c.message);
  out["lastTransitionTime"] = Json::string(FormatStatusTime(c.last_transition_time));
  out["observedGeneration"] = Json::number(c.observed_generation);
  return out;
}

Condition DecodeCondition(const Json& j) {
  Condition c;
  c.type = StringOr(j, "type");
  c.status = StringOr(j, "status");
  c.reason = StringOr(j, "reason");
  c.message = StringOr(j, "message");
  c.last_transition_time = TimeOr(j, "lastTransitionTime").value_or(absl::UnixEpoch());
  c.observed_generation = Int64Or(j, "observedGeneration");
  return c;
}

Json EncodeTask(const TaskStatus& t) {
  Json out = Json::object();
  out["index"] = Json::number(t.index);
  PutString(out, "pod", t.pod);
  PutString(out, "node", t.node);
  out["incarnation"] = Json::number(t.incarnation);
  PutString(out, "state", TaskStateName(t.state));
  out["restarts"] = Json::number(t.restarts);
  if (t.rank_restarts > 0) out["rankRestarts"] = Json::number(t.rank_restarts);
  if (t.rank_restarts_in_pod > 0) out["rankRestartsInPod"] = Json::number(t.rank_restarts_in_pod);
  PutTime(out, "recoveringSince", t.recovering_since);
  PutString(out, "lastFailureReason", t.last_failure_reason);
  if (t.last_exit_code.has_value()) out["lastExitCode"] = Json::number(*t.last_exit_code);
  PutTime(out, "preemptingSince", t.preempting_since);
  if (!t.recent_moves.empty()) {
    Json moves = Json::array();
    for (size_t i = 0; i < t.recent_moves.size(); ++i) {
      moves[i] = Json::string(FormatStatusTime(t.recent_moves[i]));
    }
    out["recentMoves"] = std::move(moves);
  }
  PutTime(out, "moveHeldUntil", t.move_held_until);
  PutString(out, "lastFailureMessage", t.last_failure_message);
  PutTime(out, "failureReportedAt", t.failure_reported_at);
  PutString(out, "spareOf", t.spare_of);
  return out;
}

TaskStatus DecodeTask(const Json& j) {
  TaskStatus t;
  t.index = IntOr(j, "index");
  t.pod = StringOr(j, "pod");
  t.node = StringOr(j, "node");
  t.incarnation = Int64Or(j, "incarnation");
  t.state = ParseTaskState(StringOr(j, "state"));
  t.restarts = IntOr(j, "restarts");
  t.rank_restarts = IntOr(j, "rankRestarts");
  t.rank_restarts_in_pod = IntOr(j, "rankRestartsInPod");
  t.recovering_since = TimeOr(j, "recoveringSince");
  t.last_failure_reason = StringOr(j, "lastFailureReason");
  t.last_exit_code = OptInt(j, "lastExitCode");
  t.preempting_since = TimeOr(j, "preemptingSince");
  for (const Json& m : kube::ArrayOrEmpty(j, "recentMoves").as_array()) {
    if (!m.is_string()) continue;
    if (std::optional<absl::Time> at = kube::ParseKubeTime(m.as_string())) {
      t.recent_moves.push_back(*at);
    }
  }
  t.move_held_until = TimeOr(j, "moveHeldUntil");
  t.last_failure_message = StringOr(j, "lastFailureMessage");
  t.failure_reported_at = TimeOr(j, "failureReportedAt");
  t.spare_of = StringOr(j, "spareOf");
  return t;
}

constexpr std::pair<TaskState, const char*> kTaskStateNames[] = {
    {TaskState::kPending, "Pending"},
    {TaskState::kRunning, "Running"},
    {TaskState::kSucceeded, "Succeeded"},
    {TaskState::kRestarting, "Restarting"},
    {TaskState::kBackingOff, "BackingOff"},
    {TaskState::kPreempting, "Preempting"},
    {TaskState::kTerminating, "Terminating"},
    {TaskState::kSuspended, "Suspended"},
    {TaskState::kFailed, "Failed"},
    {TaskState::kStopped, "Stopped"},
    {TaskState::kAwaitingExit, "AwaitingExit"},
};

}  // namespace

std::string TaskStateName(TaskState state) {
  for (const auto& [s, name] : kTaskStateNames) {
    if (s == state) return name;
  }
  return "";
}

TaskState ParseTaskState(const std::string& name) {
  for (const auto& [s, n] : kTaskStateNames) {
    if (n == name) return s;
  }
  return TaskState::kUnknown;
}

absl::StatusOr<TrainingJobSpec> DecodeSpec(const Json& job) {
  if (!job.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainingJob: must be a JSON object, got ", Shown(job)));
  }
  SpecReader r;
  const Json* spec = r.Object(job, "spec", "spec");
  if (spec == nullptr) {
    std::vector<std::string> errors = r.TakeErrors();
    return absl::InvalidArgumentError(errors.empty() ? "spec: required" : errors.front());
  }
  TrainingJobSpec out;
  if (SpecReader::Get(*spec, "replicas") == nullptr) r.Error("spec.replicas", "required");
  r.Int(*spec, "replicas", "spec.replicas", out.replicas);
  r.Int(*spec, "nprocPerNode", "spec.nprocPerNode", out.nproc_per_node);
  r.Int(*spec, "spares", "spec.spares", out.spares);
  if (const Json* tmpl = r.Object(*spec, "template", "spec.template")) out.pod_template = *tmpl;
  if (const Json* fp = r.Object(*spec, "failurePolicy", "spec.failurePolicy")) {
    ReadFailurePolicy(r, *fp, out.failure_policy);
  }
  if (const Json* p = r.Object(*spec, "preemption", "spec.preemption")) {
    r.Seconds(*p, "checkpointGraceSeconds", "spec.preemption.checkpointGraceSeconds",
              out.preemption.checkpoint_grace);
    r.Bool(*p, "onNodeTaints", "spec.preemption.onNodeTaints", out.preemption.on_node_taints);
    r.Bool(*p, "onDisruptionTarget", "spec.preemption.onDisruptionTarget",
           out.preemption.on_disruption_target);
  }
  if (const Json* c = r.Object(*spec, "coordination", "spec.coordination")) {
    const std::string p = "spec.coordination.";
    r.Seconds(*c, "heartbeatIntervalSeconds", p + "heartbeatIntervalSeconds",
              out.coordination.heartbeat_interval);
    r.Seconds(*c, "heartbeatTimeoutSeconds", p + "heartbeatTimeoutSeconds",
              out.coordination.heartbeat_timeout);
    r.Seconds(*c, "barrierTimeoutSeconds", p + "barrierTimeoutSeconds",
              out.coordination.barrier_timeout);
    r.Seconds(*c, "shutdownTimeoutSeconds", p + "shutdownTimeoutSeconds",
              out.coordination.shutdown_timeout);
  }
  r.Bool(*spec, "suspend", "spec.suspend", out.suspend);
  r.OptionalSeconds(*spec, "activeDeadlineSeconds", "spec.activeDeadlineSeconds",
                    out.active_deadline);
  r.OptionalSeconds(*spec, "ttlSecondsAfterFinished", "spec.ttlSecondsAfterFinished",
                    out.ttl_after_finished);
  if (const Json* g = r.Object(*spec, "gang", "spec.gang")) {
    r.OptionalSeconds(*g, "timeoutSeconds", "spec.gang.timeoutSeconds", out.gang_timeout);
  }
  if (const Json* pl = r.Object(*spec, "placement", "spec.placement")) {
    r.String(*pl, "topologyKey", "spec.placement.topologyKey", out.placement.topology_key);
    r.Bool(*pl, "exclusive", "spec.placement.exclusive", out.placement.exclusive);
  }
  if (const Json* a = r.Object(*spec, "nodeAgent", "spec.nodeAgent")) {
    r.Bool(*a, "enabled", "spec.nodeAgent.enabled", out.node_agent);
  }
  r.String(*spec, "schedulerName", "spec.schedulerName", out.scheduler_name);
  r.String(*spec, "priorityClassName", "spec.priorityClassName", out.priority_class_name);
  r.Enum(*spec, "successPolicy", "spec.successPolicy",
         {{"AllTasks", SuccessPolicy::kAllTasks}, {"TaskZero", SuccessPolicy::kTaskZero}},
         out.success_policy);
  if (const Json* c = r.Object(*spec, "coordinator", "spec.coordinator")) {
    ReadCoordinator(r, *c, out.coordinator);
  }
  if (std::vector<std::string> errors = r.TakeErrors(); !errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
  }
  return out;
}

Json EncodeStatus(const TrainingJobStatus& s) {
  Json out = Json::object();
  out["phase"] = Json::string(s.phase);
  Json conditions = Json::array();
  for (size_t i = 0; i < s.conditions.size(); ++i) conditions[i] = EncodeCondition(s.conditions[i]);
  out["conditions"] = std::move(conditions);
  Json tasks = Json::array();
  for (size_t i = 0; i < s.tasks.size(); ++i) tasks[i] = EncodeTask(s.tasks[i]);
  out["tasks"] = std::move(tasks);
  out["readyTasks"] = Json::number(s.ready_tasks);
  out["restarts"] = Json::number(s.restarts);
  if (s.rank_restarts > 0) out["rankRestarts"] = Json::number(s.rank_restarts);
  if (s.last_recovery_seconds.has_value()) {
    out["lastRecoverySeconds"] = Json::number(*s.last_recovery_seconds);
  }
  out["preemptions"] = Json::number(s.preemptions);
  out["observedGeneration"] = Json::number(s.observed_generation);
  PutTime(out, "startTime", s.start_time);
  PutTime(out, "completionTime", s.completion_time);
  PutTime(out, "lastRestartTime", s.last_restart_time);
  out["productiveSeconds"] = Json::number(s.productive_seconds);
  out["productiveAtLastRestart"] = Json::number(s.productive_at_last_restart);
  if (s.gang_releases > 0) out["gangReleases"] = Json::number(s.gang_releases);
  if (s.incarnation_bound_credentials.has_value()) {
    out["incarnationBoundCredentials"] = Json::boolean(*s.incarnation_bound_credentials);
  }
  PutTime(out, "gangReleasedAt", s.gang_released_at);
  out["lostSeconds"] = Json::number(s.lost_seconds);
  PutTime(out, "accountedUntil", s.accounted_until);
  if (s.goodput != GoodputStatus{}) {
    const GoodputStatus& g = s.goodput;
    Json goodput = Json::object();
    goodput["detectionSeconds"] = Json::number(g.detection_seconds);
    goodput["coordinatorOutageSeconds"] = Json::number(g.coordinator_outage_seconds);
    goodput["rolledBackSeconds"] = Json::number(g.rolled_back_seconds);
    goodput["regroupSeconds"] = Json::number(g.regroup_seconds);
    goodput["beforeFirstStepSeconds"] = Json::number(g.before_first_step_seconds);
    PutTime(goodput, "firstStepTime", g.first_step_time);
    PutTime(goodput, "runningSince", g.running_since);
    PutTime(goodput, "runningUntil", g.running_until);
    PutTime(goodput, "coordinatorDownSince", g.coordinator_down_since);
    PutTime(goodput, "detectionBookedUntil", g.detection_booked_until);
    PutString(goodput, "rollbackCoordinator", g.rollback_coordinator);
    if (g.rollback_booked > 0) goodput["rollbackBookedSeconds"] = Json::number(g.rollback_booked);
    out["goodput"] = std::move(goodput);
  }
  if (s.spares != TrainingJobStatus::Spares{}) {
    Json spares = Json::object();
    spares["total"] = Json::number(s.spares.total);
    spares["ready"] = Json::number(s.spares.ready);
    spares["takeovers"] = Json::number(s.spares.takeovers);
    Json generations = Json::array();
    for (size_t i = 0; i < s.spares.generations.size(); ++i) {
      generations[i] = Json::number(s.spares.generations[i]);
    }
    spares["generations"] = std::move(generations);
    out["spares"] = std::move(spares);
  }
  if (s.coordinator != CoordinatorStatus{}) {
    const CoordinatorStatus& c = s.coordinator;
    Json coordinator = Json::object();
    // As before the TLS decision was recorded: `restarts` (0 too) whenever anything else is.
    CoordinatorStatus without_tls = c;
    without_tls.tls.reset();
    if (without_tls != CoordinatorStatus{}) coordinator["restarts"] = Json::number(c.restarts);
    if (c.moves > 0) coordinator["moves"] = Json::number(c.moves);
    PutString(coordinator, "movingFrom", c.moving_from);
    PutString(coordinator, "lastMovedPodUID", c.last_moved_pod);
    if (c.last_exit_code.has_value()) coordinator["lastExitCode"] = Json::number(*c.last_exit_code);
    PutString(coordinator, "lastExitReason", c.last_exit_reason);
    PutString(coordinator, "lastExitMessage", c.last_exit_message);
    PutTime(coordinator, "lastRestartTime", c.last_restart_time);
    PutTime(coordinator, "restartAfter", c.restart_after);
    PutString(coordinator, "lastFailedPodUID", c.last_failed_pod);
    if (c.tls.has_value()) coordinator["tls"] = Json::boolean(*c.tls);
    out["coordinator"] = std::move(coordinator);
  }
  return out;
}

TrainingJobStatus DecodeStatus(const Json& job) {
  TrainingJobStatus s;
  const Json& j = FieldOrNull(job, "status");
  if (!j.is_object()) return s;
  if (std::string phase = StringOr(j, "phase"); !phase.empty()) s.phase = phase;
  for (const Json& c : kube::ArrayOrEmpty(j, "conditions").as_array()) {
    if (c.is_object()) s.conditions.push_back(DecodeCondition(c));
  }
  for (const Json& t : kube::ArrayOrEmpty(j, "tasks").as_array()) {
    if (t.is_object()) s.tasks.push_back(DecodeTask(t));
  }
  s.ready_tasks = IntOr(j, "readyTasks");
  s.restarts = IntOr(j, "restarts");
  s.rank_restarts = IntOr(j, "rankRestarts");
  if (const Json& r = kube::FieldOrNull(j, "lastRecoverySeconds"); r.is_number()) {
    s.last_recovery_seconds = r.as_double();
  }
  s.preemptions = IntOr(j, "preemptions");
  s.observed_generation = Int64Or(j, "observedGeneration");
  s.start_time = TimeOr(j, "startTime");
  s.completion_time = TimeOr(j, "completionTime");
  s.last_restart_time = TimeOr(j, "lastRestartTime");
  s.productive_seconds = DoubleOr(j, "productiveSeconds");
  s.productive_at_last_restart = DoubleOr(j, "productiveAtLastRestart");
  s.gang_releases = IntOr(j, "gangReleases");
  if (const Json& bound = kube::FieldOrNull(j, "incarnationBoundCredentials"); bound.is_boolean()) {
    s.incarnation_bound_credentials = bound.as_bool();
  }
  if (const Json& spares = kube::FieldOrNull(j, "spares"); spares.is_object()) {
    s.spares = {IntOr(spares, "total"), IntOr(spares, "ready"), IntOr(spares, "takeovers"), {}};
    for (const Json& g : kube::ArrayOrEmpty(spares, "generations").as_array()) {
      s.spares.generations.push_back(g.is_integer() ? g.as_integer() : 0);
    }
  }
  s.gang_released_at = TimeOr(j, "gangReleasedAt");
  s.lost_seconds = DoubleOr(j, "lostSeconds");
  s.accounted_until = TimeOr(j, "accountedUntil");
  if (const Json& g = FieldOrNull(j, "goodput"); g.is_object()) {
    s.goodput.detection_seconds = DoubleOr(g, "detectionSeconds");
    s.goodput.coordinator_outage_seconds = DoubleOr(g, "coordinatorOutageSeconds");
    s.goodput.rolled_back_seconds = DoubleOr(g, "rolledBackSeconds");
    s.goodput.regroup_seconds = DoubleOr(g, "regroupSeconds");
    s.goodput.before_first_step_seconds = DoubleOr(g, "beforeFirstStepSeconds");
    s.goodput.first_step_time = TimeOr(g, "firstStepTime");
    s.goodput.running_since = TimeOr(g, "runningSince");
    s.goodput.running_until = TimeOr(g, "runningUntil");
    s.goodput.coordinator_down_since = TimeOr(g, "coordinatorDownSince");
    s.goodput.detection_booked_until = TimeOr(g, "detectionBookedUntil");
    s.goodput.rollback_coordinator = StringOr(g, "rollbackCoordinator");
    s.goodput.rollback_booked = DoubleOr(g, "rollbackBookedSeconds");
  }
  if (const Json& c = FieldOrNull(j, "coordinator"); c.is_object()) {
    s.coordinator.restarts = IntOr(c, "restarts");
    s.coordinator.moves = IntOr(c, "moves");
    s.coordinator.moving_from = StringOr(c, "movingFrom");
    s.coordinator.last_moved_pod = StringOr(c, "lastMovedPodUID");
    s.coordinator.last_exit_code = OptInt(c, "lastExitCode");
    s.coordinator.last_exit_reason = StringOr(c, "lastExitReason");
    s.coordinator.last_exit_message = StringOr(c, "lastExitMessage");
    s.coordinator.last_restart_time = TimeOr(c, "lastRestartTime");
    s.coordinator.restart_after = TimeOr(c, "restartAfter");
    s.coordinator.last_failed_pod = StringOr(c, "lastFailedPodUID");
    if (const Json& tls = kube::FieldOrNull(c, "tls"); tls.is_boolean()) {
      s.coordinator.tls = tls.as_bool();
    }
  }
  return s;
}

std::optional<Condition> FindCondition(const std::vector<Condition>& conditions,
                                       const std::string& type) {
  for (const Condition& c : conditions) {
    if (c.type == type) return c;
  }
  return std::nullopt;
}

bool SetCondition(std::vector<Condition>& conditions, Condition c, absl::Time now) {
  const absl::Time at = absl::FromUnixSeconds(absl::ToUnixSeconds(now));
  for (Condition& existing : conditions) {
    if (existing.type != c.type) continue;
    bool changed = false;
    if (existing.status != c.status) {
      existing.status = std::move(c.status);
      existing.last_transition_time = at;
      changed = true;
    }
    auto update = [&changed](auto& field, auto& value) {
      if (field != value) {
        field = std::move(value);
        changed = true;
      }
    };
    update(existing.reason, c.reason);
    update(existing.message, c.message);
    update(existing.observed_generation, c.observed_generation);
    return changed;
  }
  c.last_transition_time = at;
  conditions.push_back(std::move(c));
  return true;
}

}  // namespace phalanx::op
