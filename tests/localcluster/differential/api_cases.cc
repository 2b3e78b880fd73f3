// The differential table: every API behaviour the operator, the agent and kubectl flows rely
// on, with the outcome kube-apiserver v1.26 gives. Expected values were read off a real
// kube-apiserver; the real half of differential_api_test.cc keeps them honest.
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/localcluster/differential/api_case.h"

namespace phalanx::localcluster::differential {
namespace {

constexpr char kCm[] = "/api/v1/namespaces/{ns}/configmaps";
constexpr char kPods[] = "/api/v1/namespaces/{ns}/pods";
constexpr char kWidgets[] = "/apis/diff.phalanx.dev/v1/namespaces/{ns}/widgets";
constexpr char kGadgets[] = "/apis/diff.phalanx.dev/v1/namespaces/{ns}/gadgets";
constexpr char kJobs[] = "/apis/phalanx.dev/v1alpha1/namespaces/{ns}/trainingjobs";
constexpr char kCrds[] = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
constexpr char kMerge[] = "application/merge-patch+json";
constexpr char kApply[] = "application/apply-patch+yaml";

std::string Cm(const std::string& name, const std::string& extra_meta = "",
               const std::string& data = R"({"k":"v"})") {
  return absl::StrCat(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":")", name, "\"",
                      extra_meta, R"(},"data":)", data, "}");
}
std::string Widget(const std::string& name, const std::string& spec,
                   const std::string& extra = "") {
  return absl::StrCat(R"({"apiVersion":"diff.phalanx.dev/v1","kind":"Widget","metadata":{"name":")",
                      name, R"("},"spec":)", spec, extra, "}");
}
std::string Pod(const std::string& name, const std::string& container,
                const std::string& spec_extra = "") {
  return absl::StrCat(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":")", name,
                      R"("},"spec":{"containers":[)", container, "]", spec_extra, "}}");
}
std::string Job(const std::string& name, const std::string& replicas,
                const std::string& spec_extra = "") {
  return absl::StrCat(
      R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":")", name,
      R"("},"spec":{"replicas":)", replicas,
      R"(,"template":{"spec":{"containers":[{"name":"w","image":"sample"}]}})", spec_extra, "}}");
}
std::string Owned(const std::string& name, const std::string& owner_var,
                  const std::string& block = "") {
  return Cm(name, absl::StrCat(R"(,"labels":{"case":"gc"},"ownerReferences":[{"apiVersion":"v1",)",
                               R"("kind":"ConfigMap","name":"owner","uid":"{)", owner_var, "}\"",
                               block, "}]"));
}

Step Do(std::string method, std::string path, std::string body, Expect expect) {
  Step s;
  s.method = std::move(method);
  s.path = std::move(path);
  s.body = std::move(body);
  s.expect = std::move(expect);
  return s;
}
Step Get(std::string path, Expect expect) {
  return Do("GET", std::move(path), "", std::move(expect));
}
Step Post(std::string path, std::string body, Expect expect) {
  return Do("POST", std::move(path), std::move(body), std::move(expect));
}
Step Put(std::string path, std::string body, Expect expect) {
  return Do("PUT", std::move(path), std::move(body), std::move(expect));
}
Step Patch(std::string path, std::string type, std::string body, Expect expect) {
  Step s = Do("PATCH", std::move(path), std::move(body), std::move(expect));
  s.content_type = std::move(type);
  return s;
}
Step Delete(std::string path, Expect expect, std::string body = "") {
  return Do("DELETE", std::move(path), std::move(body), std::move(expect));
}
Step Watch(std::string path, Expect expect) {
  return Do("WATCH", std::move(path), "", std::move(expect));
}
Step Saving(Step s, std::vector<std::pair<std::string, std::string>> save) {
  s.save = std::move(save);
  return s;
}
Step Within(int seconds, Step s) {
  s.eventually_s = seconds;
  return s;
}
Step OnBuiltin(Step s, Expect builtin) {
  s.builtin = std::move(builtin);
  return s;
}

Expect Ok(int code, std::vector<std::pair<std::string, std::string>> fields = {}) {
  return Expect{.code = code, .fields = std::move(fields)};
}
Expect Fails(int code, std::string reason, std::vector<std::string> causes = {},
             std::string message_has = "") {
  return Expect{.code = code,
                .reason = std::move(reason),
                .cause_fields = std::move(causes),
                .message_has = std::move(message_has)};
}
Expect Warns(int code, std::vector<std::string> warnings,
             std::vector<std::pair<std::string, std::string>> fields = {}) {
  return Expect{.code = code, .fields = std::move(fields), .warnings_have = std::move(warnings)};
}

