// The differential API test: one table of API behaviours (api_cases.cc) run against
// phalanx-localcluster's built-in API server (BuiltinApi/...) and against a real control plane
// (RealApi/..., CTest label `envtest`). Each back end's cluster starts once per test binary as a
// `phalanx-localcluster --backend X --nodes 0` subprocess; every case runs in its own namespace.
// A response that differs from the table is a failure; a case that says the built-in server
// cannot follow it checks that the built-in server says so loudly (a Warning header).
//
// PHALANX_DIFF_REAL_KUBECONFIG=FILE points the real half at an already running API server instead
// of starting one (for developing the table against a hand-started kube-apiserver).
#include <cpprest/http_client.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/kube/cluster_config.h"
#include "common/kube/json.h"
#include "common/process/subprocess.h"
#include "common/testing/eventually.h"
#include "operator/api/yaml_json.h"
#include "tests/localcluster/differential/api_case.h"

namespace phalanx::localcluster::differential {
namespace {

using kube::Json;
using ::phalanx::testing::Eventually;

const std::string kBuild = PHALANX_BUILD_DIR;
const std::string kSource = PHALANX_SOURCE_DIR;

struct Reply {
  int code = 0;  // 0: transport error (in body)
  std::string body;
  Json json;
  std::vector<std::string> warnings;
};

// `299 - "text"` values, several per header when the client joined repeated headers.
std::vector<std::string> ParseWarnings(const std::string& header) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = header.find('"', at)) != std::string::npos) {
    std::string text;
    size_t i = at + 1;
    for (; i < header.size() && header[i] != '"'; ++i) {
      if (header[i] == '\\' && i + 1 < header.size()) ++i;
      text += header[i];
    }
    out.push_back(text);
    at = i + 1;
  }
  return out;
}

// The value at "a.b[2].c" in `root`; nullptr when absent.
const Json* At(const Json& root, const std::string& path) {
  const Json* cur = &root;
  for (absl::string_view seg : absl::StrSplit(path, '.')) {
    std::string key(seg.substr(0, seg.find('[')));
    if (!key.empty()) {
      if (!cur->is_object() || !cur->has_field(key)) return nullptr;
      cur = &cur->at(key);
    }
    size_t open = seg.find('[');
    while (open != absl::string_view::npos) {
      const size_t close = seg.find(']', open);
      size_t index = 0;
      if (close == absl::string_view::npos ||
          !absl::SimpleAtoi(seg.substr(open + 1, close - open - 1), &index) || !cur->is_array() ||
          index >= cur->size()) {
        return nullptr;
      }
      cur = &cur->at(index);
      open = seg.find('[', close);
    }
  }
  return cur;
}

class Backend {
 public:
  std::string name;
  std::string kubeconfig;
  kube::ClusterConfig config;
  std::unique_ptr<process::Subprocess> process;
  std::filesystem::path dir;
  absl::Duration start_time;

  void Connect() {
    web::http::client::http_client_config c;
    c.set_timeout(std::chrono::seconds(60));
    c.set_validate_certificates(!config.insecure_skip_tls_verify);
    const std::string ca = config.ca_pem;
    c.set_ssl_context_callback([ca](boost::asio::ssl::context& ctx) {
      boost::system::error_code ignored;
      if (!ca.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca), ignored);
    });
    client_ = std::make_unique<web::http::client::http_client>(web::uri(config.server), c);
  }

  Reply Call(const std::string& method, const std::string& path, const std::string& body,
             const std::string& content_type) {
    web::http::http_request req(method == "WATCH" ? std::string("GET") : method);
    req.set_request_uri(web::uri(path));
    req.headers().add("Authorization", "Bearer " + config.token);
    req.headers().add("Accept", "application/json");
    if (!body.empty()) req.set_body(body, content_type);
    Reply reply;
    try {
      web::http::http_response r = client_->request(req).get();
      reply.code = r.status_code();
      reply.body = r.extract_utf8string(true).get();
      for (const auto& [k, v] : r.headers()) {
        if (absl::EqualsIgnoreCase(k, "warning")) {
          for (std::string& w : ParseWarnings(v)) reply.warnings.push_back(std::move(w));
        }
      }
    } catch (const std::exception& e) {
      reply.body = absl::StrCat("transport error: ", e.what());
      return reply;
    }
    if (method != "WATCH") {
      std::error_code ec;
      reply.json = Json::parse(reply.body, ec);
    }
    return reply;
  }

 private:
  std::unique_ptr<web::http::client::http_client> client_;
};

