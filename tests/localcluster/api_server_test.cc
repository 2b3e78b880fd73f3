// The REST client against the local cluster's HTTPS API server (in-process, real TLS and token):
// CRUD, conflicts, pagination, selectors, watch with bookmarks, relist on 410, dropped watches,
// injected errors, CRD validation and the status subresource.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/kube/object_meta.h"
#include "common/kube/resources.h"
#include "common/kube/rest_client.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "tests/localcluster/local_cluster.h"

namespace phalanx::localcluster {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

using kube::kConfigMaps;
using kube::kPods;
const kube::Resource& kCrds = kube::kCustomResourceDefinitions;
const kube::Resource kWidgets{"example.dev", "v1", "widgets", true};

Json ConfigMap(const std::string& name, const std::string& labels_json = "{}") {
  return Json::parse(absl::StrCat(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":")",
                                  name, R"(","labels":)", labels_json, R"(},"data":{"k":"v"}})"));
}

constexpr char kWidgetCrd[] = R"({
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.example.dev"},
  "spec": {"group": "example.dev", "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "subresources": {"status": {}},
      "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "required": ["size"], "properties": {
          "size": {"type": "integer", "minimum": 1},
          "color": {"type": "string", "enum": ["red", "blue"], "default": "red"}}},
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}})";

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("phalanx-api-test-", getpid(), "-", counter_++);
    LocalClusterOptions options;
    options.nodes = 0;
    options.work_dir = dir_.string();
    options.history_limit = 200;
    absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
    ASSERT_THAT(cluster.status(), IsOk());
    cluster_ = *std::move(cluster);
    client_ = MakeClient(cluster_->client_config());
  }
  void TearDown() override {
    client_.reset();
    if (cluster_) cluster_->Stop();
    std::filesystem::remove_all(dir_);
  }

  static std::unique_ptr<kube::RestClient> MakeClient(const kube::ClusterConfig& config,
                                                      int max_throttled_retries = 10) {
    kube::RestClientOptions options;
    options.request_timeout = absl::Seconds(20);
    options.max_throttled_retries = max_throttled_retries;
    return *kube::RestClient::Create(config, options);
  }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<kube::RestClient> client_;
};

