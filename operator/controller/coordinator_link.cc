#include "operator/controller/coordinator_link.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/base/log.h"
#include "runtime/coordination/bearer.h"
#include "runtime/proto/coordination.grpc.pb.h"

namespace phalanx::op {
namespace {

namespace pb = ::phalanx::coord::v1;

// A poll returns at once on a change; the timeout only bounds how long a connection that died
// silently keeps a watch waiting (a coordinator pod's death is seen on its pod meanwhile). Two
// minutes, not 30 s: each answered poll and its successor cost the operator gRPC thread
// wake-ups, the most of its idle CPU with 1,000 jobs running (perf, issue 33).
constexpr absl::Duration kPollTimeout = absl::Minutes(2);
// How much longer than the poll the call may take before gRPC gives up on it.
constexpr absl::Duration kPollMargin = absl::Seconds(5);
constexpr absl::Duration kNotifyTimeout = absl::Seconds(5);
// After a failed poll the watch waits, doubling from the first delay to the last; a call on a
// channel that cannot connect fails at once (no wait-for-ready) once the coordinator has
// answered. Until its first answer a watch's poll waits for the channel to connect (the job's
// task pods wait for that answer: observe.h coordinator_unproven), so a coordinator that starts
// listening a moment after its pod runs is found at the channel's next reconnect, not after
// our back-off's 1+2+4+8 s. The channel's reconnects start at 100 ms and grow (x1.6) to gRPC's
// default cap of 2 minutes, so hundreds of jobs whose coordinators are unreachable cost the
// operator little. A recreated coordinator pod gets a new watch and channel (Ensure), so the
// long cap never delays that case.
constexpr absl::Duration kFirstRetryDelay = absl::Seconds(1);
constexpr absl::Duration kMaxRetryDelay = absl::Seconds(60);
constexpr int kMaxReconnectBackoffMs = 120000;

// `tls_server_name` "": cleartext.
std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address,
                                         const std::string& tls_server_name,
                                         const std::shared_ptr<grpc::ChannelCredentials>& tls) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  // Its own connections: from the global pool, a channel to the same address would share the
  // old channel's connection and its reconnect back-off, so it would not be fresh.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // The link holds a connection per running job (1,000 in issue 33's fleet) that carries a few
  // hundred bytes every few minutes. gRPC's TLS keeps a buffer per connection as large as the
  // biggest record it may write, 16 KiB by default: at 1 KiB (TLS's floor here), 15 KiB less a
  // job (heaptrack, 500 jobs: 7.8 MiB).
  args.SetInt(GRPC_ARG_TSI_MAX_FRAME_SIZE, 1024);
  if (tls_server_name.empty()) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  // The link dials the pod IP; the certificate names the coordinator's Service.
  args.SetSslTargetNameOverride(tls_server_name);
  return grpc::CreateCustomChannel(address, tls, args);
}

// One TLS credentials object for every coordinator channel (gRPC keeps a client handshake
// factory, an SSL_CTX with the roots, per credentials object), rather than parsing the CA again
// for each job. It did not move the operator's RSS, though: with TLS each of the link's channels
// costs ~105 KiB more than in cleartext (heaptrack at 500 jobs: gRPC's BIO pair 34 KiB, OpenSSL's
// record buffers 32 KiB, gRPC's TLS staging buffers 16 KiB, the SSL object 7 KiB, and the
// written-record buffer), of which gRPC's API lets a client shrink only the last (ChannelTo).
std::shared_ptr<grpc::ChannelCredentials> SharedTlsCredentials(const std::string& roots_pem) {
  if (roots_pem.empty()) return nullptr;
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = roots_pem;
  return grpc::SslCredentials(tls);
}

// A call's deadline as a span from when gRPC starts it: it bounds a transport wait and decides
// nothing, so no clock is read for it (and a FakeClock's time would mean nothing to gRPC).
gpr_timespec Within(absl::Duration d) {
  return gpr_time_from_millis(absl::ToInt64Milliseconds(d), GPR_TIMESPAN);
}

void Authorize(grpc::ClientContext& context, const std::string& token) {
  context.AddMetadata(coord::kAuthorizationHeader, coord::BearerCredential(token));
}

std::optional<absl::Time> InstantOrNone(int64_t unix_micros) {
  if (unix_micros <= 0) return std::nullopt;
  return absl::FromUnixMicros(unix_micros);
}

