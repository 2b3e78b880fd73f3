#include "operator/controller/coordinator_link.h"

#include <grpcpp/grpcpp.h>

#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/base/log.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::op {
namespace {

namespace pb = ::phalanx::coord::v1;

constexpr absl::Duration kPollTimeout = absl::Seconds(30);  // returns at once on a change
// After a failed poll the watcher waits, doubling from the first delay to the last; a call on a
// channel that cannot connect fails at once (no wait-for-ready). The channel's own reconnects
// start at 1 s and grow (x1.6) to gRPC's default cap of 2 minutes, so hundreds of jobs whose
// coordinators are unreachable cost the operator little, while a coordinator that starts
// listening a few seconds after its pod runs is found within seconds. A recreated coordinator
// pod gets a new watcher and channel (Ensure), so the long cap never delays that case.
constexpr absl::Duration kFirstRetryDelay = absl::Seconds(1);
constexpr absl::Duration kMaxRetryDelay = absl::Seconds(60);
constexpr int kMaxReconnectBackoffMs = 120000;

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

}  // namespace

struct CoordinatorLink::Watcher {
  std::string address;
  std::string token;
  std::string coordinator;  // the coordinator pod's UID
  std::thread thread;
  absl::Notification stop;
  absl::Mutex mu;
  grpc::ClientContext* in_flight ABSL_GUARDED_BY(mu) = nullptr;  // cancelled by Forget
  std::map<int, FailedTask> failed ABSL_GUARDED_BY(mu);
  std::shared_ptr<pb::Coordination::Stub> stub;
};

CoordinatorLink::CoordinatorLink(Wake wake) : wake_(std::move(wake)) {}

CoordinatorLink::~CoordinatorLink() {
  std::vector<std::string> keys;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, w] : watchers_) keys.push_back(key);
  }
  for (const std::string& key : keys) Forget(key);
}

void CoordinatorLink::Ensure(const std::string& key, const std::string& address,
                             const std::string& token, const std::string& coordinator) {
  {
    absl::MutexLock lock(&mu_);
    auto it = watchers_.find(key);
    if (it != watchers_.end() && it->second->address == address && it->second->token == token &&
        it->second->coordinator == coordinator) {
      return;
    }
  }
  Forget(key);  // a new address (coordinator recreated) or token: start over
  auto watcher = std::make_shared<Watcher>();
  watcher->address = address;
  watcher->token = token;
  watcher->coordinator = coordinator;
  watcher->stub = pb::Coordination::NewStub(ChannelTo(address));
  watcher->thread = std::thread([this, watcher, key] { Loop(watcher, key); });
  absl::MutexLock lock(&mu_);
  watchers_[key] = watcher;
}

void CoordinatorLink::Forget(const std::string& key) {
  std::shared_ptr<Watcher> watcher;
  {
    absl::MutexLock lock(&mu_);
    auto it = watchers_.find(key);
    if (it == watchers_.end()) return;
    watcher = it->second;
    watchers_.erase(it);
  }
  watcher->stop.Notify();
  {
    absl::MutexLock lock(&watcher->mu);
    if (watcher->in_flight != nullptr) watcher->in_flight->TryCancel();
  }
  if (watcher->thread.joinable()) watcher->thread.join();
}

std::shared_ptr<CoordinatorLink::Watcher> CoordinatorLink::WatcherFor(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = watchers_.find(key);
  return it == watchers_.end() ? nullptr : it->second;
}

std::map<int, CoordinatorLink::FailedTask> CoordinatorLink::FailedTasks(const std::string& key) {
  std::shared_ptr<Watcher> watcher = WatcherFor(key);
  if (watcher == nullptr) return {};
  absl::MutexLock lock(&watcher->mu);
  return watcher->failed;
}

absl::Status CoordinatorLink::NotifyPreemption(const std::string& key,
                                               const std::vector<int>& tasks, absl::Time deadline,
                                               const std::string& reason) {
  std::shared_ptr<Watcher> watcher = WatcherFor(key);
  if (watcher == nullptr) return absl::UnavailableError("no channel to the coordinator yet");
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  ctx.set_wait_for_ready(true);  // a channel between reconnect attempts waits, not fails
  ctx.AddMetadata("authorization", "Bearer " + watcher->token);
  pb::NotifyPreemptionRequest request;
  request.set_reason(reason);
  request.set_deadline_unix_micros(absl::ToUnixMicros(deadline));
  for (int t : tasks) request.add_affected_tasks(t);
  pb::NotifyPreemptionResponse response;
  const grpc::Status s = watcher->stub->NotifyPreemption(&ctx, request, &response);
  if (!s.ok()) {
    return absl::UnavailableError("NotifyPreemption: " + s.error_message());
  }
  return absl::OkStatus();
}

void CoordinatorLink::Loop(std::shared_ptr<Watcher> watcher, std::string key) {
  uint64_t known_version = 0;
  std::string coordinator_id;
  absl::Duration retry_delay = kFirstRetryDelay;
  while (!watcher->stop.HasBeenNotified()) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kPollTimeout + absl::Seconds(5)));
    ctx.AddMetadata("authorization", "Bearer " + watcher->token);
    {
      absl::MutexLock lock(&watcher->mu);
      watcher->in_flight = &ctx;
    }
    if (watcher->stop.HasBeenNotified()) ctx.TryCancel();  // Forget raced the registration
    pb::WatchJobStateRequest request;
    request.set_known_version(known_version);
    request.set_timeout_ms(absl::ToInt64Milliseconds(kPollTimeout));
    pb::WatchJobStateResponse response;
    const grpc::Status s = watcher->stub->WatchJobState(&ctx, request, &response);
    {
      absl::MutexLock lock(&watcher->mu);
      watcher->in_flight = nullptr;
    }
    if (!s.ok()) {
      // Not up yet, restarting, refusing us, or cancelled: retry after a bounded wait.
      watcher->stop.WaitForNotificationWithTimeout(retry_delay);
      retry_delay = std::min(retry_delay * 2, kMaxRetryDelay);
      continue;
    }
    retry_delay = kFirstRetryDelay;
    const pb::JobState& state = response.state();
    if (state.coordinator_id() != coordinator_id) coordinator_id = state.coordinator_id();
    known_version = state.version();
    std::map<int, FailedTask> failed;
    for (const pb::TaskInfo& task : state.tasks()) {
      if (task.state() == pb::TASK_STATE_FAILED) {
        failed[task.task_id()] = {static_cast<int>(task.incarnation()), task.reason()};
      }
    }
    bool changed;
    {
      absl::MutexLock lock(&watcher->mu);
      changed = failed != watcher->failed;
      watcher->failed = failed;
    }
    if (changed && !failed.empty()) {
      PHX_LOG(INFO) << "job " << key << ": coordinator reports " << failed.size()
                    << " failed task(s)";
    }
    if (changed) wake_(key);
  }
}

}  // namespace phalanx::op
