// The differential API table's vocabulary: a Case is a named list of HTTP Steps against one
// Kubernetes API server, each with the outcome a real kube-apiserver gives (status code, Status
// reason, the fields an error names, key fields of the answer, Warning headers). The same table
// runs against phalanx-localcluster's built-in API server and against a real control plane
// (differential_api_test.cc); an outcome that differs is a failure.
//
// Where the built-in server cannot follow the real one (it has no CEL, no PodSecurity, no field
// ownership), the case says so (`builtin_gap`) and the step gives what the built-in server answers
// instead (`builtin`): always a loud answer, i.e. a Warning header that says the feature is not
// enforced, never a silent acceptance.
//
// Plain data; no behaviour. Strings may use {ns} (the case's own namespace) and {var} for values
// saved by earlier steps.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace phalanx::localcluster::differential {

// What a response must look like. Unset members are not checked (each has an initializer, so a
// designated initializer in the table names only the ones it checks).
struct Expect {
  int code = 0;                             // HTTP status
  std::string reason{};                     // Status.reason of an error
  std::vector<std::string> cause_fields{};  // each must be some details.causes[].field
  std::string message_has{};                // substring of Status.message
  // (path, JSON text) pairs: the answer's value at path ("spec.size", "items[0].kind") must
  // equal the JSON text; "<absent>" / "<present>" test only presence.
  std::vector<std::pair<std::string, std::string>> fields{};
  std::vector<std::string> warnings_have{};  // each must be a substring of some Warning
  bool no_warnings = false;
  // For a WATCH step: events that must appear in this order, as "TYPE" or "TYPE:name" or
  // "ERROR:<code>:<reason>"; events_absent: "TYPE:name" that must not appear.
  std::vector<std::string> events{};
  std::vector<std::string> events_absent{};
};

struct Step {
  std::string method;  // GET POST PUT PATCH DELETE, or WATCH (a GET read to the server's timeout)
  std::string path;    // with query
  std::string body;
  std::string content_type = "application/json";
  Expect expect;
  // Set only in a case with a builtin_gap: what the built-in server answers instead.
  std::optional<Expect> builtin;
  std::vector<std::pair<std::string, std::string>> save;  // (var, path in the answer)
  // Controllers act later (garbage collection, CRD establishment): retry the step until it
  // matches, for at most this many seconds. 0: once.
  int eventually_s = 0;
};

struct Case {
  std::string name;         // gtest-safe: letters, digits, underscores
  std::string builtin_gap;  // empty: the built-in server must match; else why it cannot
  std::vector<Step> steps;
};

// The whole table (api_cases.cc).
std::vector<Case> AllCases();

// Cluster-scoped fixtures every back end gets before the cases run: the test CRDs.
struct Fixture {
  std::string collection_path;  // POST here
  std::string body;
  std::string ready_path;  // GET answers 200 once it is usable
};
std::vector<Fixture> Fixtures();

}  // namespace phalanx::localcluster::differential