SteppingReport SteppingOf(const pb::JobState& state) {
  return {InstantOrNone(state.first_step_unix_micros()),
          InstantOrNone(state.stepping_since_unix_micros()),
          InstantOrNone(state.regroup_since_unix_micros()), state.regrouping()};
}

}  // namespace

// One long poll: its context, request and response live until the next poll replaces it or
// the watch is deleted, so Retire can cancel it without racing its callback.
struct CoordinatorLink::Poll {
  grpc::ClientContext context;
  pb::WatchJobStateRequest request;
  pb::WatchJobStateResponse response;
};

// One job's watch. The first block is fixed at creation; the rest is guarded by the link's mu_.
struct CoordinatorLink::Watch {
  Watch(std::string k, std::string a, std::string t, std::string c, std::string tls_name,
        const std::shared_ptr<grpc::ChannelCredentials>& tls)
      : key(std::move(k)),
        address(std::move(a)),
        token(std::move(t)),
        coordinator(std::move(c)),
        tls_server_name(std::move(tls_name)),
        channel(ChannelTo(address, tls_server_name, tls)),
        stub(pb::Coordination::NewStub(channel)) {}

  const std::string key;
  const std::string address;
  const std::string token;
  const std::string coordinator;      // the coordinator pod's UID
  const std::string tls_server_name;  // "": cleartext
  const std::shared_ptr<grpc::Channel> channel;
  const std::unique_ptr<pb::Coordination::Stub> stub;

  bool retired = false;  // forgotten or replaced: start nothing more
  // Who may touch this watch outside mu_: the poll in flight (until its callback returns), a
  // thread starting a poll, Retire cancelling one. Deleted only once this is 0 and retired.
  int holds = 0;
  std::unique_ptr<Poll> poll;  // the current or last poll
  uint64_t known_version = 0;
  absl::Duration retry_delay = kFirstRetryDelay;
  absl::Time retry_at = absl::InfiniteFuture();  // while backing off: its key in backing_off_
  std::map<int, FailedTask> failed;
  std::map<int, base::Incarnation> registered;  // task → the newest incarnation it registered
  std::optional<RolledBack> rolled_back;
  SteppingReport stepping;
  Spares spares;
};

CoordinatorLink::CoordinatorLink(base::Clock& clock, Wake wake, std::string tls_roots_pem)
    : clock_(clock),
      wake_(std::move(wake)),
      tls_roots_pem_(std::move(tls_roots_pem)),
      tls_credentials_(SharedTlsCredentials(tls_roots_pem_)),
      retry_thread_([this] { RetryLoop(); }) {}

CoordinatorLink::~CoordinatorLink() {
  std::vector<std::unique_ptr<Watch>> watches;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    while (!watches_.empty()) watches.push_back(DetachLocked(watches_.begin()));
  }
  std::vector<Watch*> retiring;
  for (const auto& watch : watches) retiring.push_back(watch.get());
  Retire(retiring);
  retry_thread_.join();
}

std::unique_ptr<CoordinatorLink::Watch> CoordinatorLink::DetachLocked(
    std::map<std::string, std::unique_ptr<Watch>>::iterator it) {
  std::unique_ptr<Watch> watch = std::move(it->second);
  watches_.erase(it);
  watch->retired = true;
  backing_off_.erase({watch->retry_at, watch.get()});
  return watch;
}

void CoordinatorLink::Ensure(const std::string& key, const std::string& address,
                             const std::string& token, const std::string& coordinator,
                             const std::string& tls_server_name) {
  std::unique_ptr<Watch> old;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    auto it = watches_.find(key);
    if (it != watches_.end()) {
      const Watch& current = *it->second;
      if (current.address == address && current.token == token &&
          current.coordinator == coordinator && current.tls_server_name == tls_server_name) {
        return;
      }
      old = DetachLocked(it);  // a new address (coordinator recreated) or token: start over
    }
  }
  if (old != nullptr) Retire({old.get()});
  auto fresh =
      std::make_unique<Watch>(key, address, token, coordinator, tls_server_name, tls_credentials_);
  Watch* watch = fresh.get();
  {
    absl::MutexLock lock(&mu_);
    // The reconciler runs one pass per key at a time, so no other Ensure of `key` races this.
    if (stopping_ || watches_.contains(key)) return;
    watch->holds = 1;  // handed to StartPoll
    watches_[key] = std::move(fresh);
  }
  StartPoll(watch);
}

void CoordinatorLink::Forget(const std::string& key) {
  std::unique_ptr<Watch> watch;
  {
    absl::MutexLock lock(&mu_);
    auto it = watches_.find(key);
    if (it == watches_.end()) return;
    watch = DetachLocked(it);
  }
  Retire({watch.get()});
}

