// The TrainingJob CRD (crds/trainingjobs.phalanx.dev.yaml) applied to an in-process local cluster:
// every manifest in tests/testdata/ (and examples/trainingjob.yaml) is accepted or rejected as its
// name says (`# needs: cel` ones only by the operator here), the schema's defaults equal types.h's
// (DecodeSpec of the raw manifest and of the object the server stored agree), and a full status
// survives the /status subresource (no field of it is pruned by the schema). The local cluster
// ignores CEL rules (tests/localcluster/README.md), so only schema rules are checked against it;
// the CEL rules' intent is covered by ValidateSpec.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"
#include "common/kube/rest_client.h"
#include "common/testing/status_matchers.h"
#include "operator/api/codec.h"
#include "operator/api/validation.h"
#include "operator/api/yaml_json.h"
#include "tests/localcluster/local_cluster.h"

namespace phalanx::op {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::Contains;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

const kube::Resource& kCrds = kube::kCustomResourceDefinitions;
const kube::Resource kTrainingJobs{kGroup, kVersion, kPlural, true};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Json LoadYaml(const fs::path& path) {
  absl::StatusOr<Json> json = YamlToJson(ReadFile(path));
  EXPECT_THAT(json.status(), IsOk()) << path;
  return json.ok() ? *json : Json::null();
}

// The value of every "# <key>: <value>" comment line in `path`.
std::vector<std::string> CommentValues(const fs::path& path, const std::string& key) {
  std::vector<std::string> out;
  std::istringstream lines(ReadFile(path));
  const std::string prefix = absl::StrCat("# ", key, ": ");
  for (std::string line; std::getline(lines, line);) {
    if (absl::StartsWith(line, prefix)) out.push_back(line.substr(prefix.size()));
  }
  return out;
}

std::vector<fs::path> TestData(const std::string& prefix) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(PHALANX_SOURCE_DIR "/tests/testdata")) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, prefix) && absl::EndsWith(name, ".yaml"))
      out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// What the operator says about a manifest: DecodeSpec's error or ValidateName's and
// ValidateSpec's messages.
std::vector<std::string> OperatorErrors(const Json& job) {
  absl::StatusOr<TrainingJobSpec> spec = DecodeSpec(job);
  if (!spec.ok()) return {std::string(spec.status().message())};
  std::vector<std::string> errors = ValidateName(kube::MetaString(job, "name"));
  for (std::string& e : ValidateSpec(*spec)) errors.push_back(std::move(e));
  return errors;
}

const Json& Schema(const Json& crd) {
  return crd.at("spec").at("versions").at(0).at("schema").at("openAPIV3Schema");
}

class TrainingJobCrdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / absl::StrCat("phalanx-crd-test-", getpid()));
    localcluster::LocalClusterOptions options;
    options.nodes = 0;
    options.work_dir = dir_->string();
    absl::StatusOr<std::unique_ptr<localcluster::LocalCluster>> cluster =
        localcluster::LocalCluster::Start(options);
    ASSERT_THAT(cluster.status(), IsOk());
    cluster_ = cluster->release();
    kube::RestClientOptions client_options;
    client_options.request_timeout = absl::Seconds(20);
    absl::StatusOr<std::unique_ptr<kube::RestClient>> client =
        kube::RestClient::Create(cluster_->client_config(), client_options);
    ASSERT_THAT(client.status(), IsOk());
    client_ = client->release();
    crd_ = new Json(LoadYaml(PHALANX_SOURCE_DIR "/crds/trainingjobs.phalanx.dev.yaml"));
    ASSERT_THAT(client_->Create(kCrds, "", *crd_).status(), IsOk());
  }
  static void TearDownTestSuite() {
    delete client_;
    if (cluster_ != nullptr) cluster_->Stop();
    delete cluster_;
    if (dir_ != nullptr) fs::remove_all(*dir_);
    delete dir_;
    delete crd_;
  }
  void SetUp() override {
    ASSERT_NE(client_, nullptr);
    ASSERT_NE(crd_, nullptr);
  }

  // Each manifest has its own name, and each test runs in its own process and cluster.
  absl::StatusOr<Json> Create(Json job) { return client_->Create(kTrainingJobs, "default", job); }

  static inline fs::path* dir_ = nullptr;
  static inline localcluster::LocalCluster* cluster_ = nullptr;
  static inline kube::RestClient* client_ = nullptr;
  static inline Json* crd_ = nullptr;
};

