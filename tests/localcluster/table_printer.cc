#include "tests/localcluster/table_printer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/kube/object_meta.h"
#include "tests/localcluster/go_number.h"

namespace phalanx::localcluster {
namespace {

// Column descriptions: the first sentence of the field documentation the apiserver uses.
constexpr char kNameDescription[] = "Name must be unique within a namespace.";
constexpr char kAgeDescription[] =
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created.";

// ---- Reading JSON without throwing (cpprestsdk's at() and as_*() throw on a mismatch). ----

// A field of `object` (which may itself be absent), or nullptr.
const Json* Field(const Json* object, const char* key) {
  if (object == nullptr || !object->is_object() || !object->has_field(key)) return nullptr;
  return &object->at(key);
}

std::string StringField(const Json* object, const char* key) {
  const Json* v = Field(object, key);
  return v != nullptr && v->is_string() ? v->as_string() : "";
}

// A number as an int64, truncating a fraction as Go's int64(float64) does.
int64_t ToInt(const Json& v) {
  return v.is_integer() ? v.as_number().to_int64() : static_cast<int64_t>(v.as_double());
}

int64_t IntField(const Json* object, const char* key) {
  const Json* v = Field(object, key);
  return v != nullptr && v->is_number() ? ToInt(*v) : 0;
}

bool BoolField(const Json* object, const char* key) {
  const Json* v = Field(object, key);
  return v != nullptr && v->is_boolean() && v->as_bool();
}

// The elements of an array field; empty when absent or not an array.
std::vector<const Json*> ArrayField(const Json* object, const char* key) {
  std::vector<const Json*> elements;
  const Json* v = Field(object, key);
  if (v == nullptr || !v->is_array()) return elements;
  for (const Json& element : v->as_array()) elements.push_back(&element);
  return elements;
}

// ---- Cells. ----

// translateTimestampSince: the age of a timestamp field, "<unknown>" when there is none.
std::string AgeOf(const std::string& timestamp, absl::Time now) {
  const std::optional<absl::Time> t = kube::ParseKubeTime(timestamp);
  if (!t.has_value()) return "<unknown>";
  return HumanAge(now - *t);
}

std::string CreationAge(const Json& object, absl::Time now) {
  return AgeOf(StringField(Field(&object, "metadata"), "creationTimestamp"), now);
}

std::string OrNone(const std::string& s) { return s.empty() ? "<none>" : s; }

// ---- A simple JSONPath: .a.b, .a[0].b, .a[-1], .a[*].b, .a['dotted.key'], an equality filter
// .a[?(@.type=="Ready")].b, with optional surrounding {} and leading $ (the subset CRD printer
// columns use: a condition's status is the usual filter). ----

struct PathStep {
  enum Kind { kField, kIndex, kWildcard, kFilter } kind;
  std::string field;  // kField: the key; kFilter: the value the element's path must equal
  int64_t index = 0;
  std::vector<PathStep> filter_path;  // kFilter: the path under @
};

std::optional<std::vector<PathStep>> ParseJsonPath(absl::string_view path);

// `?(@.a.b=="v")` (or 'v'): the elements whose .a.b is the string v.
std::optional<PathStep> ParseFilter(absl::string_view inside) {
  if (!absl::ConsumePrefix(&inside, "?(") || !absl::ConsumeSuffix(&inside, ")") ||
      !absl::ConsumePrefix(&inside, "@")) {
    return std::nullopt;
  }
  const size_t equals = inside.find("==");
  if (equals == absl::string_view::npos) return std::nullopt;
  absl::string_view value = absl::StripAsciiWhitespace(inside.substr(equals + 2));
  if (value.size() < 2 || (value.front() != '"' && value.front() != '\'') ||
      value.back() != value.front()) {
    return std::nullopt;
  }
  std::optional<std::vector<PathStep>> under =
      ParseJsonPath(absl::StripAsciiWhitespace(inside.substr(0, equals)));
  if (!under.has_value()) return std::nullopt;
  return PathStep{PathStep::kFilter, std::string(value.substr(1, value.size() - 2)), 0,
                  *std::move(under)};
}

std::optional<std::vector<PathStep>> ParseJsonPath(absl::string_view path) {
  path = absl::StripAsciiWhitespace(path);
  if (absl::ConsumePrefix(&path, "{") && !absl::ConsumeSuffix(&path, "}")) return std::nullopt;
  absl::ConsumePrefix(&path, "$");
  std::vector<PathStep> steps;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') {
      ++i;
      std::string name;
      while (i < path.size() && path[i] != '.' && path[i] != '[') {
        if (path[i] == '\\' && i + 1 < path.size()) ++i;  // "\." is a dot inside a key
        name += path[i++];
      }
      if (name.empty()) return std::nullopt;
      steps.push_back(name == "*" ? PathStep{PathStep::kWildcard, "", 0, {}}
                                  : PathStep{PathStep::kField, name, 0, {}});
    } else if (path[i] == '[') {
      const size_t close = path.find(']', i);
      if (close == absl::string_view::npos) return std::nullopt;
      absl::string_view inside = path.substr(i + 1, close - i - 1);
      i = close + 1;
      int64_t index = 0;
      if (inside == "*") {
        steps.push_back(PathStep{PathStep::kWildcard, "", 0, {}});
      } else if (absl::StartsWith(inside, "?(")) {
        std::optional<PathStep> filter = ParseFilter(inside);
        if (!filter.has_value()) return std::nullopt;
        steps.push_back(*std::move(filter));
      } else if (inside.size() >= 2 && (inside.front() == '\'' || inside.front() == '"') &&
                 inside.back() == inside.front()) {
        steps.push_back(
            PathStep{PathStep::kField, std::string(inside.substr(1, inside.size() - 2)), 0, {}});
      } else if (absl::SimpleAtoi(inside, &index)) {
        steps.push_back(PathStep{PathStep::kIndex, "", index, {}});
      } else {
        return std::nullopt;
      }
    } else {
      return std::nullopt;
    }
  }
  if (steps.empty()) return std::nullopt;  // The object itself is no column.
  return steps;
}

