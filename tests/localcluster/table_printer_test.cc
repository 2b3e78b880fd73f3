#include "tests/localcluster/table_printer.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/kube/object_meta.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::localcluster {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

Json TableJson(const std::string& text) { return Json::parse(text); }

std::string Ago(absl::Duration d) { return kube::FormatKubeTime(kNow - d); }

std::vector<std::string> ColumnNames(const Json& table) {
  std::vector<std::string> names;
  for (const Json& column : table.at("columnDefinitions").as_array()) {
    names.push_back(column.at("name").as_string());
  }
  return names;
}

const Json& Cells(const Json& table, size_t row) { return table.at("rows").at(row).at("cells"); }

PrinterColumn Column(const std::string& name, const std::string& type, const std::string& json_path,
                     const std::string& description = "") {
  PrinterColumn column;
  column.name = name;
  column.type = type;
  column.json_path = json_path;
  column.description = description;
  return column;
}

// ---- HumanAge ----

struct AgeCase {
  absl::Duration age;
  std::string want;
};

TEST(HumanAge, FollowsKubectlRules) {
  const std::vector<AgeCase> cases = {
      {absl::Seconds(-5), "<invalid>"},
      {absl::Seconds(-1), "0s"},
      {absl::ZeroDuration(), "0s"},
      {absl::Seconds(45), "45s"},
      {absl::Seconds(119), "119s"},
      {absl::Minutes(2), "2m"},
      {absl::Minutes(3) + absl::Seconds(4), "3m4s"},
      {absl::Minutes(9) + absl::Seconds(59), "9m59s"},
      {absl::Minutes(10) + absl::Seconds(30), "10m"},
      {absl::Minutes(179), "179m"},
      {absl::Hours(3), "3h"},
      {absl::Hours(7) + absl::Minutes(59), "7h59m"},
      {absl::Hours(8) + absl::Minutes(30), "8h"},
      {absl::Hours(47), "47h"},
      {absl::Hours(48), "2d"},
      {absl::Hours(24 * 4 + 3), "4d3h"},
      {absl::Hours(24 * 8), "8d"},
      {absl::Hours(24 * 729), "729d"},
      {absl::Hours(24 * 730), "2y"},
      {absl::Hours(24 * 800), "2y70d"},
      {absl::Hours(24 * 365 * 8), "8y"},
      {absl::Hours(24 * 365 * 10 + 24 * 100), "10y"},
  };
  for (const AgeCase& c : cases) {
    SCOPED_TRACE(absl::FormatDuration(c.age));
    EXPECT_EQ(HumanAge(c.age), c.want);
  }
}

// ---- Table shape ----

TEST(BuildTable, HasTheMetaV1TableShape) {
  const Json object = TableJson(R"({"metadata":{"name":"cm1","creationTimestamp":")" +
                                Ago(absl::Seconds(5)) + R"("}})");
  const Json table = BuildTable("configmaps", {}, {object}, "42", kNow);
  EXPECT_EQ(table.at("kind").as_string(), "Table");
  EXPECT_EQ(table.at("apiVersion").as_string(), "meta.k8s.io/v1");
  EXPECT_EQ(table.at("metadata").at("resourceVersion").as_string(), "42");
  EXPECT_THAT(ColumnNames(table), ElementsAre("Name", "Age"));
  for (const Json& column : table.at("columnDefinitions").as_array()) {
    for (const char* key : {"name", "type", "format", "description", "priority"}) {
      EXPECT_TRUE(column.has_field(key)) << key;
    }
  }
  const Json& name = table.at("columnDefinitions").at(0);
  EXPECT_EQ(name.at("format").as_string(), "name");
  EXPECT_EQ(name.at("description").as_string(), "Name must be unique within a namespace.");
  ASSERT_EQ(table.at("rows").size(), 1u);
  EXPECT_EQ(Cells(table, 0), TableJson(R"(["cm1","5s"])"));
  EXPECT_EQ(table.at("rows").at(0).at("object"), object);
}

