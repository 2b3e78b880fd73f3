// StandInCoordinators: for the operator bench's scale workload, one gRPC server in the bench
// process that answers the operator's job-state watch (WatchJobState) on every coordinator port
// the operator may hand out, as each job's coordinator would once it runs.
//
// Why: the scale workload's pods run no process (simulated nodes), and a machine with 2 cores
// cannot run a thousand coordinators. Without an answer the operator's link keeps a thousand
// channels reconnecting and their polls backing off, so its idle CPU measured gRPC's reconnect
// timers (80 % of the operator's idle samples at 250 jobs, perf), not a running fleet. A running
// coordinator answers the first poll at once and holds each later one until its timeout
// (coordination.proto); the stand-in does the same with an empty job state (no task has
// registered, none failed), so the operator holds one long poll per job, as in production.
// Its own CPU is the bench process's, not the operator's. With a certificate it serves TLS, as
// the operator's coordinators do by default (the bench gives it one leaf naming every job's
// coordinator, signed by the CA it hands the operator). Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::bench {

class StandInCoordinators final : public coord::v1::Coordination::CallbackService {
 public:
  // Listens on 127.0.0.1 at base, base + 2, ... (the operator's even coordinator ports), over
  // TLS with `cert_pem`/`key_pem` when given; nullptr when a port cannot be bound.
  static std::unique_ptr<StandInCoordinators> Start(int base, int ports,
                                                    const std::string& cert_pem = "",
                                                    const std::string& key_pem = "") {
    auto stand_in = std::unique_ptr<StandInCoordinators>(new StandInCoordinators());
    std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
    if (!cert_pem.empty()) {
      grpc::SslServerCredentialsOptions ssl;
      ssl.pem_key_cert_pairs.push_back({key_pem, cert_pem});
      credentials = grpc::SslServerCredentials(ssl);
    }
    grpc::ServerBuilder builder;
    for (int i = 0; i < ports; ++i) {
      builder.AddListeningPort("127.0.0.1:" + std::to_string(base + 2 * i), credentials);
    }
    builder.RegisterService(stand_in.get());
    stand_in->server_ = builder.BuildAndStart();
    if (stand_in->server_ == nullptr) return nullptr;
    stand_in->releaser_ = std::thread([s = stand_in.get()] { s->ReleaseLoop(); });
    return stand_in;
  }

  ~StandInCoordinators() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (releaser_.joinable()) releaser_.join();  // answers every held poll
    server_->Shutdown();
  }

  grpc::ServerUnaryReactor* WatchJobState(grpc::CallbackServerContext* context,
                                          const coord::v1::WatchJobStateRequest* request,
                                          coord::v1::WatchJobStateResponse* response) override {
    coord::v1::JobState& state = *response->mutable_state();
    state.set_version(kVersion);
    state.set_coordinator_id("stand-in");
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (request->known_version() != kVersion) {
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    // Nothing changes here: the poll is answered when its timeout passes (at once once stopping:
    // no one would answer it).
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    held_.emplace(absl::Now() + absl::Milliseconds(request->timeout_ms()), reactor);
    return reactor;
  }

 private:
  static constexpr uint64_t kVersion = 1;
  StandInCoordinators() = default;

  void ReleaseLoop() {
    absl::MutexLock lock(&mu_);
    while (true) {
      const absl::Time now = absl::Now();
      while (!held_.empty() && (stopping_ || held_.begin()->first <= now)) {
        held_.begin()->second->Finish(grpc::Status::OK);
        held_.erase(held_.begin());
      }
      if (stopping_) return;
      const absl::Time next = held_.empty()
                                  ? now + absl::Seconds(1)
                                  : std::min(held_.begin()->first, now + absl::Seconds(1));
      mu_.AwaitWithDeadline(absl::Condition(&stopping_), next);
    }
  }

  std::unique_ptr<grpc::Server> server_;
  std::thread releaser_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::pair<absl::Time, grpc::ServerUnaryReactor*>> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace phalanx::bench