std::string ValueText(const Json& v);

// Every value the path reaches; nulls count as absent.
std::vector<const Json*> EvaluateJsonPath(const std::vector<PathStep>& steps, const Json& root) {
  std::vector<const Json*> current = {&root};
  for (const PathStep& step : steps) {
    std::vector<const Json*> next;
    for (const Json* node : current) {
      switch (step.kind) {
        case PathStep::kField:
          if (const Json* child = Field(node, step.field.c_str())) next.push_back(child);
          break;
        case PathStep::kIndex:
          if (node->is_array()) {
            const int64_t size = static_cast<int64_t>(node->size());
            const int64_t index = step.index < 0 ? size + step.index : step.index;
            if (index >= 0 && index < size) next.push_back(&node->at(index));
          }
          break;
        case PathStep::kWildcard:
          if (node->is_array()) {
            for (const Json& element : node->as_array()) next.push_back(&element);
          } else if (node->is_object()) {
            for (const auto& [key, value] : node->as_object()) next.push_back(&value);
          }
          break;
        case PathStep::kFilter:
          if (!node->is_array()) break;
          for (const Json& element : node->as_array()) {
            for (const Json* value : EvaluateJsonPath(step.filter_path, element)) {
              if (ValueText(*value) == step.field) {
                next.push_back(&element);
                break;
              }
            }
          }
          break;
      }
    }
    current = std::move(next);
  }
  std::erase_if(current, [](const Json* v) { return v->is_null(); });
  return current;
}

// How jsonpath prints a value: strings bare, numbers as Go prints them, the rest as JSON.
std::string ValueText(const Json& v) {
  if (v.is_string()) return v.as_string();
  if (v.is_number()) {
    return v.is_integer() ? absl::StrCat(v.as_number().to_int64()) : GoFloatString(v.as_double());
  }
  if (v.is_boolean()) return v.as_bool() ? "true" : "false";
  return v.serialize();
}