constexpr char kAbsent[] = "<absent>";
constexpr char kPresent[] = "<present>";
const std::string kLong64(64, 'a');

std::vector<Case> CrudCases() {
  return {
      {"Crud_CreateGetUpdateDelete_WithConflicts",
       "",
       {Saving(Post(kCm, Cm("a"), Ok(201, {{"data.k", R"("v")"}})),
               {{"rv", "metadata.resourceVersion"}}),
        Post(kCm, Cm("a"), Fails(409, "AlreadyExists")),
        Get(absl::StrCat(kCm, "/a"), Ok(200, {{"data.k", R"("v")"}, {"kind", R"("ConfigMap")"}})),
        Put(absl::StrCat(kCm, "/a"), Cm("a", R"(,"resourceVersion":"{rv}")", R"({"k":"w"})"),
            Ok(200, {{"data.k", R"("w")"}})),
        Put(absl::StrCat(kCm, "/a"), Cm("a", R"(,"resourceVersion":"{rv}")", R"({"k":"x"})"),
            Fails(409, "Conflict")),
        Put(absl::StrCat(kCm, "/a"), Cm("a", "", R"({"k":"unconditional"})"),
            Ok(200, {{"data.k", R"("unconditional")"}})),
        Delete(absl::StrCat(kCm, "/a"), Ok(200)),
        Get(absl::StrCat(kCm, "/a"), Fails(404, "NotFound")),
        Delete(absl::StrCat(kCm, "/a"), Fails(404, "NotFound"))}},
      {"Crud_CreateInMissingNamespace_IsNotFound",
       "",
       {Post("/api/v1/namespaces/{ns}-missing/configmaps", Cm("a"), Fails(404, "NotFound"))}},
      {"Crud_GenerateNameAndDryRun",
       "",
       {Post(kCm, R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"gen-"}})",
             Ok(201, {{"metadata.name", kPresent}})),
        Post(absl::StrCat(kCm, "?dryRun=All"), Cm("dry"), Ok(201, {{"metadata.name", R"("dry")"}})),
        Get(absl::StrCat(kCm, "/dry"), Fails(404, "NotFound"))}},
      {"Crud_DeletePreconditionOnUid_IsConflict",
       "",
       {Post(kCm, Cm("a"), Ok(201)),
        Delete(
            absl::StrCat(kCm, "/a"), Fails(409, "Conflict", {}, "precondition"),
            R"({"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"not-the-uid"}})"),
        Get(absl::StrCat(kCm, "/a"), Ok(200))}},
      {"Crud_ListWithLabelSelectorAndLimit_Pages",
       "",
       {Post(kCm, Cm("l1", R"(,"labels":{"case":"list"})"), Ok(201)),
        Post(kCm, Cm("l2", R"(,"labels":{"case":"list"})"), Ok(201)),
        Post(kCm, Cm("l3", R"(,"labels":{"case":"list"})"), Ok(201)),
        Post(kCm, Cm("other"), Ok(201)),
        Get(absl::StrCat(kCm, "?labelSelector=case%3Dlist&limit=2"),
            Ok(200, {{"kind", R"("ConfigMapList")"},
                     {"items[1].metadata.name", R"("l2")"},
                     {"items[2]", kAbsent},
                     {"metadata.continue", kPresent}})),
        Get(absl::StrCat(kCm, "?labelSelector=case%3Dlist"),
            Ok(200, {{"items[2].metadata.name", R"("l3")"}, {"items[3]", kAbsent}}))}},
      {"Namespace_GetsDefaultServiceAccount",
       "",
       {Within(30, Get("/api/v1/namespaces/{ns}/serviceaccounts/default",
                       Ok(200, {{"metadata.name", R"("default")"}})))}},
  };
}