TEST(BuildTable, NoObjects_GivesNoRows) {
  const Json table = BuildTable("pods", {}, {}, "1", kNow);
  EXPECT_TRUE(table.at("rows").is_array());
  EXPECT_EQ(table.at("rows").size(), 0u);
}

// ---- Pods ----

// A pod in `phase` whose containers report `statuses` (a JSON array) over `containers` specs.
Json Pod(const std::string& phase, const std::string& statuses, int containers = 1,
         const std::string& extra_metadata = "") {
  std::string specs;
  for (int i = 0; i < containers; ++i) specs += std::string(i ? "," : "") + R"({"name":"c"})";
  return TableJson(R"({"metadata":{"name":"p","creationTimestamp":")" + Ago(absl::Minutes(5)) +
                   "\"" + extra_metadata + R"(},"spec":{"containers":[)" + specs +
                   R"(],"nodeName":"n1"},"status":{"phase":")" + phase +
                   R"(","podIP":"10.0.0.7","containerStatuses":)" + statuses + "}}");
}

TEST(BuildTable, Pods_ReadyRestartsAgeAndWideColumns) {
  const Json pod = Pod("Running", R"([
      {"name":"a","ready":true,"restartCount":1,"state":{"running":{}}},
      {"name":"b","ready":false,"restartCount":2,"state":{"running":{}}}])",
                       2);
  const Json table = BuildTable("pods", {}, {pod}, "7", kNow);
  EXPECT_THAT(ColumnNames(table),
              ElementsAre("Name", "Ready", "Status", "Restarts", "Age", "IP", "Node"));
  EXPECT_EQ(table.at("columnDefinitions").at(3).at("type").as_string(), "integer");
  EXPECT_EQ(table.at("columnDefinitions").at(5).at("priority").as_integer(), 1);
  const Json& cells = Cells(table, 0);
  EXPECT_EQ(cells, TableJson(R"(["p","1/2","Running",3,"5m","10.0.0.7","n1"])"));
  EXPECT_TRUE(cells.at(3).is_integer());
}

TEST(BuildTable, Pods_UnscheduledPodPrintsNone) {
  const Json pod = TableJson(R"({"metadata":{"name":"p"},"spec":{"containers":[{}]},
                                 "status":{"phase":"Pending"}})");
  EXPECT_EQ(Cells(BuildTable("pods", {}, {pod}, "1", kNow), 0),
            TableJson(R"(["p","0/1","Pending",0,"<unknown>","<none>","<none>"])"));
}

struct PodStatusCase {
  std::string name;
  Json pod;
  std::string want;
};

TEST(BuildTable, Pods_StatusColumnFollowsKubectl) {
  const std::string deleting = R"(,"deletionTimestamp":")" + Ago(absl::Seconds(1)) + "\"";
  const std::vector<PodStatusCase> cases = {
      {"PhaseWithoutStatuses", Pod("Pending", "[]"), "Pending"},
      {"Waiting", Pod("Pending", R"([{"state":{"waiting":{"reason":"ContainerCreating"}}}])"),
       "ContainerCreating"},
      {"CrashLoop",
       Pod("Running", R"([{"restartCount":4,"state":{"waiting":{"reason":"CrashLoopBackOff"}}}])"),
       "CrashLoopBackOff"},
      {"Completed",
       Pod("Succeeded", R"([{"state":{"terminated":{"reason":"Completed","exitCode":0}}}])"),
       "Completed"},
      {"Error", Pod("Failed", R"([{"state":{"terminated":{"reason":"Error","exitCode":1}}}])"),
       "Error"},
      {"ExitCodeWithoutReason", Pod("Failed", R"([{"state":{"terminated":{"exitCode":137}}}])"),
       "ExitCode:137"},
      {"SignalWithoutReason", Pod("Failed", R"([{"state":{"terminated":{"signal":9}}}])"),
       "Signal:9"},
      {"CompletedSidecarWithRunningMain",
       Pod("Running", R"([{"ready":true,"state":{"running":{}}},
                          {"state":{"terminated":{"reason":"Completed"}}}])",
           2),
       "NotReady"},
      {"Terminating", Pod("Running", R"([{"ready":true,"state":{"running":{}}}])", 1, deleting),
       "Terminating"},
      {"Evicted",
       TableJson(R"({"metadata":{"name":"p"},"status":{"phase":"Failed","reason":"Evicted"}})"),
       "Evicted"},
      {"InitWaiting",
       TableJson(R"({"metadata":{"name":"p"},"spec":{"initContainers":[{},{}],"containers":[{}]},
                     "status":{"phase":"Pending","initContainerStatuses":[
                       {"state":{"terminated":{"exitCode":0}}},
                       {"state":{"waiting":{"reason":"PodInitializing"}}}]}})"),
       "Init:1/2"},
      {"InitFailed",
       TableJson(R"({"metadata":{"name":"p"},"spec":{"initContainers":[{}],"containers":[{}]},
                     "status":{"phase":"Pending","initContainerStatuses":[
                       {"restartCount":2,"state":{"terminated":{"exitCode":1,"reason":"Error"}}}]}})"),
       "Init:Error"},
  };
  for (const PodStatusCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(Cells(BuildTable("pods", {}, {c.pod}, "1", kNow), 0).at(2).as_string(), c.want);
  }
}

