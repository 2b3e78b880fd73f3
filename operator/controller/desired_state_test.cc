// Tests of the children the operator renders (desired_state.h) against the rules a real API
// server enforces on them (issue 11): the coordinator pod passes Pod Security "restricted", and
// a job whose name is as long as the CRD allows (kMaxJobNameLength) gives every child a valid
// name, host name and label value, while one character more does not.
#include "operator/controller/desired_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>

#include "absl/strings/str_cat.h"
#include "common/auth/clique_ticket.h"
#include "common/auth/credentials.h"
#include "common/auth/tls_issuer.h"
#include "common/kube/object_meta.h"
#include "operator/api/codec.h"
#include "operator/api/validation.h"

namespace phalanx::op {
namespace {

using ::testing::HasSubstr;

Json Job(const std::string& name) {
  return Json::parse(absl::StrCat(
      R"({"apiVersion":"phalanx.dev/v1alpha1","kind":"TrainingJob","metadata":{"name":")", name,
      R"(","namespace":"ns","uid":"u1"},"spec":{"replicas":2}})"));
}

TrainingJobSpec DefaultSpec() {
  TrainingJobSpec spec;
  spec.replicas = 10000;
  spec.pod_template =
      Json::parse(R"({"spec":{"containers":[{"name":"main","image":"x","command":["train"]}]}})");
  return spec;
}

const Json& At(const Json& v, const std::string& key) { return kube::FieldOrNull(v, key); }

// The checks of the "restricted" Pod Security Standard (v1.26) that a pod can fail, each named
// as the PodSecurity admission plugin names it; empty when the pod passes. A field may be set
// on the container or, where the standard allows, inherited from the pod.
std::vector<std::string> RestrictedViolations(const Json& pod) {
  std::vector<std::string> out;
  const Json& spec = At(pod, "spec");
  const Json& psc = At(spec, "securityContext");
  for (const char* host : {"hostNetwork", "hostPID", "hostIPC"}) {
    if (At(spec, host).is_boolean() && At(spec, host).as_bool()) out.push_back("host namespaces");
  }
  if (At(spec, "volumes").is_array()) {
    for (const Json& v : At(spec, "volumes").as_array()) {
      if (!At(v, "hostPath").is_null()) out.push_back("restricted volume types");
    }
  }
  for (const Json& c : kube::ArrayOrEmpty(spec, "containers").as_array()) {
    const Json& sc = At(c, "securityContext");
    const std::string name = kube::StringAt(c, "name");
    if (At(sc, "privileged").is_boolean() && At(sc, "privileged").as_bool()) {
      out.push_back(name + ": privileged");
    }
    const Json& ape = At(sc, "allowPrivilegeEscalation");
    if (!ape.is_boolean() || ape.as_bool())
      out.push_back(name + ": allowPrivilegeEscalation != false");
    const Json& nonroot =
        At(sc, "runAsNonRoot").is_boolean() ? At(sc, "runAsNonRoot") : At(psc, "runAsNonRoot");
    if (!nonroot.is_boolean() || !nonroot.as_bool()) out.push_back(name + ": runAsNonRoot != true");
    const Json& uid = At(sc, "runAsUser").is_null() ? At(psc, "runAsUser") : At(sc, "runAsUser");
    if (uid.is_integer() && uid.as_integer() == 0) out.push_back(name + ": runAsUser=0");
    const Json& seccomp =
        At(sc, "seccompProfile").is_null() ? At(psc, "seccompProfile") : At(sc, "seccompProfile");
    const std::string type = kube::StringAt(seccomp, "type");
    if (type != "RuntimeDefault" && type != "Localhost") out.push_back(name + ": seccompProfile");
    const Json& caps = At(sc, "capabilities");
    bool drops_all = false;
    for (const Json& d : kube::ArrayOrEmpty(caps, "drop").as_array()) {
      drops_all |= d.is_string() && d.as_string() == "ALL";
    }
    if (!drops_all) out.push_back(name + ": unrestricted capabilities (drop ALL)");
    for (const Json& a : kube::ArrayOrEmpty(caps, "add").as_array()) {
      if (!a.is_string() || a.as_string() != "NET_BIND_SERVICE") {
        out.push_back(name + ": adds a capability");
      }
    }
  }
  return out;
}