std::vector<Case> CustomResourceCases() {
  return {
      {"Generation_BumpsOnSpecOnly",
       "",
       {Post(kWidgets, Widget("w", R"({"size":1})"), Ok(201, {{"metadata.generation", "1"}})),
        Patch(absl::StrCat(kWidgets, "/w"), kMerge, R"({"metadata":{"labels":{"a":"b"}}})",
              Ok(200, {{"metadata.generation", "1"}})),
        Patch(absl::StrCat(kWidgets, "/w"), kMerge, R"({"spec":{"size":2}})",
              Ok(200, {{"metadata.generation", "2"}})),
        Patch(absl::StrCat(kWidgets, "/w/status"), kMerge, R"({"status":{"ready":1}})",
              Ok(200, {{"metadata.generation", "2"}, {"status.ready", "1"}}))}},
      {"StatusSubresource_MainWriteKeepsStatus_StatusWriteKeepsSpec",
       "",
       {Post(kWidgets, Widget("w", R"({"size":1})", R"(,"status":{"ready":5})"),
             Ok(201, {{"status", kAbsent}})),
        Patch(absl::StrCat(kWidgets, "/w/status"), kMerge, R"({"status":{"ready":1}})",
              Ok(200, {{"status.ready", "1"}})),
        Patch(absl::StrCat(kWidgets, "/w"), kMerge, R"({"spec":{"size":3},"status":{"ready":9}})",
              Ok(200, {{"spec.size", "3"}, {"status.ready", "1"}})),
        Patch(absl::StrCat(kWidgets, "/w/status"), kMerge,
              R"({"spec":{"size":7},"status":{"ready":2}})",
              Ok(200, {{"spec.size", "3"}, {"status.ready", "2"}}))}},
      {"Schema_InvalidValues_NameTheField",
       "",
       {Post(kWidgets, Widget("w0", R"({"size":0})"), Fails(422, "Invalid", {"spec.size"})),
        Post(kWidgets, Widget("w1", R"({"mode":"fast"})"), Fails(422, "Invalid", {"spec.size"})),
        Post(kWidgets, Widget("w2", R"({"size":1,"mode":"slow"})"),
             Fails(422, "Invalid", {"spec.mode"}, "supported values")),
        Post(kWidgets, Widget("w3", R"({"size":1,"label":"ABCDEFGHIJ"})"),
             Fails(422, "Invalid", {"spec.label"})),
        Post(kWidgets, Widget("w4", R"({"size":1,"tags":["a","b","c","d"]})"),
             Fails(422, "Invalid", {"spec.tags"})),
        Post(kWidgets, Widget("w5", R"({"size":"two"})"), Fails(422, "Invalid", {"spec.size"}))}},
      {"Schema_DefaultsAndPruning",
       "",
       {Post(absl::StrCat(kWidgets, "?fieldValidation=Ignore"),
             Widget("w", R"({"size":1,"extra":1,"free":{"any":{"x":1}}})"),
             Expect{.code = 201,
                    .fields = {{"spec.mode", R"("safe")"},
                               {"spec.settings.retries", "3"},
                               {"spec.extra", kAbsent},
                               {"spec.free.any.x", "1"}},
                    .no_warnings = true})}},
      {"FieldValidation_CustomResource_StrictWarnIgnore",
       "",
       {Post(absl::StrCat(kWidgets, "?fieldValidation=Strict"),
             Widget("w", R"({"size":1,"foo":1,"settings":{"bar":2}})"),
             Fails(400, "BadRequest", {}, R"(strict decoding error: unknown field "spec.foo")")),
        Post(absl::StrCat(kWidgets, "?fieldValidation=Strict"),
             Widget("w", R"({"size":1,"settings":{"bar":2}})"),
             Fails(400, "BadRequest", {}, R"(unknown field "spec.settings.bar")")),
        Post(absl::StrCat(kWidgets, "?fieldValidation=Warn"), Widget("w", R"({"size":1,"foo":1})"),
             Warns(201, {R"(unknown field "spec.foo")"}, {{"spec.foo", kAbsent}})),
        // No parameter: kube-apiserver's default is Warn.
        Post(kWidgets, Widget("w2", R"({"size":1,"foo":1})"),
             Warns(201, {R"(unknown field "spec.foo")"})),
        Post(absl::StrCat(kWidgets, "?fieldValidation=Ignore"),
             Widget("w3", R"({"size":1,"foo":1})"), Expect{.code = 201, .no_warnings = true}),
        Put(absl::StrCat(kWidgets, "/w?fieldValidation=Strict"),
            Widget("w", R"({"size":2,"foo":1})"),
            Fails(400, "BadRequest", {}, R"(unknown field "spec.foo")"))}},
      {"FieldValidation_Pod_StrictAndWarn",
       "",
       {Post(absl::StrCat(kPods, "?fieldValidation=Strict"),
             Pod("p", R"({"name":"c","image":"x","comand":["a"]})", R"(,"foo":1)"),
             Fails(400, "BadRequest", {},
                   R"(strict decoding error: unknown field "spec.containers[0].comand")")),
        Post(absl::StrCat(kPods, "?fieldValidation=Strict"),
             Pod("p", R"({"name":"c","image":"x","resources":{"limit":{"cpu":"1"}}})"),
             Fails(400, "BadRequest", {}, R"(unknown field "spec.containers[0].resources.limit")")),
        Post(absl::StrCat(kPods, "?fieldValidation=Warn"),
             Pod("p", R"({"name":"c","image":"x","comand":["a"]})"),
             Warns(201, {R"(unknown field "spec.containers[0].comand")"},
                   {{"spec.containers[0].comand", kAbsent}})),
        Post(absl::StrCat(kPods, "?fieldValidation=Strict"),
             Pod("q",
                 R"({"name":"c","image":"x","command":["a"],"env":[{"name":"A","value":"1"}],)"
                 R"("resources":{"limits":{"cpu":"1"}}})",
                 R"(,"nodeSelector":{"a":"b"},"tolerations":[{"key":"k","operator":"Exists"}])"),
             Expect{.code = 201, .no_warnings = true})}},
      {"FieldValidation_BuiltinMetadata_Strict",
       "",
       {Post(absl::StrCat(kCm, "?fieldValidation=Strict"), Cm("a", R"(,"foo":1)"),
             Fails(400, "BadRequest", {}, R"(unknown field "metadata.foo")")),
        Post(absl::StrCat(kCm, "?fieldValidation=Strict"),
             R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"},"date":{"k":"v"}})",
             Fails(400, "BadRequest", {}, R"(unknown field "date")"))}},
  };
}