TEST_F(TrainingJobCrdTest, CrdIsServedWithItsNamesAndPrinterColumns) {
  absl::StatusOr<Json> crd = client_->Get(kCrds, "", "trainingjobs.phalanx.dev");
  ASSERT_THAT(crd.status(), IsOk());
  const Json& spec = crd->at("spec");
  EXPECT_EQ(spec.at("group").as_string(), kGroup);
  EXPECT_EQ(spec.at("scope").as_string(), "Namespaced");
  EXPECT_EQ(spec.at("names").at("kind").as_string(), kKind);
  EXPECT_EQ(spec.at("names").at("plural").as_string(), kPlural);
  EXPECT_EQ(spec.at("names").at("shortNames"), Json::parse(R"(["tj"])"));
  const Json& version = spec.at("versions").at(0);
  EXPECT_EQ(version.at("name").as_string(), kVersion);
  EXPECT_TRUE(version.at("served").as_bool());
  EXPECT_TRUE(version.at("storage").as_bool());
  EXPECT_TRUE(version.at("subresources").at("status").is_object());
  std::vector<std::string> columns;
  for (const Json& c : version.at("additionalPrinterColumns").as_array()) {
    columns.push_back(absl::StrCat(c.at("name").as_string(), " ", c.at("type").as_string(), " ",
                                   c.at("jsonPath").as_string()));
  }
  EXPECT_THAT(columns,
              ::testing::ElementsAre(
                  "Phase string .status.phase", "Ready integer .status.readyTasks",
                  "Replicas integer .spec.replicas", "Restarts integer .status.restarts",
                  "Preemptions integer .status.preemptions", "Age date .metadata.creationTimestamp",
                  // Wide only (priority 1), as kubectl get job -o wide adds columns.
                  "Deadline integer .spec.activeDeadlineSeconds",
                  "TTL integer .spec.ttlSecondsAfterFinished",
                  "Gang string .status.conditions[?(@.type==\"GangWaiting\")].reason",
                  "Spares integer .status.spares.ready"));
}

TEST_F(TrainingJobCrdTest, SchemaIsStructuralWithCelRulesAndARealStatusSchema) {
  const Json& schema = Schema(*crd_);
  const Json& spec = schema.at("properties").at("spec");
  EXPECT_EQ(spec.at("required"), Json::parse(R"(["replicas","template"])"));
  EXPECT_FALSE(spec.at("properties").at("replicas").has_field("default"));
  // spec.template is the generated PodTemplateSpec schema (scripts/gen-crd-podtemplate.py), not
  // an open object: typos are refused, not pruned.
  const Json& tmpl = spec.at("properties").at("template");
  EXPECT_FALSE(tmpl.has_field("x-kubernetes-preserve-unknown-fields"));
  const Json& container =
      tmpl.at("properties").at("spec").at("properties").at("containers").at("items");
  EXPECT_THAT(container.at("required").serialize(), HasSubstr("\"image\""));
  EXPECT_TRUE(container.at("properties").has_field("command"));
  EXPECT_FALSE(container.has_field("x-kubernetes-preserve-unknown-fields"));
  std::vector<std::string> root_rules;
  for (const Json& r : schema.at("x-kubernetes-validations").as_array()) {
    root_rules.push_back(r.at("rule").as_string());
  }
  EXPECT_THAT(root_rules,
              Contains(absl::StrCat("self.metadata.name.size() <= ", kMaxJobNameLength)));
  std::vector<std::string> rules;
  for (const Json& r : spec.at("x-kubernetes-validations").as_array()) {
    EXPECT_TRUE(r.has_field("message")) << r.serialize();
    rules.push_back(r.at("rule").as_string());
  }
  EXPECT_THAT(rules, Contains("self.replicas == oldSelf.replicas"));
  EXPECT_THAT(rules, Contains("self.successPolicy == oldSelf.successPolicy"));
  EXPECT_THAT(rules, Contains(HasSubstr("baseSeconds <= self.failurePolicy.backoff.maxSeconds")));
  EXPECT_THAT(rules, Contains(HasSubstr("heartbeatTimeoutSeconds > self.coordination.heartbeat")));
  const Json& status = schema.at("properties").at("status");
  EXPECT_FALSE(status.has_field("x-kubernetes-preserve-unknown-fields"));
  // Every field EncodeStatus writes has a schema (anything else would be pruned on write).
  TrainingJobStatus full;
  full.start_time = full.completion_time = full.last_restart_time = full.accounted_until =
      absl::Now();
  full.conditions.push_back({"Running", "True", "R", "m", absl::Now(), 1});
  TaskStatus task;
  task.pod = task.node = task.last_failure_reason = "x";
  task.state = TaskState::kRunning;  // every field set, so every one is encoded
  task.last_exit_code = 1;
  task.preempting_since = absl::Now();
  full.tasks.push_back(task);
  const Json encoded = EncodeStatus(full);
  const Json& props = status.at("properties");
  for (const auto& [key, unused] : encoded.as_object()) EXPECT_TRUE(props.has_field(key)) << key;
  for (const auto& [key, unused] : encoded.at("tasks").at(0).as_object()) {
    EXPECT_TRUE(props.at("tasks").at("items").at("properties").has_field(key)) << key;
  }
  for (const auto& [key, unused] : encoded.at("conditions").at(0).as_object()) {
    EXPECT_TRUE(props.at("conditions").at("items").at("properties").has_field(key)) << key;
  }
}