TEST(DesiredCoordinatorPod, PassesPodSecurityRestricted) {
  const Json pod = DesiredCoordinatorPod(Job("j"), DefaultSpec(), CoordinatorPlacement{}, "t");
  EXPECT_THAT(RestrictedViolations(pod), ::testing::IsEmpty()) << pod.serialize();
  const Json& psc = pod.at("spec").at("securityContext");
  EXPECT_EQ(psc.at("seccompProfile").at("type").as_string(), "RuntimeDefault");
  EXPECT_TRUE(psc.at("runAsNonRoot").as_bool());
  EXPECT_NE(psc.at("runAsUser").as_integer(), 0);
  const Json& sc = pod.at("spec").at("containers").at(0).at("securityContext");
  EXPECT_EQ(sc.at("seccompProfile").at("type").as_string(), "RuntimeDefault");
  EXPECT_FALSE(sc.at("allowPrivilegeEscalation").as_bool());
  EXPECT_EQ(sc.at("capabilities").at("drop"), Json::parse(R"(["ALL"])"));
}

// Issue 16 items 1 and 2: a wedged coordinator is restarted by its gRPC liveness probe, and its
// memory is bounded by a limit (requests small and guaranteed: requests = limits).
TEST(DesiredCoordinatorPod, HasAGrpcLivenessProbeAndBoundedResources) {
  CoordinatorPlacement placement;
  placement.port = 20470;
  const Json pod = DesiredCoordinatorPod(Job("j"), DefaultSpec(), placement, "t");
  const Json& c = pod.at("spec").at("containers").at(0);
  const Json& probe = c.at("livenessProbe");
  EXPECT_EQ(probe.at("grpc").at("port").as_integer(), 20470);
  EXPECT_FALSE(probe.at("grpc").has_field("service"));  // the server's overall health
  EXPECT_GE(probe.at("periodSeconds").as_integer() * probe.at("failureThreshold").as_integer(), 20);
  EXPECT_LT(probe.at("timeoutSeconds").as_integer(), probe.at("periodSeconds").as_integer());
  const Json& resources = c.at("resources");
  EXPECT_EQ(resources.at("requests").at("cpu").as_string(), "100m");
  EXPECT_EQ(resources.at("requests").at("memory").as_string(), "256Mi");
  EXPECT_EQ(resources.at("limits").at("memory").as_string(), "256Mi");
  EXPECT_EQ(resources.at("limits").at("cpu").as_string(), "100m");  // Guaranteed (issue 13)
}

TEST(RestrictedViolations, CatchesWhatThePodSecurityPluginRefuses) {
  // The checker itself: the coordinator pod as it was before issue 11 (no seccomp profile).
  Json pod = DesiredCoordinatorPod(Job("j"), DefaultSpec(), CoordinatorPlacement{}, "t");
  pod["spec"].as_object().erase("securityContext");
  pod["spec"]["containers"][0]["securityContext"].as_object().erase("seccompProfile");
  EXPECT_THAT(RestrictedViolations(pod), ::testing::ElementsAre("coordinator: seccompProfile"));
}

// Issue 16 items 8 and 9: every pod gets its credential as a mounted file, never as an env
// var, and a task pod gets only its own task's credential.
TEST(DesiredTaskPod, MountsOnlyItsOwnTaskCredentialAsAFile) {
  TrainingJobSpec spec = DefaultSpec();
  spec.replicas = 4;
  const Json pod = DesiredTaskPod(Job("j"), spec, 2, 5, "c:1");
  const std::string text = pod.serialize();
  EXPECT_THAT(text, ::testing::Not(HasSubstr("secretKeyRef")));
  EXPECT_THAT(text,
              HasSubstr(R"({"name":"PHALANX_TOKEN_FILE","value":"/var/run/phalanx/token/token"})"));
  const Json& volumes = pod.at("spec").at("volumes");
  ASSERT_EQ(volumes.size(), 1u);
  EXPECT_EQ(volumes.at(0).at("secret").at("items"),
            Json::parse(R"([{"key":"task-2","path":"token"}])"));
  EXPECT_EQ(pod.at("spec").at("containers").at(0).at("volumeMounts").at(0).at("mountPath"),
            Json::string("/var/run/phalanx/token"));
}

