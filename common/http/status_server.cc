#include "common/http/status_server.h"

#include <CivetServer.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace phalanx::http {
namespace {

void Reply(mg_connection* conn, int code, const char* reason, const std::string& content_type,
           const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n",
            code, reason, content_type.c_str(), body.size());
  mg_write(conn, body.data(), body.size());
}

}  // namespace

class StatusHttpServer::MetricsHandler : public CivetHandler {
 public:
  explicit MetricsHandler(prometheus::Registry& registry) : registry_(registry) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    prometheus::TextSerializer serializer;
    Reply(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8",
          serializer.Serialize(registry_.Collect()));
    return true;
  }

 private:
  prometheus::Registry& registry_;
};

class StatusHttpServer::HealthHandler : public CivetHandler {
 public:
  explicit HealthHandler(HealthCheck health) : health_(std::move(health)) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    absl::Status status = health_ ? health_() : absl::OkStatus();
    if (status.ok()) {
      Reply(conn, 200, "OK", "text/plain", "ok\n");
    } else {
      Reply(conn, 503, "Service Unavailable", "text/plain", status.ToString() + "\n");
    }
    return true;
  }

 private:
  HealthCheck health_;
};

absl::StatusOr<std::unique_ptr<StatusHttpServer>> StatusHttpServer::Start(
    const std::string& listen_address, prometheus::Registry& registry, HealthCheck health,
    HealthCheck ready) {
  const size_t colon = listen_address.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen_address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", listen_address, "' must be host:port"));
  }
  std::unique_ptr<StatusHttpServer> server(new StatusHttpServer());
  server->metrics_handler_ = std::make_unique<MetricsHandler>(registry);
  server->ready_handler_ = std::make_unique<HealthHandler>(ready ? std::move(ready) : health);
  server->health_handler_ = std::make_unique<HealthHandler>(std::move(health));
  const std::vector<std::string> options = {
      "listening_ports",    listen_address, "num_threads",       "2",
      "request_timeout_ms", "5000",         "enable_keep_alive", "no"};
  try {
    server->server_ = std::make_unique<CivetServer>(options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", listen_address, ": ", e.what()));
  }
  server->server_->addHandler("/metrics", server->metrics_handler_.get());
  server->server_->addHandler("/healthz", server->health_handler_.get());
  server->server_->addHandler("/readyz", server->ready_handler_.get());
  const std::vector<int> ports = server->server_->getListeningPorts();
  if (ports.empty()) return absl::UnavailableError("HTTP server has no listening port");
  server->port_ = ports.front();
  return server;
}

StatusHttpServer::~StatusHttpServer() {
  if (server_) server_->close();  // stops the worker threads before the handlers go away
}

}  // namespace phalanx::http