void CoordinatorLink::Retire(const std::vector<Watch*>& watches) {
  // Cancel outside the lock (a cancelled call's callback may run on this thread); a hold keeps
  // each poll's context alive meanwhile: no new poll replaces it once the watch is retired.
  std::vector<grpc::ClientContext*> in_flight;
  {
    absl::MutexLock lock(&mu_);
    for (Watch* watch : watches) {
      if (watch->poll == nullptr) continue;
      ++watch->holds;
      in_flight.push_back(&watch->poll->context);
    }
  }
  for (grpc::ClientContext* context : in_flight) context->TryCancel();
  absl::MutexLock lock(&mu_);
  for (Watch* watch : watches) {
    if (watch->poll != nullptr) --watch->holds;
  }
  for (Watch* watch : watches) {
    auto idle = [watch]() { return watch->holds == 0; };
    mu_.Await(absl::Condition(&idle));
  }
}

void CoordinatorLink::StartPoll(Watch* watch) {
  Poll* poll;
  {
    absl::MutexLock lock(&mu_);
    if (watch->retired) {
      --watch->holds;
      return;
    }
    watch->poll = std::make_unique<Poll>();  // the last poll's callback has returned
    poll = watch->poll.get();
    Authorize(poll->context, watch->token);
    poll->context.set_deadline(Within(kPollTimeout + kPollMargin));
    if (!watch->rolled_back.has_value()) poll->context.set_wait_for_ready(true);
    poll->request.set_known_version(watch->known_version);
    poll->request.set_timeout_ms(absl::ToInt64Milliseconds(kPollTimeout));
    ++watch->holds;  // this thread's, while it starts the call
  }
  // The caller's hold goes to the call; its callback gives it back (or to the next poll).
  watch->stub->async()->WatchJobState(
      &poll->context, &poll->request, &poll->response, [this, watch](grpc::Status status) {
        OnPollDone(watch, status.ok()
                              ? ""
                              : absl::StrCat(status.error_code(), ": ", status.error_message()));
      });
  absl::MutexLock lock(&mu_);
  --watch->holds;
}

void CoordinatorLink::OnPollDone(Watch* watch, const std::string& error) {
  std::string key;
  std::map<int, FailedTask> failed;
  bool changed;
  {
    absl::MutexLock lock(&mu_);
    if (watch->retired) {
      --watch->holds;
      return;
    }
    if (!error.empty()) {
      // A coordinator starting up answers within a few tries; past that, say so (at most once
      // a minute per job, at the longest back-off): until the job's coordinator answers, the
      // job gets no task pods (observe.h coordinator_unproven) and no failure reports.
      if (watch->retry_delay >= absl::Seconds(4)) {
        PHX_LOG(WARNING) << "job " << watch->key << ": coordinator link to " << watch->address
                         << " failed (gRPC code " << error << "); retrying in "
                         << watch->retry_delay;
      }
      // Not up yet, restarting, or refusing us: retry after the back-off, on the timer thread.
      // A coordinator that restarted counts versions afresh, so the next poll asks for the state
      // whatever its version (else one that happened to match would wait out kPollTimeout).
      watch->known_version = 0;
      watch->retry_at = clock_.Now() + watch->retry_delay;
      watch->retry_delay = std::min(watch->retry_delay * 2, kMaxRetryDelay);
      backing_off_.emplace(watch->retry_at, watch);
      --watch->holds;
      return;
    }
    watch->retry_delay = kFirstRetryDelay;
    const pb::JobState& state = watch->poll->response.state();
    watch->known_version = state.version();
    watch->registered.clear();
    for (const pb::TaskInfo& task : state.tasks()) {
      if (task.state() != pb::TASK_STATE_UNREGISTERED) {
        watch->registered[task.task_id()] = base::IncarnationFromWire(task.incarnation());
      }
      if (task.state() == pb::TASK_STATE_FAILED) {
        failed[task.task_id()] = {base::IncarnationFromWire(task.incarnation()), task.reason(),
                                  task.last_heard_unix_micros() > 0
                                      ? absl::FromUnixMicros(task.last_heard_unix_micros())
                                      : absl::InfinitePast()};
      }
    }
    const RolledBack rolled_back{state.coordinator_id(), state.rolled_back_seconds()};
    const SteppingReport stepping = SteppingOf(state);
    Spares spares;
    for (const pb::SpareInfo& spare : state.spares()) {
      if (spare.task_id() < 0) {
        spares.waiting.insert(spare.pod());
      } else {
        spares.takeovers[spare.pod()] = {spare.task_id(),
                                         base::IncarnationFromWire(spare.incarnation())};
      }
    }
    changed = failed != watch->failed || rolled_back != watch->rolled_back ||
              stepping != watch->stepping || spares != watch->spares;
    watch->failed = failed;
    watch->rolled_back = rolled_back;
    watch->stepping = stepping;
    watch->spares = std::move(spares);
    key = watch->key;
  }
  if (changed && !failed.empty()) {
    PHX_LOG(INFO) << "job " << key << ": coordinator reports " << failed.size()
                  << " failed task(s)";
  }
  if (changed) wake_(key);
  StartPoll(watch);  // with this callback's hold
}