TEST(DesiredSecret, HoldsTheJobTokenAndOneCredentialPerTask) {
  TrainingJobSpec spec = DefaultSpec();
  spec.replicas = 3;
  const Json secret = DesiredSecret(Job("j"), spec, "jt");
  const Json& data = secret.at("stringData");
  EXPECT_EQ(data.size(), 5u);  // the token, three task credentials, the spare credential
  EXPECT_EQ(data.at("token").as_string(), "jt");
  EXPECT_EQ(data.at("task-2").as_string(), auth::TaskCredential("jt", 2));
  EXPECT_EQ(data.at("spare").as_string(), auth::SpareCredential("jt", 0));
}

// With the agents' key, each task's clique ticket (common/auth/clique_ticket.h) for this job's
// namespace, name and uid, which the agent's key verifies.
TEST(DesiredSecret, HoldsEachTasksCliqueTicketWhenTheAgentsHaveAKey) {
  TrainingJobSpec spec = DefaultSpec();
  spec.replicas = 2;
  Json job = Job("j");
  job["metadata"]["namespace"] = Json::string("team-a");
  job["metadata"]["uid"] = Json::string("uid-7");
  const Json secret = DesiredSecret(job, spec, "jt", "agent-key");
  const Json& data = secret.at("stringData");
  EXPECT_EQ(data.size(), 6u);
  absl::StatusOr<auth::CliqueTicketClaims> claims =
      auth::VerifyCliqueTicket("agent-key", data.at("task-1-clique").as_string());
  ASSERT_TRUE(claims.ok()) << claims.status();
  EXPECT_EQ(claims->ns, "team-a");
  EXPECT_EQ(claims->name, "j");
  EXPECT_EQ(claims->uid, "uid-7");
  EXPECT_EQ(claims->task, 1);
}

// Only with the agent's channel: the pod's own tasks' tickets, from an optional volume (a Secret
// written before the operator had the agents' key has none, and the pod must still start).
TEST(DesiredTaskPod, MountsItsOwnTasksCliqueTicketsWithTheAgentsChannel) {
  TrainingJobSpec spec = DefaultSpec();
  spec.replicas = 2;
  spec.nproc_per_node = 2;
  const Json without = DesiredTaskPod(Job("j"), spec, 1, 1, "c:1");
  EXPECT_THAT(without.serialize(), ::testing::Not(HasSubstr("clique")));
  const Json pod = DesiredTaskPod(Job("j"), spec, 1, 1, "c:1", 8479);
  const Json& volumes = pod.at("spec").at("volumes");
  ASSERT_EQ(volumes.size(), 2u);
  EXPECT_EQ(volumes.at(1).at("name"), Json::string("phalanx-clique-ticket"));
  EXPECT_EQ(volumes.at(1).at("secret").at("items"),
            Json::parse(R"([{"key":"task-2-clique","path":"ticket-2"},
                            {"key":"task-3-clique","path":"ticket-3"}])"));
  EXPECT_EQ(volumes.at(1).at("secret").at("optional"), Json::boolean(true));
  const std::string text = pod.at("spec").at("containers").at(0).serialize();
  EXPECT_THAT(text, HasSubstr(R"("mountPath":"/var/run/phalanx/clique")"));
  EXPECT_THAT(text, HasSubstr(R"({"name":"PHALANX_CLIQUE_TICKET_FILE",)"
                              R"("value":"/var/run/phalanx/clique/ticket-2"})"));
}