// The apiextensions tableconvertor's cell for one custom column (cellForJSONValue).
Json CustomCell(const PrinterColumn& column, const std::optional<std::vector<PathStep>>& steps,
                const Json& object, absl::Time now) {
  if (!steps.has_value()) return Json::null();  // A path this parser cannot read prints empty.
  const std::vector<const Json*> results = EvaluateJsonPath(*steps, object);
  if (results.empty()) return Json::null();
  const Json& first = *results.front();
  if (column.type == "integer") {
    return first.is_number() ? Json::number(ToInt(first)) : Json::null();
  }
  if (column.type == "number") {
    return first.is_number() ? Json::number(first.as_double()) : Json::null();
  }
  if (column.type == "boolean") {
    return first.is_boolean() ? Json::boolean(first.as_bool()) : Json::null();
  }
  if (column.type == "date") {
    if (!first.is_string()) return Json::null();
    const std::optional<absl::Time> t = kube::ParseKubeTime(first.as_string());
    return Json::string(t.has_value() ? HumanAge(now - *t) : "<invalid>");
  }
  std::vector<std::string> texts;
  for (const Json* v : results) texts.push_back(ValueText(*v));
  return Json::string(absl::StrJoin(texts, ","));
}

// ---- Built-in printers (kubernetes/pkg/printers/internalversion/printers.go). ----

// printPod's Ready, Status and Restarts.
struct PodSummary {
  int ready = 0;
  int total = 0;
  std::string reason;
  int64_t restarts = 0;
};

bool HasPodReadyCondition(const Json* status) {
  for (const Json* condition : ArrayField(status, "conditions")) {
    if (StringField(condition, "type") == "Ready" && StringField(condition, "status") == "True") {
      return true;
    }
  }
  return false;
}

// "ExitCode:1" / "Signal:9" for a container that ended without a reason.
std::string ExitText(const Json* terminated) {
  const int64_t signal = IntField(terminated, "signal");
  return signal != 0 ? absl::StrCat("Signal:", signal)
                     : absl::StrCat("ExitCode:", IntField(terminated, "exitCode"));
}

PodSummary SummarizePod(const Json& pod) {
  const Json* spec = Field(&pod, "spec");
  const Json* status = Field(&pod, "status");
  PodSummary s;
  s.total = static_cast<int>(ArrayField(spec, "containers").size());
  s.reason = StringField(status, "phase");
  if (const std::string reason = StringField(status, "reason"); !reason.empty()) s.reason = reason;

  bool initializing = false;
  const std::vector<const Json*> init_statuses = ArrayField(status, "initContainerStatuses");
  const size_t init_total = ArrayField(spec, "initContainers").size();
  for (size_t i = 0; i < init_statuses.size(); ++i) {
    const Json* state = Field(init_statuses[i], "state");
    const Json* terminated = Field(state, "terminated");
    const Json* waiting = Field(state, "waiting");
    s.restarts += IntField(init_statuses[i], "restartCount");
    if (terminated != nullptr && IntField(terminated, "exitCode") == 0) continue;
    initializing = true;
    if (terminated != nullptr) {
      const std::string reason = StringField(terminated, "reason");
      s.reason = reason.empty() ? absl::StrCat("Init:", ExitText(terminated)) : "Init:" + reason;
    } else if (const std::string reason = StringField(waiting, "reason");
               !reason.empty() && reason != "PodInitializing") {
      s.reason = "Init:" + reason;
    } else {
      s.reason = absl::StrCat("Init:", i, "/", init_total);
    }
    break;
  }

  if (!initializing) {
    s.restarts = 0;
    bool has_running = false;
    const std::vector<const Json*> statuses = ArrayField(status, "containerStatuses");
    for (auto it = statuses.rbegin(); it != statuses.rend(); ++it) {
      const Json* state = Field(*it, "state");
      const Json* terminated = Field(state, "terminated");
      const Json* waiting = Field(state, "waiting");
      s.restarts += IntField(*it, "restartCount");
      if (!StringField(waiting, "reason").empty()) {
        s.reason = StringField(waiting, "reason");
      } else if (!StringField(terminated, "reason").empty()) {
        s.reason = StringField(terminated, "reason");
      } else if (terminated != nullptr) {
        s.reason = ExitText(terminated);
      } else if (BoolField(*it, "ready") && Field(state, "running") != nullptr) {
        has_running = true;
        ++s.ready;
      }
    }
    // A pod whose finished container is listed last still counts as running.
    if (s.reason == "Completed" && has_running) {
      s.reason = HasPodReadyCondition(status) ? "Running" : "NotReady";
    }
  }

  if (!StringField(Field(&pod, "metadata"), "deletionTimestamp").empty()) {
    s.reason = StringField(status, "reason") == "NodeLost" ? "Unknown" : "Terminating";
  }
  return s;
}

