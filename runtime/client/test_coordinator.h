// An in-process coordinator (service + gRPC server on 127.0.0.1, port 0 or a given port)
// for client tests; stop it by destroying it, start another on the same port to simulate a
// coordinator restart.
#pragma once

#include <memory>
#include <string>

#include "common/base/periodic_runner.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "runtime/client/client_config.h"
#include "runtime/coordination/coordinator_server.h"
#include "runtime/coordination/service.h"

namespace phalanx::client::testing {

using ::phalanx::testing::IsOk;

constexpr char kToken[] = "test-token";

// One coordinator (service + gRPC server) that a test can stop and start again on one port.
class Coordinator {
 public:
  explicit Coordinator(int num_tasks, int port = 0)
      : Coordinator(num_tasks, coord::CoordinationService::Options{}, port) {}
  // `options` sets limits and the like; job, task count and heartbeats are the test's.
  Coordinator(int num_tasks, coord::CoordinationService::Options options, int port = 0)
      : Coordinator(num_tasks, std::move(options), ServerOptions(port)) {}
  // The server's options for a test: 127.0.0.1:`port` (0: any), kToken.
  static coord::CoordinatorServer::Options ServerOptions(int port = 0) {
    coord::CoordinatorServer::Options options;
    options.listen_address = "127.0.0.1:" + std::to_string(port);
    options.token = kToken;
    return options;
  }
  // `server` sets the server's options (its address and token are the caller's too).
  Coordinator(int num_tasks, coord::CoordinatorServer::Options server)
      : Coordinator(num_tasks, coord::CoordinationService::Options{}, std::move(server)) {}
  Coordinator(int num_tasks, coord::CoordinationService::Options options,
              coord::CoordinatorServer::Options server) {
    options.job = "test";
    options.num_tasks = num_tasks;
    options.heartbeat_interval = absl::Milliseconds(100);
    options.heartbeat_timeout = absl::Seconds(3);
    service_ = *coord::CoordinationService::Create(options, base::RealClock::Get(), metrics_);
    auto started = coord::CoordinatorServer::Start(std::move(server), *service_, metrics_,
                                                   base::RealClock::Get());
    EXPECT_THAT(started, IsOk());
    server_ = *std::move(started);
    ticker_ =
        std::make_unique<base::PeriodicRunner>(base::RealClock::Get(), absl::Milliseconds(20),
                                               [this](absl::Time now) { service_->Tick(now); });
  }
  ~Coordinator() {
    ticker_->Stop();
    service_->Stop();
    server_->Shutdown(absl::Milliseconds(100));
  }
  int port() const { return server_->port(); }
  coord::CoordinationService& service() { return *service_; }
  coord::CoordinatorServer& server() { return *server_; }
  double AuthFailures() { return Metric("phalanx_coordinator_auth_failures_total"); }
  // The value of an unlabelled counter or gauge; -1 when there is none.
  double Metric(const std::string& name) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != name || family.metric.empty()) continue;
      return family.type == prometheus::MetricType::Gauge ? family.metric.at(0).gauge.value
                                                          : family.metric.at(0).counter.value;
    }
    return -1;
  }
  // The value of the counter of family `name` whose label `label` is `value`; -1 when none.
  double Metric(const std::string& name, const std::string& label, const std::string& value) {
    for (const auto& family : registry_.Collect()) {
      if (family.name != name) continue;
      for (const auto& metric : family.metric) {
        for (const auto& l : metric.label) {
          if (l.name == label && l.value == value) return metric.counter.value;
        }
      }
    }
    return -1;
  }

 private:
  prometheus::Registry registry_;
  coord::CoordinatorMetrics metrics_{registry_};
  std::unique_ptr<coord::CoordinationService> service_;
  std::unique_ptr<coord::CoordinatorServer> server_;
  std::unique_ptr<base::PeriodicRunner> ticker_;
};

// A client of the test job ("test", one task, kToken) for the coordinator on 127.0.0.1:`port`,
// its session over `transport`.
inline ClientConfig SessionConfig(int port, ClientConfig::SessionTransport transport) {
  ClientConfig config;
  config.coordinator = "127.0.0.1:" + std::to_string(port);
  config.job = "test";
  config.num_tasks = 1;
  config.token = kToken;
  config.session_transport = transport;
  return config;
}

}  // namespace phalanx::client::testing
