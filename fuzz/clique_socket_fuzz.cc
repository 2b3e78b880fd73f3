// Fuzz target: the agent's clique-socket protocol (HandleCliqueRequest over one CliqueRegistry).
// The input is what a local client writes: request lines separated by '\n', answered in order
// against the same registry (so LIST sees what REPORT stored). Every answer is one of the
// protocol's: "OK...", "ERR ..." or LIST's lines ending in "END".
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "fuzz/fuzz_input.h"
#include "node_agent/cliques/clique_socket.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  phalanx::agent::CliqueRegistry registry;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    const std::string line(rest.substr(0, end));
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    const std::string answer = phalanx::agent::HandleCliqueRequest(registry, line, now);
    PHALANX_FUZZ_CHECK(answer.rfind("OK", 0) == 0 || answer.rfind("ERR", 0) == 0 ||
                       (answer.size() >= 3 && answer.compare(answer.size() - 3, 3, "END") == 0));
    registry.RequestAbortForDevice(0, "fuzz");
    now += absl::Seconds(1);
  }
  return 0;
}