std::vector<Case> ValidationCases() {
  return {
      {"PodValidation_RequiredFields",
       "",
       {Post(kPods, Pod("p", R"({"name":"c"})"),
             Fails(422, "Invalid", {"spec.containers[0].image"})),
        Post(kPods, R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{}})",
             Fails(422, "Invalid", {"spec.containers"})),
        Post(kPods, Pod("p", R"({"image":"x"})"),
             Fails(422, "Invalid", {"spec.containers[0].name"}))}},
      {"PodDefaults_NeverBoundPodStaysPending",
       "",
       {Post(kPods,
             Pod("p", R"({"name":"c","image":"x"})", R"(,"nodeSelector":{"nowhere":"true"})"),
             Ok(201, {{"spec.restartPolicy", R"("Always")"},
                      {"spec.terminationGracePeriodSeconds", "30"},
                      {"spec.schedulerName", R"("default-scheduler")"},
                      {"spec.dnsPolicy", R"("ClusterFirst")"},
                      {"status.phase", R"("Pending")"}}))}},
      {"NameLimits_Dns1123AndDns1035",
       "",
       {Post(kCm, Cm("Bad_Name"), Fails(422, "Invalid", {"metadata.name"})),
        Post(kCm, Cm(std::string(254, 'a')), Fails(422, "Invalid", {"metadata.name"})),
        Post(kCm, Cm(std::string(253, 'a')), Ok(201)),
        Post("/api/v1/namespaces/{ns}/services",
             R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"1svc"},)"
             R"("spec":{"ports":[{"port":80}]}})",
             Fails(422, "Invalid", {"metadata.name"})),
        Post("/api/v1/namespaces/{ns}/services",
             absl::StrCat(R"({"apiVersion":"v1","kind":"Service","metadata":{"name":")", kLong64,
                          R"("},"spec":{"ports":[{"port":80}]}})"),
             Fails(422, "Invalid", {"metadata.name"})),
        Post("/api/v1/namespaces",
             absl::StrCat(R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":")", kLong64,
                          R"("}})"),
             Fails(422, "Invalid", {"metadata.name"})),
        Post(kPods, Pod("p", R"({"name":"Bad_C","image":"x"})"),
             Fails(422, "Invalid", {"spec.containers[0].name"}))}},
      {"LabelLimits_ValueAndKey",
       "",
       {Post(kCm, Cm("a", absl::StrCat(R"(,"labels":{"k":")", kLong64, "\"}")),
             Fails(422, "Invalid", {"metadata.labels"})),
        Post(kCm, Cm("b", R"(,"labels":{"bad key":"v"})"),
             Fails(422, "Invalid", {"metadata.labels"})),
        Post(kCm, Cm("c", R"(,"labels":{"k":"-starts-with-dash"})"),
             Fails(422, "Invalid", {"metadata.labels"})),
        Post(
            kCm,
            Cm("d", absl::StrCat(R"(,"labels":{"phalanx.dev/job":")", std::string(63, 'a'), "\"}")),
            Ok(201))}},
  };
}

