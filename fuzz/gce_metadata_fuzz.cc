// Fuzz target: the GCE metadata source (GceMetadataSource::Poll) against a loopback server whose
// raw answers are the input: pieces (separated by a line "@@") answer, in order, GET
// .../instance/preempted and GET .../instance/maintenance-event. Covers HttpFetch's response
// parsing and the source's reading of the values. Poll returns a notice, nothing or an error,
// never a notice without a reason.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "fuzz/fuzz_input.h"
#include "fuzz/raw_http_server.h"
#include "node_agent/preemption/gce_metadata_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* server = new phalanx::fuzz::RawHttpServer();
  server->Script(phalanx::fuzz::Pieces(data, size, 2));
  phalanx::agent::GceMetadataOptions options;
  options.base_url = server->base_url();
  auto source = phalanx::agent::GceMetadataSource::Create(options);
  PHALANX_FUZZ_CHECK(source.ok());
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  auto notice = (*source)->Poll(now);
  if (notice.ok() && notice->has_value()) PHALANX_FUZZ_CHECK(!(*notice)->kind.empty());
  server->Script({});
  return 0;
}