std::string NodeStatus(const Json& node) {
  std::vector<std::string> parts;
  for (const Json* condition : ArrayField(Field(&node, "status"), "conditions")) {
    if (StringField(condition, "type") != "Ready") continue;
    parts = {StringField(condition, "status") == "True" ? "Ready" : "NotReady"};
  }
  if (parts.empty()) parts.push_back("Unknown");
  if (BoolField(Field(&node, "spec"), "unschedulable")) parts.push_back("SchedulingDisabled");
  return absl::StrJoin(parts, ",");
}

// findNodeRoles: "node-role.kubernetes.io/<role>" label keys and the "kubernetes.io/role" value.
std::string NodeRoles(const Json& node) {
  constexpr absl::string_view kRolePrefix = "node-role.kubernetes.io/";
  std::set<std::string> roles;
  for (const auto& [key, value] : kube::LabelsOf(node)) {
    if (absl::StartsWith(key, kRolePrefix) && key.size() > kRolePrefix.size()) {
      roles.insert(key.substr(kRolePrefix.size()));
    } else if (key == "kubernetes.io/role" && !value.empty()) {
      roles.insert(value);
    }
  }
  return roles.empty() ? "<none>" : absl::StrJoin(roles, ",");
}

// printEvent's Last Seen: "5m", or "5m (x3 over 10m)" for a repeated event.
std::string EventLastSeen(const Json& event, absl::Time now) {
  std::string first = AgeOf(StringField(&event, "firstTimestamp"), now);
  if (StringField(&event, "firstTimestamp").empty()) {
    first = AgeOf(StringField(&event, "eventTime"), now);
  }
  std::string last = StringField(&event, "lastTimestamp").empty()
                         ? first
                         : AgeOf(StringField(&event, "lastTimestamp"), now);
  if (const Json* series = Field(&event, "series"); series != nullptr && series->is_object()) {
    return AgeOf(StringField(series, "lastObservedTime"), now);
  }
  if (const int64_t count = IntField(&event, "count"); count > 1) {
    return absl::StrCat(last, " (x", count, " over ", first, ")");
  }
  return last;
}

std::string EventObject(const Json& event) {
  const Json* involved = Field(&event, "involvedObject");
  const std::string kind = absl::AsciiStrToLower(StringField(involved, "kind"));
  const std::string name = StringField(involved, "name");
  return name.empty() ? kind : absl::StrCat(kind, "/", name);
}

// ---- The Table. ----

Json ColumnDefinition(const std::string& name, const std::string& type,
                      const std::string& description, int priority = 0,
                      const std::string& format = "") {
  Json column = Json::object();
  column["name"] = Json::string(name);
  column["type"] = Json::string(type);
  column["format"] = Json::string(format);
  column["description"] = Json::string(description);
  column["priority"] = Json::number(priority);
  return column;
}

Json NameColumn() { return ColumnDefinition("Name", "string", kNameDescription, 0, "name"); }
Json AgeColumn() { return ColumnDefinition("Age", "string", kAgeDescription); }

std::string NameOf(const Json& object) { return StringField(Field(&object, "metadata"), "name"); }