std::string RunId() {
  static const std::string id = [] {
    std::mt19937 rng(static_cast<unsigned>(getpid()) ^ static_cast<unsigned>(time(nullptr)));
    std::string s;
    for (int i = 0; i < 5; ++i) s += static_cast<char>('a' + rng() % 26);
    return s;
  }();
  return id;
}

std::string AssetsReason() {
  if (const char* a = std::getenv("KUBEBUILDER_ASSETS"); a != nullptr && *a != '\0') {
    if (std::filesystem::exists(std::filesystem::path(a) / "kube-apiserver")) return "";
  }
  if (std::filesystem::exists(kSource + "/../shared/envtest/kube-apiserver.xz")) return "";
  return "no control-plane assets: set KUBEBUILDER_ASSETS or provide ../shared/envtest";
}

// Status.reason of an error body ("" when none).
std::string ReasonOf(const Json& j) {
  return j.is_object() && j.has_field("reason") && j.at("reason").is_string()
             ? j.at("reason").as_string()
             : "";
}

// Outcome mismatches of `reply` against `e` (empty: it matches).
std::vector<std::string> Mismatches(const Reply& reply, const Expect& e, bool watch) {
  std::vector<std::string> m;
  if (e.code != 0 && reply.code != e.code) {
    m.push_back(absl::StrCat("code ", reply.code, ", want ", e.code));
  }
  const Json& j = reply.json;
  if (!e.reason.empty() && ReasonOf(j) != e.reason) {
    m.push_back(absl::StrCat("reason \"", ReasonOf(j), "\", want \"", e.reason, "\""));
  }
  for (const std::string& field : e.cause_fields) {
    bool found = false;
    if (const Json* causes = At(j, "details.causes"); causes && causes->is_array()) {
      for (const Json& c : causes->as_array()) {
        found |=
            c.has_field("field") && c.at("field").is_string() && c.at("field").as_string() == field;
      }
    }
    if (!found) m.push_back(absl::StrCat("no cause names field ", field));
  }
  if (!e.message_has.empty()) {
    const Json* msg = At(j, "message");
    if (msg == nullptr || !msg->is_string() ||
        !absl::StrContains(msg->as_string(), e.message_has)) {
      m.push_back(absl::StrCat("message lacks \"", e.message_has, "\""));
    }
  }
  for (const auto& [path, want] : e.fields) {
    const Json* v = At(j, path);
    if (want == "<absent>") {
      if (v != nullptr) m.push_back(absl::StrCat(path, " is ", v->serialize(), ", want absent"));
    } else if (v == nullptr) {
      m.push_back(absl::StrCat(path, " is absent, want ", want));
    } else if (want != "<present>" && *v != Json::parse(want)) {
      m.push_back(absl::StrCat(path, " is ", v->serialize(), ", want ", want));
    }
  }
  for (const std::string& w : e.warnings_have) {
    bool found = false;
    for (const std::string& have : reply.warnings) found |= absl::StrContains(have, w);
    if (!found) m.push_back(absl::StrCat("no Warning contains \"", w, "\""));
  }
  if (e.no_warnings && !reply.warnings.empty()) {
    m.push_back(absl::StrCat("unexpected warnings: ", absl::StrJoin(reply.warnings, " | ")));
  }
  if (watch) {
    std::vector<std::string> seen;
    for (absl::string_view line : absl::StrSplit(reply.body, '\n', absl::SkipWhitespace())) {
      std::error_code ec;
      Json ev = Json::parse(std::string(line), ec);
      if (ec || !ev.has_field("type")) continue;
      const std::string type = ev.at("type").as_string();
      const Json& obj = ev.at("object");
      if (type == "ERROR") {
        const Json* code = At(obj, "code");
        seen.push_back(absl::StrCat("ERROR:", code ? code->serialize() : "?", ":", ReasonOf(obj)));
      } else if (type == "BOOKMARK") {
        seen.push_back("BOOKMARK");
        // A bookmark is the kind plus metadata.resourceVersion only.
        if (At(obj, "metadata.resourceVersion") == nullptr || At(obj, "metadata.name") != nullptr) {
          m.push_back(absl::StrCat("malformed bookmark: ", obj.serialize()));
        }
      } else {
        const Json* name = At(obj, "metadata.name");
        seen.push_back(absl::StrCat(type, ":", name ? name->as_string() : "?"));
      }
    }
    size_t next = 0;
    for (const std::string& want : e.events) {
      while (next < seen.size() && seen[next] != want) ++next;
      if (next == seen.size()) {
        m.push_back(absl::StrCat("event ", want, " not seen (in order) in [",
                                 absl::StrJoin(seen, ", "), "]"));
        break;
      }
      ++next;
    }
    for (const std::string& bad : e.events_absent) {
      for (const std::string& s : seen) {
        if (s == bad) m.push_back(absl::StrCat("event ", bad, " should not appear"));
      }
    }
  }
  return m;
}