void CoordinatorLink::RetryLoop() {
  mu_.Lock();
  while (!stopping_) {
    const absl::Time now = clock_.Now();
    std::vector<Watch*> due;
    while (!backing_off_.empty() && backing_off_.begin()->first <= now) {
      Watch* watch = backing_off_.begin()->second;
      backing_off_.erase(backing_off_.begin());
      watch->retry_at = absl::InfiniteFuture();
      ++watch->holds;  // handed to StartPoll
      due.push_back(watch);
    }
    if (!due.empty()) {
      mu_.Unlock();
      for (Watch* watch : due) StartPoll(watch);
      mu_.Lock();
      continue;
    }
    // Sleep until the earliest back-off ends or changes (one starts or is forgotten), or the
    // link stops.
    auto earliest = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return backing_off_.empty() ? absl::InfiniteFuture() : backing_off_.begin()->first;
    };
    retry_wait_until_ = earliest();
    auto wake = [this, &earliest]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || earliest() != retry_wait_until_;
    };
    if (backing_off_.empty()) {
      mu_.Await(absl::Condition(&wake));  // nothing timed to wait for
    } else {
      clock_.AwaitWithDeadline(&mu_, absl::Condition(&wake), retry_wait_until_);
    }
  }
  mu_.Unlock();
}

std::map<int, CoordinatorLink::FailedTask> CoordinatorLink::FailedTasks(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = watches_.find(key);
  return it == watches_.end() ? std::map<int, FailedTask>{} : it->second->failed;
}

std::map<int, base::Incarnation> CoordinatorLink::RegisteredIncarnations(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = watches_.find(key);
  return it == watches_.end() ? std::map<int, base::Incarnation>{} : it->second->registered;
}

std::optional<CoordinatorLink::RolledBack> CoordinatorLink::RolledBackWork(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = watches_.find(key);
  return it == watches_.end() ? std::nullopt : it->second->rolled_back;
}

CoordinatorLink::Spares CoordinatorLink::SparesOf(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = watches_.find(key);
  return it == watches_.end() ? Spares{} : it->second->spares;
}

SteppingReport CoordinatorLink::Stepping(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = watches_.find(key);
  return it == watches_.end() ? SteppingReport{} : it->second->stepping;
}

absl::Status CoordinatorLink::NotifyPreemption(const std::string& key,
                                               const std::vector<int>& tasks, absl::Time deadline,
                                               const std::string& reason) {
  std::shared_ptr<grpc::Channel> channel;
  std::string token;
  {
    absl::MutexLock lock(&mu_);
    auto it = watches_.find(key);
    if (it == watches_.end()) return absl::UnavailableError("no channel to the coordinator yet");
    channel = it->second->channel;  // the call does not hold the watch: Forget need not wait
    token = it->second->token;
  }
  std::unique_ptr<pb::Coordination::Stub> stub = pb::Coordination::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(Within(kNotifyTimeout));
  context.set_wait_for_ready(true);  // a channel between reconnect attempts waits, not fails
  Authorize(context, token);
  pb::NotifyPreemptionRequest request;
  request.set_reason(reason);
  request.set_deadline_unix_micros(absl::ToUnixMicros(deadline));
  for (int t : tasks) request.add_affected_tasks(t);
  pb::NotifyPreemptionResponse response;
  grpc::Status status;
  absl::Notification done;
  stub->async()->NotifyPreemption(&context, &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();  // gRPC completes every call by its deadline
  if (!status.ok()) {
    return absl::UnavailableError("NotifyPreemption: " + status.error_message());
  }
  return absl::OkStatus();
}

}  // namespace phalanx::op
