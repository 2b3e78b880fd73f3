// StatusHttpServer: the small HTTP endpoint every Phalanx binary exposes for operations:
// `GET /metrics` (Prometheus text format of the given registry), `GET /healthz` (liveness: 200
// "ok", or 503 with the reason when the health check fails) and `GET /readyz` (readiness: the
// same with the ready check, or the health check when there is none).
// Backed by civetweb (a Debian package prometheus-cpp already depends on). Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prometheus/registry.h"

class CivetServer;

namespace phalanx::http {

class StatusHttpServer {
 public:
  using HealthCheck = std::function<absl::Status()>;

  // `listen_address` is "host:port"; port 0 picks a free port (see port()).
  // InvalidArgument for a malformed address, Unavailable when it cannot bind.
  static absl::StatusOr<std::unique_ptr<StatusHttpServer>> Start(const std::string& listen_address,
                                                                 prometheus::Registry& registry,
                                                                 HealthCheck health,
                                                                 HealthCheck ready = nullptr);
  ~StatusHttpServer();

  int port() const { return port_; }

 private:
  class MetricsHandler;
  class HealthHandler;

  StatusHttpServer() = default;

  std::unique_ptr<MetricsHandler> metrics_handler_;
  std::unique_ptr<HealthHandler> health_handler_;
  std::unique_ptr<HealthHandler> ready_handler_;
  std::unique_ptr<CivetServer> server_;
  int port_ = 0;
};

}  // namespace phalanx::http
