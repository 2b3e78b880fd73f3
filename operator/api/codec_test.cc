// DecodeSpec / ValidateSpec / EncodeStatus / DecodeStatus / SetCondition as pure functions.
#include "operator/api/codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "operator/api/validation.h"

namespace phalanx::op {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kTemplate[] =
    R"({"spec":{"containers":[{"name":"worker","image":"phalanx/sample-worker:dev",)"
    R"("command":["phalanx-sample-worker"]}]}})";

// A job whose spec is `spec_fields` (JSON object members, without braces) plus a template
// unless the fields have their own.
Json Job(const std::string& spec_fields) {
  std::string spec = "{";
  if (spec_fields.find(R"("template":)") == std::string::npos) {
    absl::StrAppend(&spec, R"("template":)", kTemplate, spec_fields.empty() ? "" : ",");
  }
  absl::StrAppend(&spec, spec_fields);
  return Json::parse(absl::StrCat(R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob",)",
                                  R"("metadata":{"name":"j"},"spec":)", spec, "}}"));
}

TrainingJobSpec Decoded(const std::string& spec_fields) {
  absl::StatusOr<TrainingJobSpec> spec = DecodeSpec(Job(spec_fields));
  EXPECT_THAT(spec.status(), IsOk());
  return spec.ok() ? *spec : TrainingJobSpec{};
}

TEST(DecodeSpec, OnlyReplicasAndTemplate_TakesEveryDefault) {
  TrainingJobSpec expected;
  expected.replicas = 4;
  expected.pod_template = Json::parse(kTemplate);
  EXPECT_EQ(Decoded(R"("replicas":4)"), expected);
  // The defaults DESIGN.md and the CRD promise, spelled out once.
  EXPECT_EQ(expected.failure_policy.restart_scope, RestartScope::kTask);
  EXPECT_EQ(expected.failure_policy.max_restarts, 3);
  EXPECT_EQ(expected.failure_policy.backoff.base, absl::Seconds(10));
  EXPECT_EQ(expected.failure_policy.backoff.max, absl::Seconds(300));
  EXPECT_FALSE(expected.failure_policy.preemptions_count_toward_max_restarts);
  EXPECT_EQ(expected.failure_policy.fatal_reasons, std::vector<std::string>{"InvalidImageName"});
  EXPECT_EQ(expected.failure_policy.keep_failed_pods, 3);
  EXPECT_EQ(expected.preemption.checkpoint_grace, absl::Seconds(60));
  EXPECT_TRUE(expected.preemption.on_node_taints);
  EXPECT_TRUE(expected.preemption.on_disruption_target);
  EXPECT_EQ(expected.coordination.heartbeat_interval, absl::Seconds(1));
  EXPECT_EQ(expected.coordination.heartbeat_timeout, absl::Seconds(10));
  EXPECT_EQ(expected.coordination.barrier_timeout, absl::Seconds(300));
  EXPECT_EQ(expected.coordination.shutdown_timeout, absl::Seconds(60));
  EXPECT_EQ(expected.success_policy, SuccessPolicy::kAllTasks);
}

TEST(DecodeSpec, NullsAndEmptyObjects_ReadAsAbsent) {
  TrainingJobSpec expected = Decoded(R"("replicas":2)");
  EXPECT_EQ(Decoded(R"("replicas":2,"failurePolicy":null,"preemption":{},"suspend":null,)"
                    R"("coordination":{"heartbeatTimeoutSeconds":null},"successPolicy":null)"),
            expected);
}

TEST(DecodeSpec, EachField_IsRead) {
  struct Case {
    std::string name;
    std::string fields;
    std::function<void(TrainingJobSpec&)> expect;  // applied to the default spec
  };
  const std::vector<Case> cases = {
      {"replicas", R"("replicas":7)", [](TrainingJobSpec& s) { s.replicas = 7; }},
      {"restartScope", R"("failurePolicy":{"restartScope":"Job"})",
       [](TrainingJobSpec& s) { s.failure_policy.restart_scope = RestartScope::kJob; }},
      {"maxRestarts", R"("failurePolicy":{"maxRestarts":9})",
       [](TrainingJobSpec& s) { s.failure_policy.max_restarts = 9; }},
      {"keepFailedPods", R"("failurePolicy":{"keepFailedPods":0})",
       [](TrainingJobSpec& s) { s.failure_policy.keep_failed_pods = 0; }},
      {"backoff", R"("failurePolicy":{"backoff":{"baseSeconds":2,"maxSeconds":20}})",
       [](TrainingJobSpec& s) {
         s.failure_policy.backoff = {absl::Seconds(2), absl::Seconds(20)};
       }},
      {"fatalExitCodes", R"("failurePolicy":{"fatalExitCodes":[2,127]})",
       [](TrainingJobSpec& s) {
         s.failure_policy.fatal_exit_codes = {2, 127};
       }},
      {"retryableExitCodes", R"("failurePolicy":{"retryableExitCodes":[1,137]})",
       [](TrainingJobSpec& s) {
         s.failure_policy.retryable_exit_codes = {1, 137};
       }},
      {"fatalReasons", R"("failurePolicy":{"fatalReasons":["OOMKilled"]})",
       [](TrainingJobSpec& s) { s.failure_policy.fatal_reasons = {"OOMKilled"}; }},
      {"fatalReasonsEmptyReplacesTheDefault", R"("failurePolicy":{"fatalReasons":[]})",
       [](TrainingJobSpec& s) { s.failure_policy.fatal_reasons.clear(); }},
      {"preemptionsCount", R"("failurePolicy":{"preemptionsCountTowardMaxRestarts":true})",
       [](TrainingJobSpec& s) { s.failure_policy.preemptions_count_toward_max_restarts = true; }},
      {"checkpointGrace", R"("preemption":{"checkpointGraceSeconds":15})",
       [](TrainingJobSpec& s) { s.preemption.checkpoint_grace = absl::Seconds(15); }},
      {"onNodeTaints", R"("preemption":{"onNodeTaints":false})",
       [](TrainingJobSpec& s) { s.preemption.on_node_taints = false; }},
      {"onDisruptionTarget", R"("preemption":{"onDisruptionTarget":false})",
       [](TrainingJobSpec& s) { s.preemption.on_disruption_target = false; }},
      {"heartbeatInterval", R"("coordination":{"heartbeatIntervalSeconds":3})",
       [](TrainingJobSpec& s) { s.coordination.heartbeat_interval = absl::Seconds(3); }},
      {"heartbeatTimeout", R"("coordination":{"heartbeatTimeoutSeconds":30})",
       [](TrainingJobSpec& s) { s.coordination.heartbeat_timeout = absl::Seconds(30); }},
      {"barrierTimeout", R"("coordination":{"barrierTimeoutSeconds":900})",
       [](TrainingJobSpec& s) { s.coordination.barrier_timeout = absl::Seconds(900); }},
      {"shutdownTimeout", R"("coordination":{"shutdownTimeoutSeconds":5})",
       [](TrainingJobSpec& s) { s.coordination.shutdown_timeout = absl::Seconds(5); }},
      {"suspend", R"("suspend":true)", [](TrainingJobSpec& s) { s.suspend = true; }},
      {"activeDeadlineSeconds", R"("activeDeadlineSeconds":3600)",
       [](TrainingJobSpec& s) { s.active_deadline = absl::Hours(1); }},
      {"ttlSecondsAfterFinishedZero", R"("ttlSecondsAfterFinished":0)",
       [](TrainingJobSpec& s) { s.ttl_after_finished = absl::ZeroDuration(); }},
      {"gangTimeout", R"("gang":{"timeoutSeconds":120})",
       [](TrainingJobSpec& s) { s.gang_timeout = absl::Minutes(2); }},
      {"placement", R"("placement":{"topologyKey":"example.dev/rack","exclusive":true})",
       [](TrainingJobSpec& s) {
         s.placement = {.topology_key = "example.dev/rack", .exclusive = true};
       }},
      {"lifecycleNullsAreUnset", R"("activeDeadlineSeconds":null,"ttlSecondsAfterFinished":null)",
       [](TrainingJobSpec&) {}},
      {"schedulerName", R"("schedulerName":"volcano")",
       [](TrainingJobSpec& s) { s.scheduler_name = "volcano"; }},
      {"priorityClassName", R"("priorityClassName":"high")",
       [](TrainingJobSpec& s) { s.priority_class_name = "high"; }},
      {"successPolicy", R"("successPolicy":"TaskZero")",
       [](TrainingJobSpec& s) { s.success_policy = SuccessPolicy::kTaskZero; }},
      {"unknownFieldsIgnored", R"("futureField":{"x":1})", [](TrainingJobSpec&) {}},
      {"coordinator",
       R"("coordinator":{"nodeSelector":{"pool":"cpu"},"tolerations":[{"operator":"Exists"}],)"
       R"("affinity":{"nodeAffinity":{}},"resources":{"requests":{"cpu":"1","memory":1024}},)"
       R"("priorityClassName":"critical","imagePullSecrets":[{"name":"regcred"}],)"
       R"("serviceAccountName":"coord","annotations":{"a":"b"}})",
       [](TrainingJobSpec& s) {
         CoordinatorSpec& c = s.coordinator;
         c.node_selector = Json::parse(R"({"pool":"cpu"})");
         c.tolerations = Json::parse(R"([{"operator":"Exists"}])");
         c.affinity = Json::parse(R"({"nodeAffinity":{}})");
         c.resources = Json::parse(R"({"requests":{"cpu":"1","memory":1024}})");
         c.priority_class_name = "critical";
         c.image_pull_secrets = {"regcred"};
         c.service_account_name = "coord";
         c.annotations = Json::parse(R"({"a":"b"})");
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string fields =
        c.name == "replicas" ? c.fields : absl::StrCat(R"("replicas":1,)", c.fields);
    TrainingJobSpec expected = Decoded(R"("replicas":1)");
    c.expect(expected);
    EXPECT_EQ(Decoded(fields), expected);
  }
}

TEST(DecodeSpec, TemplateIsKeptWhole) {
  const std::string tmpl =
      R"({"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"w","image":"i",)"
      R"("resources":{"limits":{"nvidia.com/gpu":8}}}],"unknownPodField":[1,2]}})";
  TrainingJobSpec spec = Decoded(absl::StrCat(R"("replicas":1,"template":)", tmpl));
  EXPECT_EQ(spec.pod_template, Json::parse(tmpl));
}

TEST(DecodeSpec, BadValues_AreInvalidArgumentNamingTheirPath) {
  struct Case {
    std::string name;
    std::string fields;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"replicasMissing", R"("suspend":false)", "spec.replicas: required"},
      {"replicasString", R"("replicas":"4")", R"(spec.replicas: must be an integer, got "4")"},
      {"replicasFloat", R"("replicas":1.5)", "spec.replicas: must be an integer, got 1.5"},
      {"replicasHuge", R"("replicas":10000000000)", "spec.replicas: must be a 32-bit integer"},
      {"restartScopeEnum", R"("replicas":1,"failurePolicy":{"restartScope":"Pod"})",
       R"(spec.failurePolicy.restartScope: must be Task or Job, got "Pod")"},
      {"restartScopeType", R"("replicas":1,"failurePolicy":{"restartScope":1})",
       "spec.failurePolicy.restartScope: must be a string, got 1"},
      {"failurePolicyType", R"("replicas":1,"failurePolicy":[])",
       "spec.failurePolicy: must be an object, got []"},
      {"maxRestartsType", R"("replicas":1,"failurePolicy":{"maxRestarts":true})",
       "spec.failurePolicy.maxRestarts: must be an integer, got true"},
      {"backoffType", R"("replicas":1,"failurePolicy":{"backoff":"10s"})",
       R"(spec.failurePolicy.backoff: must be an object, got "10s")"},
      {"backoffSeconds", R"("replicas":1,"failurePolicy":{"backoff":{"baseSeconds":"10s"}})",
       "spec.failurePolicy.backoff.baseSeconds: must be an integer number of seconds"},
      {"exitCodesType", R"("replicas":1,"failurePolicy":{"fatalExitCodes":2})",
       "spec.failurePolicy.fatalExitCodes: must be a list of integers, got 2"},
      {"exitCodeItem", R"("replicas":1,"failurePolicy":{"retryableExitCodes":[1,"x"]})",
       R"(spec.failurePolicy.retryableExitCodes[1]: must be a 32-bit integer, got "x")"},
      {"fatalReasonItem", R"("replicas":1,"failurePolicy":{"fatalReasons":[5]})",
       "spec.failurePolicy.fatalReasons[0]: must be a string, got 5"},
      {"preemptionsCountType",
       R"("replicas":1,"failurePolicy":{"preemptionsCountTowardMaxRestarts":"yes"})",
       "spec.failurePolicy.preemptionsCountTowardMaxRestarts: must be a boolean"},
      {"preemptionType", R"("replicas":1,"preemption":true)",
       "spec.preemption: must be an object, got true"},
      {"deadlineType", R"("replicas":1,"activeDeadlineSeconds":"1h")",
       "spec.activeDeadlineSeconds: must be an integer number of seconds"},
      {"graceType", R"("replicas":1,"preemption":{"checkpointGraceSeconds":1.5})",
       "spec.preemption.checkpointGraceSeconds: must be an integer number of seconds"},
      {"onNodeTaintsType", R"("replicas":1,"preemption":{"onNodeTaints":1})",
       "spec.preemption.onNodeTaints: must be a boolean, got 1"},
      {"heartbeatType", R"("replicas":1,"coordination":{"heartbeatTimeoutSeconds":"10"})",
       "spec.coordination.heartbeatTimeoutSeconds: must be an integer number of seconds"},
      {"suspendType", R"("replicas":1,"suspend":"true")",
       R"(spec.suspend: must be a boolean, got "true")"},
      {"schedulerNameType", R"("replicas":1,"schedulerName":{})",
       "spec.schedulerName: must be a string, got {}"},
      {"successPolicyEnum", R"("replicas":1,"successPolicy":"Any")",
       R"(spec.successPolicy: must be AllTasks or TaskZero, got "Any")"},
      {"templateType", R"("replicas":1,"template":"pod")",
       R"(spec.template: must be an object, got "pod")"},
      {"coordinatorType", R"("replicas":1,"coordinator":[])",
       "spec.coordinator: must be an object, got []"},
      {"coordinatorNodeSelectorValue", R"("replicas":1,"coordinator":{"nodeSelector":{"pool":1}})",
       "spec.coordinator.nodeSelector.pool: must be a string, got 1"},
      {"coordinatorTolerationsType", R"("replicas":1,"coordinator":{"tolerations":{"key":"a"}})",
       R"(spec.coordinator.tolerations: must be a list of tolerations, got {"key":"a"})"},
      {"coordinatorTolerationItem", R"("replicas":1,"coordinator":{"tolerations":["a"]})",
       R"(spec.coordinator.tolerations[0]: must be an object, got "a")"},
      {"coordinatorAffinityType", R"("replicas":1,"coordinator":{"affinity":"anywhere"})",
       R"(spec.coordinator.affinity: must be an object, got "anywhere")"},
      {"coordinatorQuantity", R"("replicas":1,"coordinator":{"resources":{"limits":{"cpu":[]}}})",
       "spec.coordinator.resources.limits.cpu: must be a quantity"},
      {"coordinatorRequestsType", R"("replicas":1,"coordinator":{"resources":{"requests":"1"}})",
       R"(spec.coordinator.resources.requests: must be an object, got "1")"},
      {"coordinatorPullSecret", R"("replicas":1,"coordinator":{"imagePullSecrets":["regcred"]})",
       R"(spec.coordinator.imagePullSecrets[0]: must be {name: <Secret>}, got "regcred")"},
      {"coordinatorServiceAccount", R"("replicas":1,"coordinator":{"serviceAccountName":5})",
       "spec.coordinator.serviceAccountName: must be a string, got 5"},
      {"coordinatorAnnotation", R"("replicas":1,"coordinator":{"annotations":{"a":true}})",
       "spec.coordinator.annotations.a: must be a string, got true"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Json job = Job(c.fields);
    EXPECT_THAT(DecodeSpec(job),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
}

TEST(DecodeSpec, SeveralBadFields_AreAllReported) {
  absl::StatusOr<TrainingJobSpec> spec =
      DecodeSpec(Job(R"("replicas":"x","successPolicy":"Any","suspend":3)"));
  ASSERT_THAT(spec.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(spec.status().message(), HasSubstr("spec.replicas:"));
  EXPECT_THAT(spec.status().message(), HasSubstr("; spec.suspend:"));
  EXPECT_THAT(spec.status().message(), HasSubstr("; spec.successPolicy:"));
}

TEST(DecodeSpec, GarbageJobs_AreInvalidArgumentNotCrashes) {
  for (const char* text : {"null", "5", "\"job\"", "[]", "{}", R"({"spec":null})",
                           R"({"spec":[1]})", R"({"spec":"x"})", R"({"spec":{}})"}) {
    SCOPED_TRACE(text);
    EXPECT_THAT(DecodeSpec(Json::parse(text)), StatusIs(absl::StatusCode::kInvalidArgument));
  }
}

// Every field of a full spec replaced by a value of every JSON type: DecodeSpec never throws,
// and when it refuses, the message names the field it was given.
TEST(DecodeSpec, EveryFieldWithEveryJsonType_NeverThrowsAndNamesThePath) {
  const Json full = Job(
      R"("replicas":2,"failurePolicy":{"restartScope":"Job","maxRestarts":1,)"
      R"("backoff":{"baseSeconds":1,"maxSeconds":2},"fatalExitCodes":[2],"retryableExitCodes":[1],)"
      R"("fatalReasons":["r"],"preemptionsCountTowardMaxRestarts":true},)"
      R"("preemption":{"checkpointGraceSeconds":1,"onNodeTaints":true,"onDisruptionTarget":true},)"
      R"("coordination":{"heartbeatIntervalSeconds":1,"heartbeatTimeoutSeconds":2,)"
      R"("barrierTimeoutSeconds":3,"shutdownTimeoutSeconds":4},"suspend":false,)"
      R"("activeDeadlineSeconds":60,"ttlSecondsAfterFinished":0,)"
      R"("schedulerName":"s","priorityClassName":"p","successPolicy":"TaskZero",)"
      R"("coordinator":{"nodeSelector":{"a":"b"},"tolerations":[{"key":"k"}],"affinity":{},)"
      R"("resources":{"requests":{"cpu":"1"}},"priorityClassName":"p",)"
      R"("imagePullSecrets":[{"name":"r"}],"serviceAccountName":"s","annotations":{"a":"b"}})");
  ASSERT_THAT(DecodeSpec(full), IsOk());
  const std::vector<Json> garbage = {Json::null(),
                                     Json::boolean(true),
                                     Json::number(-1),
                                     Json::number(2.5),
                                     Json::number(uint64_t{1} << 63),
                                     Json::string("x"),
                                     Json::parse("[null]"),
                                     Json::parse(R"({"a":[]})")};
  std::function<void(const std::vector<std::string>&)> visit;
  visit = [&](const std::vector<std::string>& path) {
    const Json* node = &full;
    for (const std::string& key : path) node = &node->at(key);
    if (path.size() > 1) {  // path[0] is "spec"
      for (const Json& value : garbage) {
        Json job = full;
        Json* target = &job;
        for (size_t i = 0; i + 1 < path.size(); ++i) target = &(*target)[path[i]];
        (*target)[path.back()] = value;
        std::string dotted = path[0];
        for (size_t i = 1; i < path.size(); ++i) absl::StrAppend(&dotted, ".", path[i]);
        SCOPED_TRACE(absl::StrCat(dotted, " = ", value.serialize()));
        absl::StatusOr<TrainingJobSpec> spec;
        ASSERT_NO_THROW(spec = DecodeSpec(job));
        if (!spec.ok()) {
          EXPECT_THAT(spec.status(),
                      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(dotted)));
        }
      }
    }
    if (node->is_object() && path.size() < 4 && (path.empty() || path.back() != "template")) {
      for (const auto& [key, unused] : node->as_object()) {
        std::vector<std::string> child = path;
        child.push_back(key);
        visit(child);
      }
    }
  };
  visit({"spec"});
}

TrainingJobSpec ValidSpec() { return Decoded(R"("replicas":4)"); }

TEST(ValidateSpec, DefaultsWithATemplate_AreValid) {
  EXPECT_THAT(ValidateSpec(ValidSpec()), IsEmpty());
}

TEST(ValidateSpec, EachRule_NamesItsField) {
  struct Case {
    std::string name;
    std::function<void(TrainingJobSpec&)> mutate;
    std::vector<std::string> messages;
  };
  const std::vector<Case> cases = {
      {"replicasZero",
       [](TrainingJobSpec& s) { s.replicas = 0; },
       {"spec.replicas: must be between 1 and 10000, got 0"}},
      {"replicasTooMany",
       [](TrainingJobSpec& s) { s.replicas = 10001; },
       {"spec.replicas: must be between 1 and 10000, got 10001"}},
      {"maxRestartsNegative",
       [](TrainingJobSpec& s) { s.failure_policy.max_restarts = -1; },
       {"spec.failurePolicy.maxRestarts: must be >= 0, got -1"}},
      {"keepFailedPodsNegative",
       [](TrainingJobSpec& s) { s.failure_policy.keep_failed_pods = -1; },
       {"spec.failurePolicy.keepFailedPods: must be between 0 and 20, got -1"}},
      {"keepFailedPodsTooMany",
       [](TrainingJobSpec& s) { s.failure_policy.keep_failed_pods = 21; },
       {"spec.failurePolicy.keepFailedPods: must be between 0 and 20, got 21"}},
      {"backoffBaseZero",
       [](TrainingJobSpec& s) { s.failure_policy.backoff.base = absl::ZeroDuration(); },
       {"spec.failurePolicy.backoff.baseSeconds: must be > 0, got 0"}},
      {"backoffMaxNegative",
       [](TrainingJobSpec& s) { s.failure_policy.backoff.max = absl::Seconds(-1); },
       {"spec.failurePolicy.backoff.maxSeconds: must be > 0, got -1s",
        "spec.failurePolicy.backoff.baseSeconds: must not exceed maxSeconds (-1s), got 10s"}},
      {"backoffBaseAboveMax",
       [](TrainingJobSpec& s) {
         s.failure_policy.backoff = {absl::Seconds(60), absl::Seconds(5)};
       },
       {"spec.failurePolicy.backoff.baseSeconds: must not exceed maxSeconds (5s), got 1m"}},
      {"activeDeadlineZero",
       [](TrainingJobSpec& s) { s.active_deadline = absl::ZeroDuration(); },
       {"spec.activeDeadlineSeconds: must be > 0, got 0"}},
      {"gangTimeoutZero",
       [](TrainingJobSpec& s) { s.gang_timeout = absl::ZeroDuration(); },
       {"spec.gang.timeoutSeconds: must be > 0, got 0"}},
      {"placementKeyNotALabelKey",
       [](TrainingJobSpec& s) { s.placement.topology_key = "rack name"; },
       {"spec.placement.topologyKey: must be a node label key ([prefix/]name, e.g. "
        "topology.kubernetes.io/zone), got \"rack name\""}},
      {"placementKeyBadPrefix",
       [](TrainingJobSpec& s) { s.placement.topology_key = "Example.dev/rack"; },
       {"spec.placement.topologyKey: must be a node label key ([prefix/]name, e.g. "
        "topology.kubernetes.io/zone), got \"Example.dev/rack\""}},
      {"placementWithTheTemplatesRequiredPodAffinity",
       [](TrainingJobSpec& s) {
         s.placement.topology_key = "example.dev/rack";
         s.pod_template = Json::parse(R"({"spec":{"containers":[{"name":"m","image":"x"}],
             "affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":
               [{"labelSelector":{"matchLabels":{"app":"cache"}},"topologyKey":"zone"}]}}}})");
       },
       {"spec.placement: cannot be combined with required pod affinity in "
        "spec.template.spec.affinity.podAffinity (Kubernetes counts a pod toward a pod's "
        "required affinity only if it matches every term, so the job's own term and the "
        "template's would never be met together); use preferred pod affinity there, or drop "
        "spec.placement"}},
      {"placementExclusiveWithoutKey",
       [](TrainingJobSpec& s) { s.placement.exclusive = true; },
       {"spec.placement.exclusive: needs spec.placement.topologyKey (exclusive of what "
        "domain?)"}},
      {"ttlNegative",
       [](TrainingJobSpec& s) { s.ttl_after_finished = absl::Seconds(-1); },
       {"spec.ttlSecondsAfterFinished: must be between 0 and 2147483647, got -1"}},
      {"ttlPastAnInt32",
       [](TrainingJobSpec& s) { s.ttl_after_finished = absl::Seconds(int64_t{1} << 31); },
       {"spec.ttlSecondsAfterFinished: must be between 0 and 2147483647, got 2147483648"}},
      {"graceZero",
       [](TrainingJobSpec& s) { s.preemption.checkpoint_grace = absl::ZeroDuration(); },
       {"spec.preemption.checkpointGraceSeconds: must be > 0, got 0"}},
      {"intervalZero",
       [](TrainingJobSpec& s) { s.coordination.heartbeat_interval = absl::ZeroDuration(); },
       {"spec.coordination.heartbeatIntervalSeconds: must be > 0, got 0"}},
      {"barrierZero",
       [](TrainingJobSpec& s) { s.coordination.barrier_timeout = absl::ZeroDuration(); },
       {"spec.coordination.barrierTimeoutSeconds: must be > 0, got 0"}},
      {"shutdownZero",
       [](TrainingJobSpec& s) { s.coordination.shutdown_timeout = absl::ZeroDuration(); },
       {"spec.coordination.shutdownTimeoutSeconds: must be > 0, got 0"}},
      {"timeoutNotAboveInterval",
       [](TrainingJobSpec& s) { s.coordination.heartbeat_timeout = absl::Seconds(1); },
       {"spec.coordination.heartbeatTimeoutSeconds: must be greater than heartbeatIntervalSeconds "
        "(1s), got 1s"}},
      {"exitCodeBothLists",
       [](TrainingJobSpec& s) {
         s.failure_policy.fatal_exit_codes = {2, 3};
         s.failure_policy.retryable_exit_codes = {1, 3};
       },
       {"spec.failurePolicy.fatalExitCodes: exit code 3 is also listed in retryableExitCodes"}},
      {"exitCodeRange",
       [](TrainingJobSpec& s) { s.failure_policy.retryable_exit_codes = {256}; },
       {"spec.failurePolicy.retryableExitCodes[0]: must be between 0 and 255, got 256"}},
      {"templateMissing",
       [](TrainingJobSpec& s) { s.pod_template = Json::null(); },
       {"spec.template: required"}},
      {"templateWithoutSpec",
       [](TrainingJobSpec& s) { s.pod_template = Json::object(); },
       {"spec.template.spec: required (a pod spec with containers)"}},
      {"noContainers",
       [](TrainingJobSpec& s) { s.pod_template = Json::parse(R"({"spec":{"containers":[]}})"); },
       {"spec.template.spec.containers: must list at least one container"}},
      {"containersNotAList",
       [](TrainingJobSpec& s) { s.pod_template = Json::parse(R"({"spec":{"containers":{}}})"); },
       {"spec.template.spec.containers: must list at least one container"}},
      {"containerNotAnObject",
       [](TrainingJobSpec& s) { s.pod_template = Json::parse(R"({"spec":{"containers":[7]}})"); },
       {"spec.template.spec.containers[0]: must be an object, got 7"}},
      {"containerWithoutName",
       [](TrainingJobSpec& s) {
         s.pod_template = Json::parse(R"({"spec":{"containers":[{"image":"i"}]}})");
       },
       {"spec.template.spec.containers[0].name: required"}},
      // The Pod API refuses a container without an image, command or not (issue 11).
      {"containerWithoutImage",
       [](TrainingJobSpec& s) {
         s.pod_template = Json::parse(
             R"({"spec":{"containers":[{"name":"a","image":"i"},{"name":"b","command":["x"]}]}})");
       },
       {"spec.template.spec.containers[1].image: required"}},
      {"initContainerWithoutImage",
       [](TrainingJobSpec& s) {
         s.pod_template = Json::parse(
             R"({"spec":{"containers":[{"name":"a","image":"i"}],
                 "initContainers":[{"name":"init","image":""}]}})");
       },
       {"spec.template.spec.initContainers[0].image: required"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TrainingJobSpec spec = ValidSpec();
    c.mutate(spec);
    EXPECT_THAT(ValidateSpec(spec), ElementsAreArray(c.messages));
  }
}