TEST(DesiredCoordinatorPod, ReadsItsTokenFromAFileAndKnowsItsFingerprint) {
  const Json pod = DesiredCoordinatorPod(Job("j"), DefaultSpec(), CoordinatorPlacement{}, "jt");
  const std::string text = pod.serialize();
  EXPECT_THAT(text, ::testing::Not(HasSubstr("secretKeyRef")));
  EXPECT_THAT(text, HasSubstr("--token_file=/var/run/phalanx/token/token"));
  EXPECT_THAT(text, HasSubstr("--token_sha256=" + auth::Sha256Hex("jt")));
  EXPECT_EQ(pod.at("spec").at("containers").at(0).at("terminationMessagePolicy"),
            Json::string("FallbackToLogsOnError"));
  EXPECT_EQ(pod.at("spec").at("volumes").at(0).at("secret").at("items"),
            Json::parse(R"([{"key":"token","path":"token"}])"));
}

// --- TLS (docs/security.md "TLS by default") -----------------------------------------------------

// The Secret's TLS files for `job`: a fresh CA's certificate and a coordinator leaf it signed.
JobTlsFiles TlsFilesFor(const Json& job) {
  absl::StatusOr<auth::TlsKeyPair> ca = auth::MakeCertificateAuthority("ca", absl::Hours(1));
  EXPECT_TRUE(ca.ok()) << ca.status();
  absl::StatusOr<auth::TlsKeyPair> leaf =
      auth::IssueServerCertificate(*ca, CoordinatorTlsDnsNames(job), absl::Hours(1));
  EXPECT_TRUE(leaf.ok()) << leaf.status();
  return {ca->cert_pem, *leaf};
}

CoordinatorPlacement WithTls(bool tls) {
  CoordinatorPlacement placement;
  placement.tls = tls;
  return placement;
}

// Every container's env as name → value.
std::map<std::string, std::string> EnvOf(const Json& container) {
  std::map<std::string, std::string> env;
  for (const Json& e : kube::ArrayOrEmpty(container, "env").as_array()) {
    env[e.at("name").as_string()] = kube::StringAt(e, "value");
  }
  return env;
}

TEST(CoordinatorTls, TheServerNameIsTheServicesAndTheCertificateNamesEveryFormOfIt) {
  Json job = Job("j");
  job["metadata"]["namespace"] = Json::string("team-a");
  EXPECT_EQ(CoordinatorTlsServerName(job), "j-coordinator.team-a.svc");
  EXPECT_THAT(
      CoordinatorTlsDnsNames(job),
      ::testing::ElementsAre("j-coordinator.team-a.svc", "j-coordinator.team-a.svc.cluster.local",
                             "j-coordinator.team-a", "j-coordinator"));
}

TEST(DesiredSecret, WithTlsHoldsTheCaCertificateAndTheCoordinatorsCertificateAndKey) {
  TrainingJobSpec spec = DefaultSpec();
  spec.replicas = 3;
  const JobTlsFiles tls = TlsFilesFor(Job("j"));
  const Json secret = DesiredSecret(Job("j"), spec, "jt", "", &tls);
  const Json& data = secret.at("stringData");
  EXPECT_EQ(data.size(), 8u);  // the five of DesiredSecret without TLS, and three files
  EXPECT_EQ(data.at("ca.crt").as_string(), tls.ca_cert_pem);
  EXPECT_EQ(data.at("tls.crt").as_string(), tls.coordinator.cert_pem);
  EXPECT_EQ(data.at("tls.key").as_string(), tls.coordinator.key_pem);
  EXPECT_EQ(DesiredSecret(Job("j"), spec, "jt").at("stringData").size(), 5u);
}