std::vector<Case> WatchCases() {
  return {
      {"Watch_FromResourceVersion_SeesLaterEventsAndBookmarks",
       "",
       {Saving(Post(kCm, Cm("before", R"(,"labels":{"case":"watch"})"), Ok(201)),
               {{"rv", "metadata.resourceVersion"}}),
        Post(kCm, Cm("after", R"(,"labels":{"case":"watch"})"), Ok(201)),
        // Bookmarks are best effort on kube-apiserver (its watch cache sends them on a timer,
        // often not at all within a short watch): the runner checks every BOOKMARK that comes
        // carries a resourceVersion and nothing else, but cannot require one.
        Watch(absl::StrCat(kCm,
                           "?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&"
                           "labelSelector=case%3Dwatch&timeoutSeconds=4"),
              Expect{.code = 200, .events = {"ADDED:after"}, .events_absent = {"ADDED:before"}})}},
      {"Watch_WithoutResourceVersion_StartsWithCurrentState",
       "",
       {Post(kCm, Cm("there", R"(,"labels":{"case":"watch"})"), Ok(201)),
        Watch(absl::StrCat(kCm, "?watch=true&labelSelector=case%3Dwatch&timeoutSeconds=1"),
              Expect{.code = 200, .events = {"ADDED:there"}})}},
      // kube-apiserver's watch cache for a custom resource opens at the resourceVersion its CRD
      // was established at: resourceVersion 1 is older than that on every real server. (Built-in
      // kinds' caches open near 1 on a fresh server and grow to 100k events, so their 410 cannot
      // be provoked deterministically; api_server_test covers the built-in's history limit.)
      {"Watch_ResourceVersionBeforeTheWatchWindow_IsExpiredErrorEvent",
       "",
       {Watch(absl::StrCat(kWidgets, "?watch=true&resourceVersion=1&timeoutSeconds=2"),
              Expect{.code = 200, .events = {"ERROR:410:Expired"}})}},
  };
}

