// Fuzz target: the API-response → absl::Status table (StatusFromResponse). The first two bytes
// are the HTTP status (0..65535, so out-of-range codes are covered too), the rest the body (a
// Kubernetes Status object or anything else). A response never maps to OK unless it is 2xx.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "common/kube/api_status.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int code = data[0] << 8 | data[1];
  const std::string_view body(reinterpret_cast<const char*>(data + 2), size - 2);
  const absl::Status status = phalanx::kube::StatusFromResponse(code, body, "GET /fuzz");
  if (code < 200 || code > 299) PHALANX_FUZZ_CHECK(!status.ok());
  phalanx::kube::IsRetryable(status);
  return 0;
}