// ---- Nodes, events, namespaces ----

TEST(BuildTable, Nodes_StatusRolesAndVersion) {
  const std::string created = Ago(absl::Hours(30));
  const Json ready =
      TableJson(R"({"metadata":{"name":"n1","creationTimestamp":")" + created + R"("},
      "status":{"conditions":[{"type":"MemoryPressure","status":"False"},
                              {"type":"Ready","status":"True"}],
                "nodeInfo":{"kubeletVersion":"v1.30.0"}}})");
  const Json cordoned = TableJson(R"({"metadata":{"name":"n2",
      "labels":{"node-role.kubernetes.io/control-plane":"","kubernetes.io/role":"gpu"}},
      "spec":{"unschedulable":true},
      "status":{"conditions":[{"type":"Ready","status":"False"}]}})");
  const Json unknown = TableJson(R"({"metadata":{"name":"n3"}})");
  const Json table = BuildTable("nodes", {}, {ready, cordoned, unknown}, "1", kNow);
  EXPECT_THAT(ColumnNames(table), ElementsAre("Name", "Status", "Roles", "Age", "Version"));
  EXPECT_EQ(Cells(table, 0), TableJson(R"(["n1","Ready","<none>","30h","v1.30.0"])"));
  EXPECT_EQ(
      Cells(table, 1),
      TableJson(R"(["n2","NotReady,SchedulingDisabled","control-plane,gpu","<unknown>",""])"));
  EXPECT_EQ(Cells(table, 2), TableJson(R"(["n3","Unknown","<none>","<unknown>",""])"));
}

TEST(BuildTable, Events_LastSeenObjectAndRepeats) {
  const Json once = TableJson(R"({"metadata":{"name":"e1"},"type":"Normal","reason":"Scheduled",
      "message":"assigned to n1\n","involvedObject":{"kind":"Pod","name":"p1"},
      "firstTimestamp":")" + Ago(absl::Minutes(3)) +
                              R"("})");
  const Json repeated = TableJson(R"({"metadata":{"name":"e2"},"type":"Warning","reason":"BackOff",
      "message":"restarting","involvedObject":{"kind":"TrainingJob","name":"j"},"count":4,
      "firstTimestamp":")" + Ago(absl::Minutes(20)) +
                                  R"(","lastTimestamp":")" + Ago(absl::Seconds(30)) + R"("})");
  const Json table = BuildTable("events", {}, {once, repeated}, "1", kNow);
  EXPECT_THAT(ColumnNames(table), ElementsAre("Last Seen", "Type", "Reason", "Object", "Message"));
  EXPECT_EQ(Cells(table, 0), TableJson(R"(["3m","Normal","Scheduled","pod/p1","assigned to n1"])"));
  EXPECT_EQ(
      Cells(table, 1),
      TableJson(
          R"json(["30s (x4 over 20m)","Warning","BackOff","trainingjob/j","restarting"])json"));
}

