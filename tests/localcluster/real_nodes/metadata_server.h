// NodeMetadataServer: a real node's cloud metadata server, the GCE flavour the node agent's
// `gce` notice source reads (node_agent/preemption/gce_metadata_source.h). One per real node,
// on the node's own address (what the node's pods reach as status.hostIP), port 80 like
// metadata.google.internal:
//   GET /computeMetadata/v1/instance/preempted          "FALSE", "TRUE" once preempted
//   GET /computeMetadata/v1/instance/maintenance-event  "NONE"
// Requests without "Metadata-Flavor: Google" get 403, as on GCE. `preempt-node` sets preempted
// before it taints the node, the order a cloud announces it. Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

class CivetServer;

namespace phalanx::localcluster {

class NodeMetadataServer {
 public:
  static constexpr int kPort = 80;

  // Unavailable when `address`:`port` cannot be bound (e.g. something else holds port 80 on
  // every address). Port 0: a free one (tests).
  static absl::StatusOr<std::unique_ptr<NodeMetadataServer>> Start(const std::string& address,
                                                                   int port = kPort);
  ~NodeMetadataServer();

  // "http://<address>:<port>" (the agent's --gce_metadata_url).
  const std::string& url() const { return url_; }
  void SetPreempted(bool preempted) { preempted_ = preempted; }

 private:
  class Handler;
  NodeMetadataServer() = default;

  std::atomic<bool> preempted_{false};
  std::string url_;
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<CivetServer> server_;
};

}  // namespace phalanx::localcluster