TEST(DesiredCoordinatorPod, WithTlsMountsOnlyItsCertificateAndKeyAndServesThem) {
  const Json pod = DesiredCoordinatorPod(Job("j"), DefaultSpec(), WithTls(true), "jt");
  const Json& c = pod.at("spec").at("containers").at(0);
  const std::string args = c.at("args").serialize();
  EXPECT_THAT(args, HasSubstr(R"("--tls_cert_file=/var/run/phalanx/tls/tls.crt")"));
  EXPECT_THAT(args, HasSubstr(R"("--tls_key_file=/var/run/phalanx/tls/tls.key")"));
  const Json& volumes = pod.at("spec").at("volumes");
  ASSERT_EQ(volumes.size(), 2u);
  EXPECT_EQ(volumes.at(1).at("name"), Json::string("phalanx-tls"));
  EXPECT_EQ(volumes.at(1).at("secret").at("secretName"), Json::string("j-token"));
  EXPECT_EQ(
      volumes.at(1).at("secret").at("items"),
      Json::parse(R"([{"key":"tls.crt","path":"tls.crt"},{"key":"tls.key","path":"tls.key"}])"));
  EXPECT_FALSE(volumes.at(1).at("secret").has_field("optional"));
  EXPECT_THAT(c.at("volumeMounts").serialize(), HasSubstr(R"("mountPath":"/var/run/phalanx/tls")"));
  // The kubelet's gRPC probe speaks cleartext: under TLS it is /healthz on the metrics port.
  const Json& probe = c.at("livenessProbe");
  EXPECT_FALSE(probe.has_field("grpc"));
  EXPECT_EQ(probe.at("httpGet").at("path"), Json::string("/healthz"));
  EXPECT_EQ(probe.at("httpGet").at("port").as_integer(), 8471);
  EXPECT_THAT(RestrictedViolations(pod), ::testing::IsEmpty());
}

// A task or spare pod holds the CA's certificate only: never the coordinator's key (it could
// pose as the coordinator) nor the job token.
TEST(DesiredTaskPod, WithTlsEveryContainerMountsOnlyTheCaCertificateAndKnowsTheServerName) {
  TrainingJobSpec spec = DefaultSpec();
  spec.replicas = 2;
  spec.spares = 1;
  spec.pod_template = Json::parse(R"({"spec":{"containers":[
      {"name":"main","image":"x","command":["train"]},{"name":"side","image":"y"}]}})");
  const std::vector<std::pair<std::string, Json>> pods = {
      {"task", DesiredTaskPod(Job("j"), spec, 1, 3, "c:1", 0, true)},
      {"spare", DesiredSparePod(Job("j"), spec, 0, 0, "c:1", true)}};
  for (const auto& [what, pod] : pods) {
    SCOPED_TRACE(what);
    const Json& volumes = pod.at("spec").at("volumes");
    ASSERT_EQ(volumes.size(), 2u);
    EXPECT_EQ(volumes.at(1).at("name"), Json::string("phalanx-tls"));
    EXPECT_EQ(volumes.at(1).at("secret").at("items"),
              Json::parse(R"([{"key":"ca.crt","path":"ca.crt"}])"));
    const std::string text = pod.serialize();
    EXPECT_THAT(text, ::testing::Not(HasSubstr("tls.key")));
    EXPECT_THAT(text, ::testing::Not(HasSubstr(R"("key":"token")")));
    for (const Json& c : pod.at("spec").at("containers").as_array()) {
      SCOPED_TRACE(c.at("name").as_string());
      const std::map<std::string, std::string> env = EnvOf(c);
      EXPECT_EQ(env.at("PHALANX_TLS_CA_FILE"), "/var/run/phalanx/tls/ca.crt");
      EXPECT_EQ(env.at("PHALANX_TLS_SERVER_NAME"), "j-coordinator.ns.svc");
      EXPECT_THAT(c.at("volumeMounts").serialize(),
                  HasSubstr(R"({"mountPath":"/var/run/phalanx/tls","name":"phalanx-tls",)"
                            R"("readOnly":true})"));
    }
  }
}

