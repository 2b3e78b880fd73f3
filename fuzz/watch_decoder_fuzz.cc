// Fuzz target: the watch-stream decoder (WatchDecoder). The input is the body of a watch
// response. It is fed twice, whole and in chunks of a size taken from the first byte; both must
// decode to the same events and errors, whatever the chunking (the decoder's promise), and every
// item is an error or an event of a known type.
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "common/kube/watch_decoder.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 32;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);

  phalanx::kube::WatchDecoder whole;
  const std::vector<phalanx::kube::WatchDecoder::Item> a = whole.Feed(body);

  phalanx::kube::WatchDecoder chunked;
  std::vector<phalanx::kube::WatchDecoder::Item> b;
  for (size_t at = 0; at < body.size(); at += chunk) {
    for (auto& item : chunked.Feed(body.substr(at, chunk))) b.push_back(std::move(item));
  }
  PHALANX_FUZZ_CHECK(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    PHALANX_FUZZ_CHECK(a[i].status.code() == b[i].status.code());
    PHALANX_FUZZ_CHECK(a[i].event.type == b[i].event.type);
    PHALANX_FUZZ_CHECK(a[i].event.resource_version == b[i].event.resource_version);
  }
  PHALANX_FUZZ_CHECK(whole.pending_bytes() == chunked.pending_bytes());
  // An item is an error or one of the four event types the informer applies; an ERROR event
  // never reads as an event.
  for (const auto& item : a) {
    const std::string& type = item.event.type;
    PHALANX_FUZZ_CHECK(!item.status.ok() || type == "ADDED" || type == "MODIFIED" ||
                       type == "DELETED" || type == "BOOKMARK");
  }
  phalanx::kube::WatchDecoder::DecodeLine(body);
  return 0;
}