TEST(BuildTable, Namespaces_NameStatusAge) {
  const Json ns = TableJson(R"({"metadata":{"name":"default","creationTimestamp":")" +
                            Ago(absl::Hours(24 * 4 + 3)) + R"("},"status":{"phase":"Active"}})");
  const Json table = BuildTable("namespaces", {}, {ns}, "1", kNow);
  EXPECT_THAT(ColumnNames(table), ElementsAre("Name", "Status", "Age"));
  EXPECT_EQ(Cells(table, 0), TableJson(R"(["default","Active","4d3h"])"));
}

// ---- Custom resources ----

TEST(PrinterColumnsFromCrdVersion, ReadsEveryFieldAndSkipsGarbage) {
  const Json version = TableJson(R"({"name":"v1","additionalPrinterColumns":[
      {"name":"Phase","type":"string","jsonPath":".status.phase","description":"The phase"},
      {"name":"Tasks","type":"integer","jsonPath":".spec.tasks","priority":1,"format":"int32"},
      {"name":"NoPath","type":"string"},
      7,
      {"name":5,"jsonPath":".x"}]})");
  const std::vector<PrinterColumn> columns = PrinterColumnsFromCrdVersion(version);
  ASSERT_EQ(columns.size(), 2u);
  EXPECT_EQ(columns[0].name, "Phase");
  EXPECT_EQ(columns[0].type, "string");
  EXPECT_EQ(columns[0].json_path, ".status.phase");
  EXPECT_EQ(columns[0].description, "The phase");
  EXPECT_EQ(columns[0].priority, 0);
  EXPECT_EQ(columns[1].priority, 1);
  EXPECT_EQ(columns[1].format, "int32");

  EXPECT_THAT(PrinterColumnsFromCrdVersion(TableJson(R"({"name":"v1"})")), IsEmpty());
  EXPECT_THAT(PrinterColumnsFromCrdVersion(TableJson("[1]")), IsEmpty());
  EXPECT_THAT(PrinterColumnsFromCrdVersion(TableJson(R"({"additionalPrinterColumns":{}})")),
              IsEmpty());
}

TEST(BuildTable, CustomColumns_EvaluateJsonPathWithApiserverCellTypes) {
  const std::vector<PrinterColumn> columns = {
      Column("Phase", "string", ".status.phase", "The phase"),
      Column("Replicas", "integer", ".spec.replicas"),
      Column("Truncated", "integer", ".spec.fraction"),
      Column("Ratio", "number", ".spec.replicas"),
      Column("Suspended", "boolean", ".spec.suspend"),
      Column("Started", "date", ".status.startTime"),
      Column("BadDate", "date", ".status.phase"),
      Column("First", "string", ".spec.tasks[0].name"),
      Column("Last", "string", "{.spec.tasks[-1].name}"),
      Column("All", "string", ".spec.tasks[*].name"),
      Column("Dotted", "string", ".metadata.labels['app.kubernetes.io/name']"),
      Column("Missing", "string", ".status.nothing.here"),
      Column("OutOfRange", "string", ".spec.tasks[5].name"),
      Column("WrongType", "integer", ".status.phase"),
      Column("Unparseable", "string", "status["),
      Column("Structured", "string", ".spec.tasks[0]"),
      Column("Filtered", "string", R"(.status.conditions[?(@.type=="Ready")].reason)"),
      Column("FilteredNone", "string", ".status.conditions[?(@.type=='Gone')].reason"),
      Column("BadFilter", "string", ".status.conditions[?(@.type=Ready)].reason"),
  };
  const Json job = TableJson(R"({"metadata":{"name":"j","labels":{"app.kubernetes.io/name":"demo"}},
      "spec":{"replicas":4,"fraction":2.9,"suspend":false,
              "tasks":[{"name":"a"},{"name":"b"},{"name":"c"}]},
      "status":{"phase":"Running","conditions":[{"type":"Other","reason":"No"},
                {"type":"Ready","reason":"AllUp"}],"startTime":")" +
                             Ago(absl::Hours(2)) + R"("}})");
  const Json table = BuildTable("trainingjobs", columns, {job}, "1", kNow);
  const Json& cells = Cells(table, 0);
  EXPECT_EQ(cells, TableJson(R"(["j","Running",4,2,4.0,false,"120m","<invalid>","a","c","a,b,c",
                                 "demo",null,null,null,null,"{\"name\":\"a\"}","AllUp",null,
                                 null])"));
  EXPECT_TRUE(cells.at(2).is_integer());
  EXPECT_TRUE(cells.at(3).is_integer());
  EXPECT_TRUE(cells.at(4).is_double());
}