struct Layout {
  std::vector<Json> columns;
  std::function<std::vector<Json>(const Json& object)> cells;
};

Layout CustomLayout(const std::vector<PrinterColumn>& custom_columns, absl::Time now) {
  Layout layout;
  layout.columns.push_back(NameColumn());
  for (const PrinterColumn& c : custom_columns) {
    const std::string description =
        c.description.empty()
            ? absl::StrCat("Custom resource definition column (in JSONPath format): ", c.json_path)
            : c.description;
    layout.columns.push_back(ColumnDefinition(c.name, c.type, description, c.priority, c.format));
  }
  std::vector<std::optional<std::vector<PathStep>>> paths;
  for (const PrinterColumn& c : custom_columns) paths.push_back(ParseJsonPath(c.json_path));
  layout.cells = [custom_columns, paths = std::move(paths), now](const Json& object) {
    std::vector<Json> cells = {Json::string(NameOf(object))};
    for (size_t i = 0; i < custom_columns.size(); ++i) {
      cells.push_back(CustomCell(custom_columns[i], paths[i], object, now));
    }
    return cells;
  };
  return layout;
}

Layout BuiltInLayout(const std::string& resource, absl::Time now) {
  Layout layout;
  if (resource == "pods") {
    layout.columns = {
        NameColumn(),
        ColumnDefinition("Ready", "string",
                         "The aggregate readiness state of this pod for accepting traffic."),
        ColumnDefinition("Status", "string", "The aggregate status of the containers in this pod."),
        ColumnDefinition("Restarts", "integer",
                         "The number of times the containers in this pod have been restarted."),
        AgeColumn(),
        ColumnDefinition("IP", "string", "IP address allocated to the pod.", 1),
        ColumnDefinition("Node", "string", "The node the pod is scheduled onto.", 1),
    };
    layout.cells = [now](const Json& pod) {
      const PodSummary s = SummarizePod(pod);
      return std::vector<Json>{Json::string(NameOf(pod)),
                               Json::string(absl::StrCat(s.ready, "/", s.total)),
                               Json::string(s.reason),
                               Json::number(s.restarts),
                               Json::string(CreationAge(pod, now)),
                               Json::string(OrNone(StringField(Field(&pod, "status"), "podIP"))),
                               Json::string(OrNone(StringField(Field(&pod, "spec"), "nodeName")))};
    };
  } else if (resource == "nodes") {
    layout.columns = {
        NameColumn(),
        ColumnDefinition("Status", "string", "The status of the node"),
        ColumnDefinition("Roles", "string", "The roles of the node"),
        AgeColumn(),
        ColumnDefinition("Version", "string", "Kubelet Version reported by the node."),
    };
    layout.cells = [now](const Json& node) {
      return std::vector<Json>{
          Json::string(NameOf(node)), Json::string(NodeStatus(node)), Json::string(NodeRoles(node)),
          Json::string(CreationAge(node, now)),
          Json::string(StringField(Field(Field(&node, "status"), "nodeInfo"), "kubeletVersion"))};
    };
  } else if (resource == "events") {
    layout.columns = {
        ColumnDefinition("Last Seen", "string", "When the event was last recorded."),
        ColumnDefinition("Type", "string", "Type of this event (Normal, Warning)."),
        ColumnDefinition("Reason", "string", "Why the object's status changed, in short."),
        ColumnDefinition("Object", "string", "The object that this event is about."),
        ColumnDefinition("Message", "string", "A human-readable description of the event."),
    };
    layout.cells = [now](const Json& event) {
      return std::vector<Json>{
          Json::string(EventLastSeen(event, now)), Json::string(StringField(&event, "type")),
          Json::string(StringField(&event, "reason")), Json::string(EventObject(event)),
          Json::string(std::string(absl::StripAsciiWhitespace(StringField(&event, "message"))))};
    };
  } else if (resource == "namespaces") {
    layout.columns = {
        NameColumn(),
        ColumnDefinition("Status", "string", "The status of the namespace"),
        AgeColumn(),
    };
    layout.cells = [now](const Json& ns) {
      return std::vector<Json>{Json::string(NameOf(ns)),
                               Json::string(StringField(Field(&ns, "status"), "phase")),
                               Json::string(CreationAge(ns, now))};
    };
  } else {
    layout.columns = {NameColumn(), AgeColumn()};
    layout.cells = [now](const Json& object) {
      return std::vector<Json>{Json::string(NameOf(object)),
                               Json::string(CreationAge(object, now))};
    };
  }
  return layout;
}