// --coordinator_tls=false: the objects are exactly those of before TLS.
TEST(DesiredChildren, WithoutTlsNothingOfItAppears) {
  TrainingJobSpec spec = DefaultSpec();
  spec.replicas = 2;
  const std::vector<std::pair<std::string, Json>> objects = {
      {"secret", DesiredSecret(Job("j"), spec, "jt")},
      {"coordinator", DesiredCoordinatorPod(Job("j"), spec, WithTls(false), "jt")},
      {"task", DesiredTaskPod(Job("j"), spec, 1, 3, "c:1")},
      {"spare", DesiredSparePod(Job("j"), spec, 0, 0, "c:1")}};
  for (const auto& [what, object] : objects) {
    SCOPED_TRACE(what);
    const std::string text = object.serialize();
    for (const char* absent : {"tls", "TLS", "ca.crt"})
      EXPECT_THAT(text, ::testing::Not(HasSubstr(absent)));
  }
  EXPECT_TRUE(DesiredCoordinatorPod(Job("j"), spec, WithTls(false), "jt")
                  .at("spec")
                  .at("containers")
                  .at(0)
                  .at("livenessProbe")
                  .has_field("grpc"));
}

TEST(DesiredCoordinatorNetworkPolicy, AdmitsTheJobsPodsAndTheOperatorOnTheGrpcPort) {
  CoordinatorPlacement placement;
  placement.port = 8470;
  const Json policy = DesiredCoordinatorNetworkPolicy(
      Job("j"), placement, {.operator_namespace = "phalanx-system", .metrics_from = ""});
  EXPECT_EQ(
      policy.at("spec").at("podSelector"),
      Json::parse(R"({"matchLabels":{"phalanx.dev/job":"j","phalanx.dev/role":"coordinator"}})"));
  const Json& ingress = policy.at("spec").at("ingress");
  ASSERT_EQ(ingress.size(), 1u);  // metrics closed
  EXPECT_EQ(ingress.at(0).at("ports"), Json::parse(R"([{"protocol":"TCP","port":8470}])"));
  EXPECT_EQ(ingress.at(0).at("from"), Json::parse(R"([
      {"podSelector":{"matchLabels":{"phalanx.dev/job":"j"}}},
      {"podSelector":{"matchLabels":{"app.kubernetes.io/component":"operator"}},
       "namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"phalanx-system"}}}])"));
  const Json open = DesiredCoordinatorNetworkPolicy(Job("j"), placement, {.metrics_from = "*"});
  EXPECT_EQ(open.at("spec").at("ingress").at(1),
            Json::parse(
                R"({"ports":[{"protocol":"TCP","port":8471}],"from":[{"namespaceSelector":{}}]})"));
}

bool IsDns1035Label(const std::string& s) {
  static const std::regex re("[a-z]([-a-z0-9]*[a-z0-9])?");
  return s.size() <= 63 && std::regex_match(s, re);
}
bool IsDns1123Subdomain(const std::string& s) {
  static const std::regex re("[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  return s.size() <= 253 && std::regex_match(s, re);
}
bool IsLabelValue(const std::string& s) {
  static const std::regex re("(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?");
  return s.size() <= 63 && std::regex_match(s, re);
}

// Every name and label value the operator derives from a job named `job`, each checked as the
// API server checks it; returns the ones that fail.
std::vector<std::string> InvalidChildNames(const std::string& job) {
  std::vector<std::string> bad;
  auto want = [&bad](bool ok, const std::string& what) {
    if (!ok) bad.push_back(what);
  };
  const Json j = Job(job);
  const TrainingJobSpec spec = DefaultSpec();
  const int last = spec.replicas - 1;
  const int big_incarnation = 2147483647;
  want(IsDns1123Subdomain(SecretName(job)), "secret " + SecretName(job));
  want(IsDns1035Label(CoordinatorName(job)), "service " + CoordinatorName(job));
  want(IsDns1123Subdomain(CoordinatorName(job)), "pod " + CoordinatorName(job));
  want(IsDns1035Label(TasksServiceName(job)), "service " + TasksServiceName(job));
  want(IsDns1123Subdomain(TaskPodName(job, last, big_incarnation)), "task pod name");
  const Json task = DesiredTaskPod(j, spec, last, big_incarnation, "c:1");
  // hostname and subdomain are DNS-1123 labels (the pod API's check).
  want(IsDns1035Label(kube::StringAt(task.at("spec"), "hostname")), "task hostname");
  want(IsDns1035Label(kube::StringAt(task.at("spec"), "subdomain")), "task subdomain");
  for (const Json& child : {task, DesiredCoordinatorPod(j, spec, CoordinatorPlacement{}, "t"),
                            DesiredCoordinatorService(j, CoordinatorPlacement{}),
                            DesiredTasksService(j), DesiredSecret(j, spec, "t"),
                            DesiredCoordinatorNetworkPolicy(j, CoordinatorPlacement{}, {})}) {
    for (const auto& [key, value] : kube::LabelsOf(child)) {
      want(IsLabelValue(value), absl::StrCat("label ", key, "=", value));
    }
  }
  return bad;
}

TEST(ChildNames, FitForTheLongestJobNameTheCrdAllows) {
  const std::string longest(kMaxJobNameLength, 'j');
  EXPECT_THAT(ValidateName(longest), ::testing::IsEmpty());
  EXPECT_THAT(InvalidChildNames(longest), ::testing::IsEmpty());
  // One more character: the coordinator's Service name is 64 and the API server refuses it.
  EXPECT_THAT(InvalidChildNames(longest + "j"),
              ::testing::ElementsAre(absl::StrCat("service ", longest, "j-coordinator")));
  // A dot is fine in a TrainingJob's own name but not in a Service's or a host name.
  EXPECT_THAT(InvalidChildNames("a.b"), ::testing::Not(::testing::IsEmpty()));
  EXPECT_THAT(ValidateName("a.b"), ::testing::Not(::testing::IsEmpty()));
}

// With PHALANX_DUMP_CHILDREN_DIR set, writes every child of a job to that directory (one JSON
// file each) for scripts/crd_envtest_test.py, which creates them on a real kube-apiserver in a
// namespace that enforces Pod Security "restricted", with fieldValidation=Strict.
TEST(DesiredChildren, DumpForTheRealApiServerCheck) {
  const char* dir = std::getenv("PHALANX_DUMP_CHILDREN_DIR");
  if (dir == nullptr) GTEST_SKIP() << "PHALANX_DUMP_CHILDREN_DIR not set";
  Json job = Job("dumped");
  job["metadata"]["namespace"] = Json::string("restricted");
  TrainingJobSpec spec = DefaultSpec();
  spec.replicas = 2;
  spec.pod_template = Json::parse(
      R"({"metadata":{"labels":{"team":"a"},"annotations":{"note":"x"}},
          "spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":1000,
                                     "seccompProfile":{"type":"RuntimeDefault"}},
                  "containers":[{"name":"main","image":"example.com/worker:1","command":["train"],
                                 "env":[{"name":"KEEP","value":"1"}],
                                 "securityContext":{"allowPrivilegeEscalation":false,
                                                    "capabilities":{"drop":["ALL"]}}}]}})");
  // With TLS, the operator's default (--coordinator_tls): the TLS volumes, the probe over HTTP.
  CoordinatorPlacement placement;
  placement.tls = true;
  const JobTlsFiles tls = TlsFilesFor(job);
  const std::vector<std::pair<std::string, Json>> children = {
      {"secret", DesiredSecret(job, spec, "token", "agent-key", &tls)},
      {"networkpolicy",
       DesiredCoordinatorNetworkPolicy(job, placement, {.operator_namespace = "phalanx-system"})},
      {"service-coordinator", DesiredCoordinatorService(job, placement)},
      {"service-tasks", DesiredTasksService(job)},
      {"pod-coordinator", DesiredCoordinatorPod(job, spec, placement, "token")},
      {"pod-task",
       DesiredTaskPod(job, spec, 1, 3, CoordinatorAddress(job, placement, ""), 0, true)},
      // With the node agent's clique channel wired (docs/adr/0004) it must still pass.
      {"pod-task-agent-channel",
       DesiredTaskPod(job, spec, 0, 1, CoordinatorAddress(job, placement, ""), 8479, true)}};
  for (const auto& [name, object] : children) {
    std::ofstream out(absl::StrCat(dir, "/", name, ".json"));
    out << object.serialize();
    ASSERT_TRUE(out.good()) << name;
  }
}

}  // namespace
}  // namespace phalanx::op