Backend* StartBackend(const std::string& backend, std::string* skip_reason) {
  auto b = std::make_unique<Backend>();
  b->name = backend;
  const absl::Time t0 = absl::Now();
  if (backend == "real") {
    if (const char* kc = std::getenv("PHALANX_DIFF_REAL_KUBECONFIG"); kc && *kc) {
      b->kubeconfig = kc;
    } else if (std::string why = AssetsReason(); !why.empty()) {
      *skip_reason = why;
      return nullptr;
    }
  }
  if (b->kubeconfig.empty()) {
    b->dir = std::filesystem::temp_directory_path() /
             absl::StrCat("phalanx-diff-", backend, "-", getpid());
    std::filesystem::create_directories(b->dir);
    b->kubeconfig = (b->dir / "kubeconfig").string();
    process::SubprocessOptions o;
    o.argv = {kBuild + "/tests/localcluster/phalanx-localcluster",
              "--backend",
              backend,
              "--kubeconfig-out",
              b->kubeconfig,
              "--nodes",
              "0",
              "--work-dir",
              (b->dir / "cluster").string()};
    o.stderr_path = (b->dir / "localcluster.log").string();
    auto is_ready = [](const std::string& l) { return absl::StartsWith(l, "ready "); };
    absl::StatusOr<std::unique_ptr<process::Subprocess>> p = process::Subprocess::Start(o);
    if (!p.ok()) return nullptr;
    std::optional<std::string> ready = (*p)->WaitForLine(is_ready, absl::Seconds(120));
    if (!ready.has_value() && backend == "builtin") {
      // A phalanx-localcluster from before --backend existed serves only the built-in server.
      o.argv.erase(o.argv.begin() + 1, o.argv.begin() + 3);
      p = process::Subprocess::Start(o);
      if (!p.ok()) return nullptr;
      ready = (*p)->WaitForLine(is_ready, absl::Seconds(120));
    }
    if (!ready.has_value()) {
      std::ifstream log(o.stderr_path);
      std::stringstream text;
      text << log.rdbuf();
      ADD_FAILURE() << "phalanx-localcluster --backend " << backend << " did not get ready:\n"
                    << text.str();
      return nullptr;
    }
    // Older binaries print no backend= (built-in only); a real back end must say it is one.
    if (backend == "real" && !absl::StrContains(*ready, "backend=real")) {
      ADD_FAILURE() << "asked for --backend real, got: " << *ready;
      return nullptr;
    }
    b->process = *std::move(p);
  }
  absl::StatusOr<kube::ClusterConfig> config = kube::LoadKubeconfig(b->kubeconfig);
  if (!config.ok()) {
    ADD_FAILURE() << config.status();
    return nullptr;
  }
  b->config = *config;
  b->Connect();
  // Fixtures: the test CRDs and the TrainingJob CRD, established before any case runs.
  for (Fixture f : Fixtures()) {
    if (f.body.empty()) {
      std::stringstream crd;
      crd << std::ifstream(kSource + "/crds/trainingjobs.phalanx.dev.yaml").rdbuf();
      absl::StatusOr<Json> json = op::YamlToJson(crd.str());
      if (!json.ok()) {
        ADD_FAILURE() << json.status();
        continue;
      }
      f.body = json->serialize();
    }
    Reply r = b->Call("POST", f.collection_path, f.body, "application/json");
    if (r.code != 201 && r.code != 409) {
      ADD_FAILURE() << backend << ": fixture " << f.ready_path << ": " << r.code << " " << r.body;
      continue;
    }
    if (!Eventually([&] { return b->Call("GET", f.ready_path, "", "").code == 200; },
                    absl::Seconds(30))) {
      ADD_FAILURE() << backend << ": " << f.ready_path << " never served";
    }
  }
  b->start_time = absl::Now() - t0;
  return b.release();
}