std::vector<Case> ApplyAndGcCases() {
  return {
      {"ServerSideApply_CreatesAndUpdatesForOneManager",
       "",
       {Patch(absl::StrCat(kCm, "/applied?fieldManager=alice"), kApply, Cm("applied"),
              Ok(201, {{"data.k", R"("v")"}})),
        Patch(absl::StrCat(kCm, "/applied?fieldManager=alice"), kApply,
              Cm("applied", "", R"({"k":"v2"})"), Ok(200, {{"data.k", R"("v2")"}}))}},
      {"ServerSideApply_SecondManagerConflicts_UnlessForced",
       "no field ownership: apply merges without conflicts (warned on every apply)",
       {Patch(absl::StrCat(kCm, "/applied?fieldManager=alice"), kApply, Cm("applied"), Ok(201)),
        OnBuiltin(Patch(absl::StrCat(kCm, "/applied?fieldManager=bob"), kApply,
                        Cm("applied", "", R"({"k":"b"})"), Fails(409, "Conflict", {}, "conflict")),
                  Warns(200, {"server-side apply is not field-managed"})),
        Patch(absl::StrCat(kCm, "/applied?fieldManager=bob&force=true"), kApply,
              Cm("applied", "", R"({"k":"b"})"), Ok(200, {{"data.k", R"("b")"}}))}},
      {"GarbageCollection_Background_DeletesDependents",
       "",
       {Saving(Post(kCm, Cm("owner"), Ok(201)), {{"uid", "metadata.uid"}}),
        Post(kCm, Owned("child", "uid"), Ok(201)),
        Delete(absl::StrCat(kCm, "/owner?propagationPolicy=Background"), Ok(200)),
        Within(60, Get(absl::StrCat(kCm, "/child"), Fails(404, "NotFound")))}},
      {"GarbageCollection_Foreground_DeletesDependentsThenOwner",
       "",
       {Saving(Post(kCm, Cm("owner"), Ok(201)), {{"uid", "metadata.uid"}}),
        Post(kCm, Owned("child", "uid", R"(,"blockOwnerDeletion":true)"), Ok(201)),
        Delete(absl::StrCat(kCm, "/owner"), Ok(200),
               R"({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"})"),
        Within(60, Get(absl::StrCat(kCm, "/child"), Fails(404, "NotFound"))),
        Within(60, Get(absl::StrCat(kCm, "/owner"), Fails(404, "NotFound")))}},
      {"GarbageCollection_Orphan_KeepsDependentsAndDropsTheirOwnerReference",
       "",
       {Saving(Post(kCm, Cm("owner"), Ok(201)), {{"uid", "metadata.uid"}}),
        Post(kCm, Owned("child", "uid"), Ok(201)),
        Delete(absl::StrCat(kCm, "/owner?propagationPolicy=Orphan"), Ok(200)),
        Within(60, Get(absl::StrCat(kCm, "/owner"), Fails(404, "NotFound"))),
        Within(60, Get(absl::StrCat(kCm, "/child"),
                       Ok(200, {{"metadata.ownerReferences", kAbsent}})))}},
      {"Finalizers_HoldDeletionUntilRemoved",
       "",
       {Post(kCm, Cm("held", R"(,"finalizers":["diff.phalanx.dev/hold"])"), Ok(201)),
        Delete(absl::StrCat(kCm, "/held"), Ok(200)),
        Get(absl::StrCat(kCm, "/held"), Ok(200, {{"metadata.deletionTimestamp", kPresent}})),
        Patch(absl::StrCat(kCm, "/held"), kMerge,
              R"({"metadata":{"finalizers":["diff.phalanx.dev/hold","diff.phalanx.dev/more"]}})",
              Fails(422, "Invalid", {"metadata.finalizers"})),
        Patch(absl::StrCat(kCm, "/held"), kMerge, R"({"metadata":{"finalizers":null}})", Ok(200)),
        Within(10, Get(absl::StrCat(kCm, "/held"), Fails(404, "NotFound")))}},
  };
}

std::vector<Case> UnsupportedFeatureCases() {
  const std::string cel_crd = absl::StrCat(
      R"({"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",)"
      R"("metadata":{"name":"celprobe{run}s.diff.phalanx.dev"},"spec":{"group":"diff.phalanx.dev",)"
      R"("scope":"Namespaced","names":{"plural":"celprobe{run}s","kind":"Celprobe{run}"},)"
      R"("versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":)"
      R"({"type":"object","properties":{"spec":{"type":"object","x-kubernetes-validations":)"
      R"([{"rule":"self.a <= 3"}],"properties":{"a":{"type":"integer"}}}}}}}]}})");
  return {
      {"Cel_RuleRejectsInvalidObject",
       "no CEL: x-kubernetes-validations are not evaluated",
       {OnBuiltin(Post(kGadgets,
                       R"({"apiVersion":"diff.phalanx.dev/v1","kind":"Gadget","metadata":)"
                       R"({"name":"g"},"spec":{"low":5,"high":1}})",
                       Fails(422, "Invalid", {"spec"}, "low must not exceed high")),
                  Warns(201, {"x-kubernetes-validations", "not evaluated"})),
        OnBuiltin(Post(kGadgets,
                       R"({"apiVersion":"diff.phalanx.dev/v1","kind":"Gadget","metadata":)"
                       R"({"name":"ok"},"spec":{"low":1,"high":5}})",
                       Expect{.code = 201, .no_warnings = true}),
                  Warns(201, {"not evaluated"}))}},
      {"Cel_CrdWithRules_IsAccepted",
       "no CEL: a CRD with rules is accepted with a warning",
       {OnBuiltin(Post(kCrds, cel_crd, Expect{.code = 201, .no_warnings = true}),
                  Warns(201, {"x-kubernetes-validations are not evaluated"})),
        Delete(absl::StrCat(kCrds, "/celprobe{run}s.diff.phalanx.dev"), Ok(200))}},
      {"PodSecurity_RestrictedNamespace_RefusesNonConformingPod",
       "no PodSecurity admission",
       {OnBuiltin(
            Patch("/api/v1/namespaces/{ns}", kMerge,
                  R"({"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}})",
                  Ok(200)),
            Warns(200, {"PodSecurity"})),
        // PodSecurity reads the namespace from the API server's informer cache, which can lag
        // the label's PATCH by a moment: a pod posted at once was admitted once in ~10 runs.
        // Retried, the POST meets admission again (before the name clash), so once the cache
        // has the label it is refused.
        OnBuiltin(Within(10, Post(kPods, Pod("plain", R"({"name":"c","image":"x"})"),
                                  Fails(403, "Forbidden", {}, "violates PodSecurity"))),
                  Warns(201, {"PodSecurity", "not enforced"}))}},
  };
}

