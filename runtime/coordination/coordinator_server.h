// CoordinatorServer: the coordinator's one port, serving a CoordinationService on both
// transports: the Coordination gRPC service (callback API) and the session wire (wire_server.h,
// ADR 0005). Checks the job token on every call, records per-method metrics, and
// bounds message sizes. Connections arrive through a ConnectionListener (its own accept loop:
// a connection limit, unauthenticated connections closed, no wedge when descriptors run out);
// the standard grpc.health.v1 Health service answers on the same port without a token, and so
// does the session wire (wire_server.h), told apart by a connection's first byte.
// Thread-safe; Shutdown() (or the destructor) stops it.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "runtime/coordination/metrics.h"
#include "runtime/coordination/rpc_handler.h"
#include "runtime/coordination/service.h"

namespace grpc {
class Server;
}

namespace phalanx::coord {

class ConnectionListener;
class WireSessionServer;

class CoordinatorServer {
 public:
  struct Options {
    std::string listen_address = "127.0.0.1:0";  // port 0: any free port (see port())
    std::string token{};                         // required on every call
    // PEM certificate chain and private key: when both are set the service speaks TLS only
    // (clients verify it with PHALANX_TLS_CA_FILE); when both are empty, cleartext.
    std::string tls_cert_pem{};
    std::string tls_key_pem{};
    // Large enough for a 1 MiB value plus framing, so an oversized value gets a clear
    // InvalidArgument from the store rather than a transport error.
    int max_receive_message_bytes = 4 << 20;
    // What gRPC may hold in memory for all connections together (its ResourceQuota): it stops
    // reading from peers at this, so large messages sent without a valid token (which gRPC
    // reads before the service can refuse them) cannot grow the coordinator past it.
    size_t grpc_memory_bytes = 64 << 20;
    int max_connections = 1000;  // one more is accepted and closed at once
    // A connection with no call carrying a valid credential by then is closed.
    absl::Duration unauthenticated_timeout = absl::Seconds(5);
    // Also serve sessions over the session wire on the same port (wire_server.h, ADR 0005);
    // with TLS the wire is encrypted with the same certificate (tls_session.h, ADR 0006).
    bool session_wire = true;
  };

  // Unavailable when the address cannot be bound; InvalidArgument for an empty token, only one
  // of the TLS certificate and key, or PEM that does not parse.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(Options options,
                                                                  CoordinationService& service,
                                                                  CoordinatorMetrics& metrics,
                                                                  base::Clock& clock);
  ~CoordinatorServer();

  int port() const { return port_; }
  // Stops accepting calls; in-flight calls get until `grace` to finish. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(1));
  // Closes connections unauthenticated past the timeout; driven by a PeriodicRunner.
  void Tick(absl::Time now);
  int open_connections();
  // Blocks until Shutdown() was called from another thread.
  void Wait();

 private:
  class Impl;
  CoordinatorServer() = default;

  std::unique_ptr<ConnectionListener> listener_;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<RpcHandler> wire_handler_;
  std::unique_ptr<WireSessionServer> wire_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace phalanx::coord