std::string NamespaceFor(const std::string& case_name) {
  std::string ns = "d-";
  for (char c : case_name) {
    if (ns.size() >= 44) break;
    if (absl::ascii_isalnum(c))
      ns += absl::ascii_tolower(c);
    else if (ns.back() != '-')
      ns += '-';
  }
  if (ns.back() != '-') ns += '-';
  return ns + RunId();
}

std::string Expand(std::string text, const std::map<std::string, std::string>& vars) {
  for (const auto& [k, v] : vars) text = absl::StrReplaceAll(text, {{"{" + k + "}", v}});
  return text;
}

void RunCase(Backend& b, const Case& c) {
  const bool builtin = b.name == "builtin";
  std::map<std::string, std::string> vars = {{"ns", NamespaceFor(c.name)}, {"run", RunId()}};
  if (builtin && !c.builtin_gap.empty()) {
    std::cout << "[ BUILTIN GAP ] " << c.name << ": " << c.builtin_gap << std::endl;
  }
  Reply ns = b.Call("POST", "/api/v1/namespaces",
                    absl::StrCat(R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":")",
                                 vars["ns"], "\"}}"),
                    "application/json");
  ASSERT_EQ(ns.code, 201) << ns.body;
  // Pods are admitted only once the namespace's default ServiceAccount exists.
  ASSERT_TRUE(Eventually(
      [&] {
        return b.Call("GET", Expand("/api/v1/namespaces/{ns}/serviceaccounts/default", vars), "",
                      "")
                   .code == 200;
      },
      absl::Seconds(30)));
  for (size_t i = 0; i < c.steps.size(); ++i) {
    const Step& s = c.steps[i];
    const Expect& e = builtin && s.builtin.has_value() ? *s.builtin : s.expect;
    const std::string path = Expand(s.path, vars);
    SCOPED_TRACE(absl::StrCat(b.name, " step ", i, ": ", s.method, " ", path));
    const bool watch = s.method == "WATCH";
    Reply reply;
    std::vector<std::string> m;
    auto attempt = [&] {
      reply = b.Call(s.method, path, Expand(s.body, vars), s.content_type);
      m = Mismatches(reply, e, watch);
      return m.empty();
    };
    if (s.eventually_s > 0) {
      Eventually(attempt, absl::Seconds(s.eventually_s));
    } else {
      attempt();
    }
    EXPECT_TRUE(m.empty()) << absl::StrJoin(m, "\n") << "\nbody: " << reply.body.substr(0, 2000)
                           << "\nwarnings: " << absl::StrJoin(reply.warnings, " | ");
    if (!m.empty()) break;  // later steps depend on this one
    for (const auto& [var, at] : s.save) {
      const Json* v = At(reply.json, at);
      ASSERT_NE(v, nullptr) << "cannot save " << at;
      vars[var] = v->is_string() ? v->as_string() : v->serialize();
    }
  }
  b.Call("DELETE", Expand("/api/v1/namespaces/{ns}", vars), "", "");
}

// Runs kubectl against a back end; returns (exit code, stdout+stderr).
std::pair<int, std::string> Kubectl(Backend& b, std::vector<std::string> args,
                                    const std::string& stdin_file = "") {
  const std::string out = (std::filesystem::temp_directory_path() /
                           absl::StrCat("phalanx-diff-kubectl-", getpid(), ".out"))
                              .string();
  std::filesystem::remove(out);
  process::SubprocessOptions o;
  o.argv = {"/usr/bin/kubectl", "--kubeconfig", b.kubeconfig};
  for (std::string& a : args) o.argv.push_back(std::move(a));
  if (!stdin_file.empty()) {
    o.argv = {"/bin/sh", "-c", absl::StrCat(absl::StrJoin(o.argv, " "), " < ", stdin_file)};
  }
  o.stdout_path = out;
  absl::StatusOr<std::unique_ptr<process::Subprocess>> p = process::Subprocess::Start(o);
  if (!p.ok()) return {-1, std::string(p.status().message())};
  (*p)->Wait(absl::Seconds(60));
  std::stringstream text;
  text << std::ifstream(out).rdbuf();
  return {(*p)->ExitCode().value_or(-1), text.str()};
}