TEST_F(TrainingJobCrdTest, ValidManifests_AreAcceptedAndDefaultedAsTypesHSays) {
  std::vector<fs::path> files = TestData("trainingjob-valid-");
  ASSERT_GE(files.size(), 2u);
  files.push_back(PHALANX_SOURCE_DIR "/examples/trainingjob.yaml");
  files.push_back(PHALANX_SOURCE_DIR "/examples/trainingjob-coordinator.yaml");
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.filename().string());
    const Json manifest = LoadYaml(file);
    EXPECT_THAT(OperatorErrors(manifest), ::testing::IsEmpty());
    absl::StatusOr<Json> created = Create(manifest);
    ASSERT_THAT(created.status(), IsOk());
    absl::StatusOr<TrainingJobSpec> as_written = DecodeSpec(manifest);
    absl::StatusOr<TrainingJobSpec> as_stored = DecodeSpec(*created);
    ASSERT_THAT(as_written.status(), IsOk());
    ASSERT_THAT(as_stored.status(), IsOk());
    // The server filled in the schema's defaults; the codec filled in types.h's: the same.
    EXPECT_EQ(*as_stored, *as_written);
    EXPECT_THAT(ValidateSpec(*as_stored), ::testing::IsEmpty());
    EXPECT_EQ(created->at("spec").at("template"), manifest.at("spec").at("template"));
  }
}

TEST_F(TrainingJobCrdTest, MinimalManifest_GetsTheSchemaDefaultsWrittenIntoTheObject) {
  absl::StatusOr<Json> created =
      client_->Get(kTrainingJobs, "default", "minimal");  // created by the test above, or now
  if (!created.ok()) {
    created = Create(LoadYaml(PHALANX_SOURCE_DIR "/tests/testdata/trainingjob-valid-minimal.yaml"));
  }
  ASSERT_THAT(created.status(), IsOk());
  const Json& spec = created->at("spec");
  EXPECT_EQ(spec.at("failurePolicy").at("maxRestarts").as_integer(), 3);
  EXPECT_EQ(spec.at("failurePolicy").at("restartScope").as_string(), "Task");
  EXPECT_EQ(spec.at("failurePolicy").at("backoff").at("baseSeconds").as_integer(), 10);
  EXPECT_EQ(spec.at("failurePolicy").at("backoff").at("maxSeconds").as_integer(), 300);
  EXPECT_FALSE(spec.at("failurePolicy").at("preemptionsCountTowardMaxRestarts").as_bool());
  EXPECT_EQ(spec.at("preemption").at("checkpointGraceSeconds").as_integer(), 60);
  EXPECT_TRUE(spec.at("preemption").at("onNodeTaints").as_bool());
  EXPECT_EQ(spec.at("coordination").at("heartbeatTimeoutSeconds").as_integer(), 10);
  EXPECT_EQ(spec.at("coordination").at("barrierTimeoutSeconds").as_integer(), 300);
  EXPECT_FALSE(spec.at("suspend").as_bool());
  EXPECT_EQ(spec.at("successPolicy").as_string(), "AllTasks");
}