std::vector<Case> TrainingJobCases() {
  return {
      {"TrainingJob_CreateValidate",
       "",
       {Post(kJobs, Job("train", "2"), Ok(201, {{"spec.replicas", "2"}})),
        Post(kJobs, Job("zero", "0"), Fails(422, "Invalid", {"spec.replicas"})),
        Post(absl::StrCat(kJobs, "?fieldValidation=Strict"), Job("typo", "1", R"(,"replicaz":1)"),
             Fails(400, "BadRequest", {}, R"(unknown field "spec.replicaz")")),
        // A map entry of the wrong type is named "<map>.<key>" (not "<map>[<key>]").
        Post(kJobs, Job("selector", "1", R"(,"coordinator":{"nodeSelector":{"pool":1}})"),
             Fails(422, "Invalid", {"spec.coordinator.nodeSelector.pool"},
                   "spec.coordinator.nodeSelector.pool in body must be of type string"))}},
      {"TrainingJob_StatusSubresource",
       "",
       {Post(kJobs, Job("train", "1"), Ok(201, {{"metadata.generation", "1"}})),
        Patch(absl::StrCat(kJobs, "/train/status"), kMerge, R"({"status":{"phase":"Running"}})",
              Ok(200, {{"status.phase", R"("Running")"}, {"metadata.generation", "1"}}))}},
  };
}

}  // namespace

std::vector<Case> AllCases() {
  std::vector<Case> all;
  for (auto part : {CrudCases(), CustomResourceCases(), ValidationCases(), WatchCases(),
                    ApplyAndGcCases(), UnsupportedFeatureCases(), TrainingJobCases()}) {
    for (Case& c : part) all.push_back(std::move(c));
  }
  return all;
}

std::vector<Fixture> Fixtures() {
  const std::string widget =
      R"({"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"widgets.diff.phalanx.dev"},
 "spec":{"group":"diff.phalanx.dev","scope":"Namespaced",
  "names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
  "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
     "spec":{"type":"object","required":["size"],"properties":{
       "size":{"type":"integer","minimum":1,"maximum":10},
       "mode":{"type":"string","enum":["fast","safe"],"default":"safe"},
       "label":{"type":"string","maxLength":8,"pattern":"^[a-z]+$"},
       "tags":{"type":"array","maxItems":3,"items":{"type":"string"}},
       "settings":{"type":"object","default":{},"properties":{"retries":{"type":"integer","default":3}}},
       "free":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
     "status":{"type":"object","properties":{"ready":{"type":"integer"}}}}}}}]}})";
  const std::string gadget =
      R"({"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
 "metadata":{"name":"gadgets.diff.phalanx.dev"},
 "spec":{"group":"diff.phalanx.dev","scope":"Namespaced",
  "names":{"plural":"gadgets","singular":"gadget","kind":"Gadget","listKind":"GadgetList"},
  "versions":[{"name":"v1","served":true,"storage":true,
   "schema":{"openAPIV3Schema":{"type":"object","properties":{
     "spec":{"type":"object",
       "x-kubernetes-validations":[{"rule":"self.low <= self.high","message":"low must not exceed high"}],
       "properties":{"low":{"type":"integer"},"high":{"type":"integer"}}}}}}}]}})";
  return {
      {kCrds, widget, "/apis/diff.phalanx.dev/v1/widgets"},
      {kCrds, gadget, "/apis/diff.phalanx.dev/v1/gadgets"},
      // The TrainingJob CRD is read from crds/ by the test (its body is filled in there).
      {kCrds, "", "/apis/phalanx.dev/v1alpha1/trainingjobs"},
  };
}

}  // namespace phalanx::localcluster::differential
