// WatchDecoder: turns the byte stream of a Kubernetes watch response (one JSON event per line:
// {"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}}) into events, whatever the
// chunking. An in-stream ERROR event becomes a status (410 Expired → OutOfRange: relist);
// a malformed line becomes InvalidArgument without stopping the decoder. Not thread-safe
// (one per watch stream).
#pragma once

#include <cpprest/json.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace phalanx::kube {

struct WatchEventData {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK
  web::json::value object;
  std::string resource_version;  // object.metadata.resourceVersion ("" if absent)
};

class WatchDecoder {
 public:
  // One decoded line: an event, or the error it stands for.
  struct Item {
    absl::Status status;  // OK for an event
    WatchEventData event;
  };

  // Feeds a chunk; returns what the complete lines in it (and before it) decode to.
  std::vector<Item> Feed(std::string_view chunk);
  // Bytes of an unfinished line held back (a stream that ends with some is truncated).
  size_t pending_bytes() const { return partial_.size(); }

  // Decodes one line (exposed for tests).
  static Item DecodeLine(std::string_view line);

 private:
  static constexpr size_t kMaxLineBytes = 64 << 20;  // a single object larger than this is an error
  std::string partial_;
};

}  // namespace phalanx::kube
