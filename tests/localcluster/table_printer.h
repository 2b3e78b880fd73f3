// Server-side printing for `kubectl get`: kubectl asks with
// `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` and prints whatever meta.k8s.io/v1 Table
// the server returns, so the local cluster builds the same columns a real apiserver would:
//   - custom resources: Name plus the CRD version's additionalPrinterColumns, evaluated with a
//     simple JSONPath; a CRD that declares no columns gets Name + Age;
//   - pods, nodes, events and namespaces: the columns of kube-apiserver's built-in printers
//     (the subset kubectl shows by default, plus pods' IP and Node for `-o wide`);
//   - any other resource: Name + Age.
// Every row carries the full object (a real apiserver sends PartialObjectMetadata unless asked;
// kubectl reads only metadata from it, so the full object is compatible and simpler).
// Used by the local cluster's HTTP layer. Pure functions (time comes in as `now`); thread-safe.
// Never throws: items that are not JSON objects are skipped, missing fields print as kubectl
// prints them.
#pragma once

#include <cpprest/json.h>

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/kube/json.h"

namespace phalanx::localcluster {

using kube::Json;

// A CRD's additionalPrinterColumns entry.
struct PrinterColumn {
  std::string name;
  std::string type;       // string | integer | number | boolean | date
  std::string json_path;  // ".status.phase", ".spec.tasks[0].name", ".status.nodes[*].name"
  std::string description;
  int priority = 0;  // 0: shown by default; higher: only with `kubectl get -o wide`
  std::string format;
};

// Reads "additionalPrinterColumns" (fields name, type, jsonPath, description, priority, format)
// of one entry of a CRD's spec.versions. Entries without a name or jsonPath are skipped;
// anything that is not the expected shape reads as absent.
std::vector<PrinterColumn> PrinterColumnsFromCrdVersion(const Json& crd_version);

// Builds the meta.k8s.io/v1 Table for `objects` of `resource` (a plural such as "pods",
// "nodes", "trainingjobs"). Non-empty `custom_columns` selects the custom-resource layout.
// Cells of custom columns follow the apiserver: a missing value is null; "integer"/"number"/
// "boolean" columns hold JSON numbers/booleans (null when the value has another type); "date"
// columns hold the age since the timestamp ("<invalid>" when it does not parse); "string"
// columns hold the value's text, every match of a [*] path joined by ",".
Json BuildTable(const std::string& resource, const std::vector<PrinterColumn>& custom_columns,
                const std::vector<Json>& objects, const std::string& resource_version,
                absl::Time now);

// An age as kubectl prints it (apimachinery's duration.HumanDuration): "<invalid>" below -1s,
// "0s" for -1s (clock skew), then "119s", "3m4s", "3m", "2h5m", "20h", "4d3h", "30d", "2y45d",
// "9y".
std::string HumanAge(absl::Duration age);

}  // namespace phalanx::localcluster