TEST_F(ApiServerTest, CreateGetUpdateWithConflictsAndDelete) {
  absl::StatusOr<Json> created = client_->Create(kConfigMaps, "default", ConfigMap("a"));
  ASSERT_THAT(created.status(), IsOk());
  EXPECT_FALSE(kube::MetaString(*created, "uid").empty());
  EXPECT_THAT(client_->Create(kConfigMaps, "default", ConfigMap("a")).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));

  Json stale = *created;
  Json first = *created;
  first["data"]["k"] = Json::string("v2");
  ASSERT_THAT(client_->Update(kConfigMaps, "default", first).status(), IsOk());
  stale["data"]["k"] = Json::string("v3");
  EXPECT_THAT(client_->Update(kConfigMaps, "default", stale).status(),
              StatusIs(absl::StatusCode::kAborted));  // 409 conflict: requeue

  absl::StatusOr<Json> got = client_->Get(kConfigMaps, "default", "a");
  ASSERT_THAT(got.status(), IsOk());
  EXPECT_EQ(got->at("data").at("k").as_string(), "v2");

  kube::DeleteOptions wrong_uid;
  wrong_uid.uid_precondition = "not-the-uid";
  EXPECT_FALSE(client_->Delete(kConfigMaps, "default", "a", wrong_uid).ok());
  EXPECT_THAT(client_->Delete(kConfigMaps, "default", "a", {}), IsOk());
  EXPECT_THAT(client_->Get(kConfigMaps, "default", "a").status(),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ApiServerTest, BadInputGetsClearErrors) {
  EXPECT_THAT(client_->Create(kConfigMaps, "nowhere", ConfigMap("a")).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nowhere")));
  EXPECT_THAT(client_->Create(kConfigMaps, "default", ConfigMap("Bad_Name")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("metadata.name")));
  absl::StatusOr<std::string> garbage =
      client_->Raw("POST", "/api/v1/namespaces/default/configmaps", "{not json");
  EXPECT_THAT(garbage.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(client_->Raw("GET", "/api/v1/nosuchthings").status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(client_->List(kConfigMaps, "default", {.label_selector = "a in ("}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ApiServerTest, ListPaginatesAndFiltersBySelectors) {
  for (int i = 0; i < 7; ++i) {
    ASSERT_THAT(client_
                    ->Create(kConfigMaps, "default",
                             ConfigMap(absl::StrCat("cm", i),
                                       i % 2 == 0 ? R"({"parity":"even"})" : R"({"parity":"odd"})"))
                    .status(),
                IsOk());
  }
  std::vector<std::string> names;
  kube::ListOptions options{.limit = 3};
  int pages = 0;
  do {
    absl::StatusOr<kube::ObjectList> page = client_->List(kConfigMaps, "default", options);
    ASSERT_THAT(page.status(), IsOk());
    for (const Json& item : page->items) names.push_back(kube::MetaString(item, "name"));
    options.continue_token = page->continue_token;
    ++pages;
  } while (!options.continue_token.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(names.size(), 7u);
  EXPECT_EQ(client_->List(kConfigMaps, "default", {.label_selector = "parity=even"})->items.size(),
            4u);
  EXPECT_EQ(client_->List(kConfigMaps, "", {.field_selector = "metadata.name=cm3"})->items.size(),
            1u);
}

TEST_F(ApiServerTest, WatchDeliversEventsAndBookmarksFromAResourceVersion) {
  absl::StatusOr<kube::ObjectList> list = client_->List(kConfigMaps, "default", {});
  ASSERT_THAT(list.status(), IsOk());
  absl::StatusOr<std::unique_ptr<kube::WatchStream>> watch =
      client_->Watch(kConfigMaps, "default",
                     {.resource_version = list->resource_version, .label_selector = "app=x"});
  ASSERT_THAT(watch.status(), IsOk());
  ASSERT_THAT(client_->Create(kConfigMaps, "default", ConfigMap("other")).status(), IsOk());
  ASSERT_THAT(client_->Create(kConfigMaps, "default", ConfigMap("mine", R"({"app":"x"})")).status(),
              IsOk());
  std::vector<std::string> seen;
  bool bookmark = false;
  ASSERT_TRUE(phalanx::testing::Eventually(
      [&] {
        absl::StatusOr<std::optional<kube::WatchEventData>> e =
            (*watch)->Next(absl::Milliseconds(100));
        if (!e.ok()) return true;  // fails below
        if (e->has_value()) {
          if ((*e)->type == "BOOKMARK")
            bookmark = true;
          else
            seen.push_back((*e)->type + " " + kube::MetaString((*e)->object, "name"));
        }
        return bookmark && !seen.empty();
      },
      absl::Seconds(20)));
  EXPECT_EQ(seen, std::vector<std::string>{"ADDED mine"});
}

TEST_F(ApiServerTest, TooOldResourceVersionIsAnInStreamExpiredError) {
  absl::StatusOr<kube::ObjectList> list = client_->List(kConfigMaps, "default", {});
  ASSERT_THAT(list.status(), IsOk());
  // The history holds 200 events: push the list's version out of it.
  for (int i = 0; i < 250; ++i) {
    ASSERT_THAT(client_->Create(kConfigMaps, "default", ConfigMap(absl::StrCat("x", i))).status(),
                IsOk());
  }
  absl::StatusOr<std::unique_ptr<kube::WatchStream>> watch =
      client_->Watch(kConfigMaps, "default", {.resource_version = list->resource_version});
  ASSERT_THAT(watch.status(), IsOk());
  absl::StatusOr<std::optional<kube::WatchEventData>> e;
  ASSERT_TRUE(phalanx::testing::Eventually(
      [&] { return !(e = (*watch)->Next(absl::Milliseconds(100))).ok(); }, absl::Seconds(20)));
  EXPECT_THAT(e.status(), StatusIs(absl::StatusCode::kOutOfRange));  // relist
}

TEST_F(ApiServerTest, DroppedWatchEndsTheStreamAndCanResume) {
  absl::StatusOr<std::unique_ptr<kube::WatchStream>> watch =
      client_->Watch(kConfigMaps, "default", {.allow_bookmarks = false});
  ASSERT_THAT(watch.status(), IsOk());
  ASSERT_THAT(client_->Create(kConfigMaps, "default", ConfigMap("before")).status(), IsOk());
  std::string last_version;
  ASSERT_TRUE(phalanx::testing::Eventually(
      [&] {
        auto e = (*watch)->Next(absl::Milliseconds(100));
        if (e.ok() && e->has_value()) last_version = (*e)->resource_version;
        return !last_version.empty();
      },
      absl::Seconds(20)));
  cluster_->api().DropWatches();
  absl::StatusOr<std::optional<kube::WatchEventData>> e;
  ASSERT_TRUE(phalanx::testing::Eventually(
      [&] { return !(e = (*watch)->Next(absl::Milliseconds(100))).ok(); }, absl::Seconds(20)));
  EXPECT_THAT(e.status(), StatusIs(absl::StatusCode::kUnavailable));
  ASSERT_THAT(client_->Create(kConfigMaps, "default", ConfigMap("after")).status(), IsOk());
  // Resuming from the last version seen misses nothing.
  watch = client_->Watch(kConfigMaps, "default", {.resource_version = last_version});
  ASSERT_THAT(watch.status(), IsOk());
  std::string name;
  ASSERT_TRUE(phalanx::testing::Eventually(
      [&] {
        auto next = (*watch)->Next(absl::Milliseconds(100));
        if (next.ok() && next->has_value()) name = kube::MetaString((*next)->object, "name");
        return !name.empty();
      },
      absl::Seconds(20)));
  EXPECT_EQ(name, "after");
}

TEST_F(ApiServerTest, InjectedErrorsAreRetryableStatuses) {
  cluster_->api().InjectErrors(1.0, 500);
  EXPECT_THAT(client_->Get(kConfigMaps, "default", "x").status(),
              StatusIs(absl::StatusCode::kUnavailable));
  cluster_->api().InjectErrors(0.5, 429);
  // A client that does not resend throttled requests sees half of them fail...
  std::unique_ptr<kube::RestClient> no_retry = MakeClient(cluster_->client_config(), 0);
  int failures = 0;
  for (int i = 0; i < 10; ++i) {
    if (absl::IsUnavailable(no_retry->List(kConfigMaps, "default", {}).status())) ++failures;
  }
  EXPECT_EQ(failures, 5);
  // ...and by default each is sent again after the Retry-After the server names (1 s).
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(client_->List(kConfigMaps, "default", {}).status(), IsOk());
  }
  cluster_->api().InjectErrors(0, 500);
  EXPECT_THAT(client_->List(kConfigMaps, "default", {}).status(), IsOk());
}

TEST_F(ApiServerTest, CustomResourcesAreValidatedDefaultedAndHaveAStatusSubresource) {
  ASSERT_THAT(client_->Create(kCrds, "", Json::parse(kWidgetCrd)).status(), IsOk());
  absl::StatusOr<Json> crd = client_->Get(kCrds, "", "widgets.example.dev");
  ASSERT_THAT(crd.status(), IsOk());
  EXPECT_EQ(crd->at("status").at("conditions").size(), 2u);

  Json bad = Json::parse(
      R"({"apiVersion":"example.dev/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":0,"color":"green"}})");
  absl::Status invalid = client_->Create(kWidgets, "default", bad).status();
  EXPECT_THAT(invalid, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.size")));
  EXPECT_THAT(invalid, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.color")));

  Json good = Json::parse(
      R"({"apiVersion":"example.dev/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":2},"status":{"phase":"ignored"}})");
  absl::StatusOr<Json> created = client_->Create(kWidgets, "default", good);
  ASSERT_THAT(created.status(), IsOk());
  EXPECT_EQ(created->at("spec").at("color").as_string(), "red");  // defaulted
  EXPECT_EQ(created->at("metadata").at("generation").as_integer(), 1);

  Json status = *created;
  status["status"] = Json::parse(R"({"phase":"Running"})");
  absl::StatusOr<Json> after_status = client_->UpdateStatus(kWidgets, "default", status);
  ASSERT_THAT(after_status.status(), IsOk());
  EXPECT_EQ(after_status->at("metadata").at("generation").as_integer(), 1);  // status: no bump

  absl::StatusOr<Json> patched = client_->Patch(kWidgets, "default", "w", kube::PatchType::kMerge,
                                                Json::parse(R"({"spec":{"size":5}})"), {});
  ASSERT_THAT(patched.status(), IsOk());
  EXPECT_EQ(patched->at("metadata").at("generation").as_integer(), 2);
  EXPECT_EQ(patched->at("status").at("phase").as_string(), "Running");  // main write keeps status
  EXPECT_THAT(client_
                  ->Patch(kWidgets, "default", "w", kube::PatchType::kMerge,
                          Json::parse(R"({"spec":{"size":-1}})"), {})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument));

  // Server-side apply creates when absent.
  absl::StatusOr<Json> applied = client_->Patch(
      kWidgets, "default", "w2", kube::PatchType::kApply,
      Json::parse(R"({"apiVersion":"example.dev/v1","kind":"Widget","spec":{"size":3}})"), {});
  ASSERT_THAT(applied.status(), IsOk());
  EXPECT_EQ(applied->at("spec").at("size").as_integer(), 3);

  // Deleting the CRD deletes its objects and its API.
  ASSERT_THAT(client_->Delete(kCrds, "", "widgets.example.dev", {}), IsOk());
  EXPECT_THAT(client_->Get(kWidgets, "default", "w").status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(cluster_->store().List("widgets.example.dev", "", {}, 0, "")->items.size(), 0u);
}

TEST_F(ApiServerTest, OwnerReferenceGarbageCollectionOverRest) {
  absl::StatusOr<Json> owner = client_->Create(kConfigMaps, "default", ConfigMap("owner"));
  ASSERT_THAT(owner.status(), IsOk());
  Json dependent = ConfigMap("dependent");
  kube::ObjectMeta meta = kube::ObjectMeta::Decode(dependent);
  meta.owner_references.push_back(
      {"v1", "ConfigMap", "owner", kube::MetaString(*owner, "uid"), true, true});
  meta.EncodeInto(dependent);
  ASSERT_THAT(client_->Create(kConfigMaps, "default", dependent).status(), IsOk());
  ASSERT_THAT(client_->Delete(kConfigMaps, "default", "owner", {}), IsOk());
  EXPECT_TRUE(phalanx::testing::Eventually(
      [&] { return absl::IsNotFound(client_->Get(kConfigMaps, "default", "dependent").status()); },
      absl::Seconds(20)));
}

TEST_F(ApiServerTest, SecretsFoldStringDataAndNamespacesDeleteTheirContents) {
  const kube::Resource secrets{"", "v1", "secrets", true};
  const kube::Resource namespaces{"", "v1", "namespaces", false};
  ASSERT_THAT(
      client_->Create(namespaces, "", Json::parse(R"({"metadata":{"name":"team"}})")).status(),
      IsOk());
  absl::StatusOr<Json> secret = client_->Create(
      secrets, "team", Json::parse(R"({"metadata":{"name":"s"},"stringData":{"token":"abc"}})"));
  ASSERT_THAT(secret.status(), IsOk());
  EXPECT_EQ(secret->at("data").at("token").as_string(), "YWJj");
  EXPECT_FALSE(secret->has_field("stringData"));
  ASSERT_THAT(client_->Delete(namespaces, "", "team", {}), IsOk());
  EXPECT_THAT(client_->Get(secrets, "team", "s").status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ApiServerTest, AuthAndTlsAreEnforced) {
  kube::ClusterConfig wrong_token = cluster_->client_config();
  wrong_token.token = "nope";
  EXPECT_THAT(MakeClient(wrong_token)->List(kConfigMaps, "default", {}).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));

  kube::ClusterConfig no_ca = cluster_->client_config();
  no_ca.ca_pem.clear();  // system roots do not know the cluster's CA
  EXPECT_THAT(MakeClient(no_ca)->List(kConfigMaps, "default", {}).status(),
              StatusIs(absl::StatusCode::kUnavailable));

  kube::ClusterConfig insecure = no_ca;
  insecure.insecure_skip_tls_verify = true;
  EXPECT_THAT(MakeClient(insecure)->List(kConfigMaps, "default", {}).status(), IsOk());
}

TEST_F(ApiServerTest, TokenFileIsReReadWhenItRotates) {
  const std::string token_file = (dir_ / "token").string();
  std::ofstream(token_file) << "stale-token\n";
  kube::ClusterConfig config = cluster_->client_config();
  config.token.clear();
  config.token_file = token_file;
  std::unique_ptr<kube::RestClient> client = MakeClient(config);
  EXPECT_FALSE(client->List(kConfigMaps, "default", {}).ok());
  std::ofstream(token_file, std::ios::trunc) << cluster_->token() << "\n";
  EXPECT_THAT(client->List(kConfigMaps, "default", {}).status(), IsOk());
}

TEST_F(ApiServerTest, KubeconfigItWritesLoadsAndWorks) {
  absl::StatusOr<kube::ClusterConfig> config = kube::LoadKubeconfig(cluster_->kubeconfig_path());
  ASSERT_THAT(config.status(), IsOk());
  EXPECT_EQ(config->server, cluster_->url());
  EXPECT_THAT(MakeClient(*config)->List(kConfigMaps, "default", {}).status(), IsOk());
  EXPECT_THAT(client_->Raw("GET", "/apis").status(), IsOk());
  absl::StatusOr<std::string> core = client_->Raw("GET", "/api/v1");
  ASSERT_THAT(core.status(), IsOk());
  EXPECT_THAT(*core, HasSubstr("\"pods/status\""));
}

}  // namespace
}  // namespace phalanx::localcluster