Json ToArray(std::vector<Json> values) {
  Json array = Json::array(values.size());
  for (size_t i = 0; i < values.size(); ++i) array[i] = std::move(values[i]);
  return array;
}

}  // namespace

std::vector<PrinterColumn> PrinterColumnsFromCrdVersion(const Json& crd_version) {
  std::vector<PrinterColumn> columns;
  for (const Json* entry : ArrayField(&crd_version, "additionalPrinterColumns")) {
    PrinterColumn column;
    column.name = StringField(entry, "name");
    column.type = StringField(entry, "type");
    column.json_path = StringField(entry, "jsonPath");
    column.description = StringField(entry, "description");
    column.priority = static_cast<int>(IntField(entry, "priority"));
    column.format = StringField(entry, "format");
    if (column.name.empty() || column.json_path.empty()) continue;
    columns.push_back(std::move(column));
  }
  return columns;
}

Json BuildTable(const std::string& resource, const std::vector<PrinterColumn>& custom_columns,
                const std::vector<Json>& objects, const std::string& resource_version,
                absl::Time now) {
  const Layout layout =
      custom_columns.empty() ? BuiltInLayout(resource, now) : CustomLayout(custom_columns, now);
  std::vector<Json> rows;
  for (const Json& object : objects) {
    if (!object.is_object()) continue;  // Not a Kubernetes object: nothing to print.
    Json row = Json::object();
    row["cells"] = ToArray(layout.cells(object));
    row["object"] = object;
    rows.push_back(std::move(row));
  }
  Json metadata = Json::object();
  metadata["resourceVersion"] = Json::string(resource_version);
  Json table = Json::object();
  table["kind"] = Json::string("Table");
  table["apiVersion"] = Json::string("meta.k8s.io/v1");
  table["metadata"] = std::move(metadata);
  table["columnDefinitions"] = ToArray(layout.columns);
  table["rows"] = ToArray(std::move(rows));
  return table;
}

std::string HumanAge(absl::Duration age) {
  // Up to a second in the future reads as now, tolerating clock skew between machines.
  const int64_t seconds = absl::ToInt64Seconds(age);
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 2 * 60) return absl::StrCat(seconds, "s");
  const int64_t minutes = absl::ToInt64Minutes(age);
  if (minutes < 10) {
    const int64_t s = seconds % 60;
    return s == 0 ? absl::StrCat(minutes, "m") : absl::StrCat(minutes, "m", s, "s");
  }
  if (minutes < 3 * 60) return absl::StrCat(minutes, "m");
  const int64_t hours = absl::ToInt64Hours(age);
  if (hours < 8) {
    const int64_t m = minutes % 60;
    return m == 0 ? absl::StrCat(hours, "h") : absl::StrCat(hours, "h", m, "m");
  }
  if (hours < 48) return absl::StrCat(hours, "h");
  if (hours < 24 * 8) {
    const int64_t h = hours % 24;
    return h == 0 ? absl::StrCat(hours / 24, "d") : absl::StrCat(hours / 24, "d", h, "h");
  }
  if (hours < 24 * 365 * 2) return absl::StrCat(hours / 24, "d");
  if (hours < 24 * 365 * 8) {
    const int64_t days = (hours / 24) % 365;
    return days == 0 ? absl::StrCat(hours / 24 / 365, "y")
                     : absl::StrCat(hours / 24 / 365, "y", days, "d");
  }
  return absl::StrCat(hours / 24 / 365, "y");
}

}  // namespace phalanx::localcluster
