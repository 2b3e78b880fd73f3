// Fuzz target: YAML → JSON for manifests (YamlToJson), yaml-cpp included. The input is a YAML
// document. Errors are statuses; the JSON it returns must serialize and parse back.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <system_error>

#include "fuzz/fuzz_input.h"
#include "operator/api/yaml_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<phalanx::op::Json> json =
      phalanx::op::YamlToJson(std::string(reinterpret_cast<const char*>(data), size));
  if (!json.ok()) {
    PHALANX_FUZZ_CHECK(json.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  std::error_code error;
  phalanx::op::Json::parse(json->serialize(), error);
  PHALANX_FUZZ_CHECK(!error);
  return 0;
}