TEST(BuildTable, CustomColumns_DefinitionsAndNoImplicitAge) {
  PrinterColumn wide = Column("Node", "string", ".spec.node");
  wide.priority = 1;
  wide.format = "hostname";
  const Json table =
      BuildTable("trainingjobs", {Column("Phase", "string", ".status.phase", "The phase"), wide},
                 {}, "1", kNow);
  EXPECT_THAT(ColumnNames(table), ElementsAre("Name", "Phase", "Node"));
  EXPECT_EQ(table.at("columnDefinitions").at(1), TableJson(R"({"name":"Phase","type":"string",
      "format":"","description":"The phase","priority":0})"));
  EXPECT_EQ(table.at("columnDefinitions").at(2), TableJson(R"({"name":"Node","type":"string",
      "format":"hostname","priority":1,
      "description":"Custom resource definition column (in JSONPath format): .spec.node"})"));
}

TEST(BuildTable, CrdWithoutColumns_GetsNameAndAge) {
  const Json job = TableJson(R"({"metadata":{"name":"j","creationTimestamp":")" +
                             Ago(absl::Hours(50)) + R"("}})");
  const Json table = BuildTable("trainingjobs", {}, {job}, "1", kNow);
  EXPECT_THAT(ColumnNames(table), ElementsAre("Name", "Age"));
  EXPECT_EQ(Cells(table, 0), TableJson(R"(["j","2d2h"])"));
}

// ---- Garbage ----

TEST(BuildTable, GarbageObjects_DoNotCrash) {
  const std::vector<Json> objects = {
      TableJson("5"),
      TableJson(R"("pod")"),
      Json::null(),
      TableJson("[]"),
      TableJson("{}"),
      TableJson(R"({"metadata":3,"spec":[],"status":"x"})"),
      TableJson(R"({"metadata":{"name":7,"creationTimestamp":"yesterday","labels":[]},
          "spec":{"containers":"many","unschedulable":"yes"},
          "status":{"phase":1,"conditions":[1,{"type":2}],"nodeInfo":[],
                    "containerStatuses":[1,null,{"state":[],"restartCount":"x"},
                                         {"state":{"terminated":5,"waiting":{"reason":3}}}],
                    "initContainerStatuses":{}},
          "involvedObject":"x","count":"many","series":{},"firstTimestamp":5})"),
  };
  const std::vector<PrinterColumn> custom = {Column("X", "date", ".metadata.creationTimestamp"),
                                             Column("Y", "integer", ".."),
                                             Column("Z", "string", "")};
  for (const char* resource : {"pods", "nodes", "events", "namespaces", "things"}) {
    SCOPED_TRACE(resource);
    const Json table = BuildTable(resource, {}, objects, "1", kNow);
    ASSERT_EQ(table.at("rows").size(), 3u);  // Only JSON objects become rows.
    const size_t columns = table.at("columnDefinitions").size();
    for (const Json& row : table.at("rows").as_array()) {
      EXPECT_EQ(row.at("cells").size(), columns);
    }
  }
  const Json table = BuildTable("things", custom, objects, "1", kNow);
  ASSERT_EQ(table.at("rows").size(), 3u);
  EXPECT_EQ(Cells(table, 2), TableJson(R"(["","<invalid>",null,null])"));
}

}  // namespace
}  // namespace phalanx::localcluster