TEST(ValidateSpec, ContainersWithImages_AreValidWithOrWithoutCommand) {
  TrainingJobSpec spec = ValidSpec();
  spec.pod_template = Json::parse(
      R"({"spec":{"containers":[{"name":"a","image":"i"},{"name":"b","image":"i",
          "command":["x"]}],"initContainers":[{"name":"c","image":"i"}]}})");
  EXPECT_THAT(ValidateSpec(spec), IsEmpty());
}

TEST(ValidateName, TheLimitComesFromTheLongestChildName) {
  struct Case {
    std::string name;
    std::string job;
    std::vector<std::string> messages;
  };
  const std::string longest(kMaxJobNameLength, 'j');
  const std::vector<Case> cases = {
      {"short", "train", {}},
      {"withDigitsAndDashes", "llm-7b-run2", {}},
      {"longest", longest, {}},
      {"oneTooLong",
       longest + "j",
       {absl::StrCat("metadata.name: must be at most 51 characters (the Service ", longest,
                     "j-coordinator must fit in 63), got 52")}},
      {"dot",
       "a.b",
       {"metadata.name: must start with a lowercase letter and contain only lowercase letters, "
        "digits and '-' (it names Services and host names), got \"a.b\""}},
      {"digitFirst",
       "7b",
       {"metadata.name: must start with a lowercase letter and contain only "
        "lowercase letters, digits and '-' (it names Services and host "
        "names), got \"7b\""}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_THAT(ValidateName(c.job), ElementsAreArray(c.messages));
  }
}

TEST(ValidateSpec, SeveralProblems_AreAllReported) {
  TrainingJobSpec spec = ValidSpec();
  spec.replicas = 0;
  spec.failure_policy.max_restarts = -2;
  EXPECT_EQ(ValidateSpec(spec).size(), 2u);
}

absl::Time At(int64_t unix_seconds, int64_t millis = 0) {
  return absl::FromUnixSeconds(unix_seconds) + absl::Milliseconds(millis);
}

TrainingJobStatus FullStatus() {
  TrainingJobStatus s;
  s.phase = kPhaseRestarting;
  s.conditions = {
      {"Running", "False", "TaskFailed", "task 2 exited with code 1", At(1700000000), 3},
      {"InvalidSpec", "False", "Valid", "", At(1700000100, 250), 3}};
  TaskStatus t0;
  t0.index = 0;
  t0.pod = "j-task-0";
  t0.node = "node-1";
  t0.incarnation = 1;
  t0.state = TaskState::kRunning;
  TaskStatus t2;
  t2.index = 2;
  t2.pod = "j-task-2";
  t2.incarnation = 4;
  t2.state = TaskState::kRestarting;
  t2.restarts = 3;
  t2.last_failure_reason = "Error";
  t2.last_exit_code = 137;
  t2.preempting_since = At(1700000200, 123);
  t2.last_failure_message = "exec: \"trian\": executable file not found in $PATH";
  t2.failure_reported_at = At(1700000250, 7);
  TaskStatus t3;
  t3.index = 3;
  t3.last_exit_code = 0;  // an exit code of 0 is still written
  s.tasks = {t0, t2, t3};
  s.ready_tasks = 1;
  s.restarts = 5;
  s.preemptions = 2;
  s.observed_generation = 3;
  s.start_time = At(1700000000);
  s.completion_time = At(1700009999);
  s.last_restart_time = At(1700000300, 1);
  s.productive_seconds = 1234.5678901234567;
  s.productive_at_last_restart = 1000.25;
  s.gang_releases = 2;
  s.gang_released_at = At(1700000100);
  s.lost_seconds = 0.1;
  s.accounted_until = absl::FromUnixNanos(1700000400123456789);
  s.goodput.detection_seconds = 5.5;
  s.goodput.coordinator_outage_seconds = 3;
  s.goodput.rolled_back_seconds = 12.25;
  s.goodput.coordinator_down_since = At(1700000350, 5);
  s.goodput.detection_booked_until = At(1700000360);
  s.goodput.rollback_coordinator = "0a1b2c3d4e5f6071";
  s.goodput.rollback_booked = 12.25;
  s.coordinator.restarts = 2;
  s.coordinator.moves = 1;
  s.coordinator.moving_from = "node-1";
  s.coordinator.last_moved_pod = "uid-c1";
  return s;
}

TEST(Status, RoundTripThroughSerializedJson_IsExact) {
  for (const TrainingJobStatus& status : {TrainingJobStatus{}, FullStatus()}) {
    Json job = Json::object();
    job["status"] = Json::parse(EncodeStatus(status).serialize());
    EXPECT_EQ(DecodeStatus(job), status) << EncodeStatus(status).serialize();
  }
}

TEST(Status, TaskStates_RoundTripThroughTheirCrdNames) {
  const struct {
    TaskState state;
    std::string name;
  } cases[] = {
      {TaskState::kUnknown, ""},
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
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(TaskStateName(c.state), c.name);
    EXPECT_EQ(ParseTaskState(c.name), c.state);
  }
  EXPECT_EQ(ParseTaskState("Sleeping"), TaskState::kUnknown);
  // kUnknown is written as no `state` field at all.
  TrainingJobStatus status;
  status.tasks.emplace_back();
  EXPECT_FALSE(EncodeStatus(status).at("tasks").at(0).has_field("state"));
}

TEST(Status, Encoding_HasTheCrdFieldNames) {
  const Json j = EncodeStatus(FullStatus());
  EXPECT_EQ(j.at("phase").as_string(), "Restarting");
  EXPECT_EQ(j.at("readyTasks").as_integer(), 1);
  EXPECT_EQ(j.at("observedGeneration").as_integer(), 3);
  EXPECT_EQ(j.at("startTime").as_string(), "2023-11-14T22:13:20Z");
  EXPECT_EQ(j.at("lastRestartTime").as_string(), "2023-11-14T22:18:20.001Z");
  EXPECT_EQ(j.at("accountedUntil").as_string(), "2023-11-14T22:20:00.123456789Z");
  const Json& c = j.at("conditions").at(0);
  EXPECT_EQ(c.at("type").as_string(), "Running");
  EXPECT_EQ(c.at("status").as_string(), "False");
  EXPECT_EQ(c.at("reason").as_string(), "TaskFailed");
  EXPECT_EQ(c.at("lastTransitionTime").as_string(), "2023-11-14T22:13:20Z");
  EXPECT_EQ(c.at("observedGeneration").as_integer(), 3);
  const Json& t = j.at("tasks").at(1);
  EXPECT_EQ(t.at("index").as_integer(), 2);
  EXPECT_EQ(t.at("pod").as_string(), "j-task-2");
  EXPECT_FALSE(t.has_field("node"));  // empty strings are left out
  EXPECT_EQ(t.at("lastFailureReason").as_string(), "Error");
  EXPECT_EQ(t.at("lastExitCode").as_integer(), 137);
  EXPECT_THAT(t.at("lastFailureMessage").as_string(), HasSubstr("executable file not found"));
  EXPECT_EQ(t.at("failureReportedAt").as_string(), "2023-11-14T22:17:30.007Z");
  EXPECT_EQ(j.at("tasks").at(2).at("lastExitCode").as_integer(), 0);
  EXPECT_FALSE(j.at("tasks").at(0).has_field("lastExitCode"));
  EXPECT_FALSE(EncodeStatus(TrainingJobStatus{}).has_field("startTime"));
}

TEST(Status, GarbageStatus_ReadsAsDefaults) {
  for (const char* text :
       {"null", "7", "[]", R"({})", R"({"status":null})", R"({"status":"Running"})",
        R"({"status":[]})",
        R"({"status":{"phase":5,"conditions":"x","tasks":{},"readyTasks":"2","restarts":1.5,)"
        R"("preemptions":-99999999999,"observedGeneration":"3","startTime":"yesterday",)"
        R"("completionTime":17,"productiveSeconds":"1","lostSeconds":null}})"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(DecodeStatus(Json::parse(text)), TrainingJobStatus{});
  }
}

TEST(Status, GarbageEntries_AreSkippedOrDefaulted) {
  TrainingJobStatus s = DecodeStatus(Json::parse(
      R"({"status":{"conditions":[1,{"type":"Running","status":true,"lastTransitionTime":"x"}],)"
      R"("tasks":["t",{"index":"2","pod":"p","lastExitCode":"9"},{"index":4}]}})"));
  ASSERT_EQ(s.conditions.size(), 1u);
  EXPECT_EQ(s.conditions[0].type, "Running");
  EXPECT_EQ(s.conditions[0].status, "");
  EXPECT_EQ(s.conditions[0].last_transition_time, absl::UnixEpoch());
  ASSERT_EQ(s.tasks.size(), 2u);
  EXPECT_EQ(s.tasks[0].index, 0);
  EXPECT_EQ(s.tasks[0].pod, "p");
  EXPECT_FALSE(s.tasks[0].last_exit_code.has_value());
  EXPECT_EQ(s.tasks[1].index, 4);
}

Condition Cond(const std::string& type, const std::string& status, const std::string& reason,
               const std::string& message = "", int64_t generation = 1) {
  return Condition{type, status, reason, message, absl::InfinitePast(), generation};
}

TEST(SetCondition, Transitions) {
  std::vector<Condition> conditions;
  const absl::Time t0 = At(1700000000, 700);  // truncated to whole seconds when stored
  const absl::Time t1 = At(1700000100);
  const absl::Time t2 = At(1700000200);

  EXPECT_TRUE(SetCondition(conditions, Cond("Running", "False", "Starting"), t0));
  ASSERT_EQ(conditions.size(), 1u);
  EXPECT_EQ(conditions[0].last_transition_time, At(1700000000));

  // Same status, reason and message: nothing changes, not even the time.
  EXPECT_FALSE(SetCondition(conditions, Cond("Running", "False", "Starting"), t1));
  EXPECT_EQ(conditions[0].last_transition_time, At(1700000000));

  // A new reason, message or generation is a change, but not a transition.
  EXPECT_TRUE(SetCondition(conditions, Cond("Running", "False", "Pulling", "image"), t1));
  EXPECT_EQ(conditions[0].reason, "Pulling");
  EXPECT_EQ(conditions[0].message, "image");
  EXPECT_EQ(conditions[0].last_transition_time, At(1700000000));
  EXPECT_TRUE(SetCondition(conditions, Cond("Running", "False", "Pulling", "image", 2), t1));
  EXPECT_EQ(conditions[0].observed_generation, 2);
  EXPECT_EQ(conditions[0].last_transition_time, At(1700000000));

  // A flip moves the time.
  EXPECT_TRUE(SetCondition(conditions, Cond("Running", "True", "AllTasksRunning", "", 2), t2));
  EXPECT_EQ(conditions[0].status, "True");
  EXPECT_EQ(conditions[0].last_transition_time, t2);

  // Another type is added beside it; FindCondition finds each.
  EXPECT_TRUE(SetCondition(conditions, Cond("InvalidSpec", "False", "Valid"), t2));
  EXPECT_EQ(conditions.size(), 2u);
  std::optional<Condition> running = FindCondition(conditions, "Running");
  ASSERT_TRUE(running.has_value());
  EXPECT_EQ(running->reason, "AllTasksRunning");
  EXPECT_EQ(FindCondition(conditions, "InvalidSpec")->status, "False");
  EXPECT_FALSE(FindCondition(conditions, "Succeeded").has_value());
}

}  // namespace
}  // namespace phalanx::op