TEST_F(TrainingJobCrdTest, InvalidManifests_AreRejectedByTheSchemaAndByTheOperator) {
  const std::vector<fs::path> files = TestData("trainingjob-invalid-");
  ASSERT_GE(files.size(), 4u);
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.filename().string());
    const std::vector<std::string> expect = CommentValues(file, "expect");
    const std::vector<std::string> expect_operator = CommentValues(file, "expect-operator");
    ASSERT_EQ(expect.size(), 1u) << "each invalid manifest needs one '# expect: ' line";
    ASSERT_EQ(expect_operator.size(), 1u) << "and one '# expect-operator: ' line";
    const Json manifest = LoadYaml(file);
    // Only a CEL rule refuses these; the built-in API server evaluates none
    // (scripts/crd_envtest_test.py checks them on a real kube-apiserver).
    if (CommentValues(file, "needs") != std::vector<std::string>{"cel"}) {
      EXPECT_THAT(Create(manifest).status(),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(expect[0])));
    }
    EXPECT_THAT(absl::StrJoin(OperatorErrors(manifest), "\n"), HasSubstr(expect_operator[0]));
  }
}

TEST_F(TrainingJobCrdTest, FullStatus_SurvivesTheStatusSubresource) {
  Json manifest = LoadYaml(PHALANX_SOURCE_DIR "/tests/testdata/trainingjob-valid-minimal.yaml");
  manifest["metadata"]["name"] = Json::string("status-round-trip");
  absl::StatusOr<Json> created = Create(manifest);
  ASSERT_THAT(created.status(), IsOk());

  TrainingJobStatus status;
  status.phase = kPhaseRunning;
  status.observed_generation = 1;
  SetCondition(status.conditions, {"Running", "True", "AllTasksRunning", "2/2 tasks", {}, 1},
               absl::FromUnixSeconds(1700000000));
  TaskStatus t0;
  t0.pod = "status-round-trip-task-0";
  t0.node = "node-0";
  t0.incarnation = 2;
  t0.state = TaskState::kRunning;
  t0.restarts = 1;
  t0.last_failure_reason = "Error";
  t0.last_exit_code = 1;
  t0.preempting_since = absl::FromUnixNanos(1700000001500000000);
  TaskStatus t1 = t0;
  t1.index = 1;
  t1.last_exit_code.reset();
  status.tasks = {t0, t1};
  status.ready_tasks = 2;
  status.restarts = 1;
  status.preemptions = 1;
  status.start_time = absl::FromUnixSeconds(1700000000);
  status.last_restart_time = absl::FromUnixSeconds(1700000100);
  status.productive_seconds = 12.25;
  status.lost_seconds = 3.5;
  status.accounted_until = absl::FromUnixNanos(1700000200123456789);
  status.goodput.detection_seconds = 2.5;
  status.goodput.coordinator_outage_seconds = 1;
  status.goodput.rolled_back_seconds = 0.75;
  status.goodput.coordinator_down_since = absl::FromUnixNanos(1700000150250000000);
  status.goodput.detection_booked_until = absl::FromUnixSeconds(1700000120);
  status.goodput.rollback_coordinator = "0a1b2c3d4e5f6071";
  status.goodput.rollback_booked = 0.75;

  Json job = *created;
  job["status"] = EncodeStatus(status);
  absl::StatusOr<Json> written = client_->UpdateStatus(kTrainingJobs, "default", job);
  ASSERT_THAT(written.status(), IsOk());
  absl::StatusOr<Json> read = client_->Get(kTrainingJobs, "default", "status-round-trip");
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_EQ(DecodeStatus(*read), status) << read->at("status").serialize();

  // The schema guards status too: a negative counter is refused.
  Json bad = *read;
  bad["status"]["restarts"] = Json::number(-1);
  EXPECT_THAT(client_->UpdateStatus(kTrainingJobs, "default", bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("status.restarts")));
}

}  // namespace
}  // namespace phalanx::op
