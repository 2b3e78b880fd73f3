// Fuzz target: the AWS IMDSv2 source (AwsSpotSource::Poll) against a loopback server whose raw
// answers are the input: pieces (separated by a line "@@") answer, in order, PUT
// /latest/api/token, GET .../spot/instance-action and GET .../events/maintenance/scheduled.
// Covers HttpFetch's response parsing, the token check, the instance-action JSON and the
// scheduled-events array with its NotBefore times.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "fuzz/fuzz_input.h"
#include "fuzz/raw_http_server.h"
#include "node_agent/preemption/aws_spot_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* server = new phalanx::fuzz::RawHttpServer();
  server->Script(phalanx::fuzz::Pieces(data, size, 3));
  phalanx::agent::AwsSpotOptions options;
  options.base_url = server->base_url();
  auto source = phalanx::agent::AwsSpotSource::Create(options);
  PHALANX_FUZZ_CHECK(source.ok());
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  auto notice = (*source)->Poll(now);
  if (notice.ok() && notice->has_value()) PHALANX_FUZZ_CHECK(!(*notice)->kind.empty());
  server->Script({});
  return 0;
}