class DifferentialTest : public ::testing::TestWithParam<Case> {
 protected:
  static void Start(const std::string& name, Backend*& slot, std::string& skip) {
    slot = StartBackend(name, &skip);
    if (slot != nullptr) {
      std::cout << "[ BACKEND ] " << name << " ready in " << slot->start_time << std::endl;
    }
  }
  static void Stop(Backend*& slot, absl::Time started) {
    if (slot == nullptr) return;
    std::cout << "[ BACKEND ] " << slot->name << " suite took " << (absl::Now() - started)
              << std::endl;
    if (slot->process) {
      slot->process->Signal(SIGTERM);
      slot->process->Wait(absl::Seconds(30));
    }
    std::error_code ec;
    if (!slot->dir.empty() && !::testing::Test::HasFailure())
      std::filesystem::remove_all(slot->dir, ec);
    delete slot;
    slot = nullptr;
  }
  void Run(Backend* b, const std::string& skip) {
    if (!skip.empty()) GTEST_SKIP() << skip;
    ASSERT_NE(b, nullptr) << "the cluster did not start";
    if (GetParam().steps.empty()) return KubectlFlows(b);
    RunCase(*b, GetParam());
  }
  static void KubectlFlows(Backend* b);
};

// The table plus one row that is not HTTP steps: kubectl's own flows, which need kubectl's own
// encoding (protobuf bodies for `create` generators) and its own reading of the answers.
std::vector<Case> TableAndKubectl() {
  std::vector<Case> all = AllCases();
  all.push_back({"Kubectl_CreateGenerators_AndStrictApply", "", {}});
  return all;
}

void DifferentialTest::KubectlFlows(Backend* b) {
  const std::string ns = NamespaceFor("kubectl");
  // kubectl 1.32 sends protobuf bodies for its `create` generators (issue 11, item 11).
  auto [code, out] = Kubectl(*b, {"create", "namespace", ns});
  EXPECT_EQ(code, 0) << out;
  std::tie(code, out) = Kubectl(*b, {"-n", ns, "create", "configmap", "c", "--from-literal=k=v"});
  EXPECT_EQ(code, 0) << out;
  std::tie(code, out) =
      Kubectl(*b, {"-n", ns, "create", "secret", "generic", "s", "--from-literal=k=v"});
  EXPECT_EQ(code, 0) << out;
  std::tie(code, out) =
      Kubectl(*b, {"-n", ns, "get", "configmap", "c", "-o", "jsonpath={.data.k}"});
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out, "v");
  // kubectl apply validates strictly on the server by default: a typo is an error naming it.
  const std::string manifest = (std::filesystem::temp_directory_path() /
                                absl::StrCat("phalanx-diff-pod-", getpid(), ".json"))
                                   .string();
  std::ofstream(manifest) << R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"typo"},)"
                          << R"("spec":{"containers":[{"name":"c","image":"x","comand":["a"]}]}})";
  std::tie(code, out) = Kubectl(*b, {"-n", ns, "apply", "-f", manifest});
  EXPECT_NE(code, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, R"(unknown field "spec.containers[0].comand")")) << out;
  std::tie(code, out) = Kubectl(*b, {"-n", ns, "apply", "--validate=warn", "-f", manifest});
  EXPECT_EQ(code, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, R"(unknown field "spec.containers[0].comand")")) << out;
  std::filesystem::remove(manifest);
  Kubectl(*b, {"delete", "namespace", ns, "--wait=false"});
}

}  // namespace

// gtest prints a case by its name, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

namespace {

std::string CaseName(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

class BuiltinApi : public DifferentialTest {
 public:
  static void SetUpTestSuite() {
    started_ = absl::Now();
    Start("builtin", backend_, skip_);
  }
  static void TearDownTestSuite() { Stop(backend_, started_); }
  static Backend* backend_;
  static std::string skip_;
  static absl::Time started_;
};
Backend* BuiltinApi::backend_ = nullptr;
std::string BuiltinApi::skip_;
absl::Time BuiltinApi::started_;

class RealApi : public DifferentialTest {
 public:
  static void SetUpTestSuite() {
    started_ = absl::Now();
    Start("real", backend_, skip_);
  }
  static void TearDownTestSuite() { Stop(backend_, started_); }
  static Backend* backend_;
  static std::string skip_;
  static absl::Time started_;
};
Backend* RealApi::backend_ = nullptr;
std::string RealApi::skip_;
absl::Time RealApi::started_;

TEST_P(BuiltinApi, Case) { Run(backend_, skip_); }
TEST_P(RealApi, Case) { Run(backend_, skip_); }
INSTANTIATE_TEST_SUITE_P(Table, BuiltinApi, ::testing::ValuesIn(TableAndKubectl()), CaseName);
INSTANTIATE_TEST_SUITE_P(Table, RealApi, ::testing::ValuesIn(TableAndKubectl()), CaseName);

}  // namespace
}  // namespace phalanx::localcluster::differential
