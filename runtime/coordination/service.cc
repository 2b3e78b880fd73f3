#include "runtime/coordination/service.h"

#include <malloc.h>

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/log.h"
#include "runtime/coordination/error_details.h"
#include "runtime/coordination/proto_convert.h"
#include "runtime/coordination/service_options.h"

namespace phalanx::coord {
namespace {

// The shutdown barrier lives in the barrier table under a name no client can use
// (KvStore-style ids never start with a space).
constexpr char kShutdownBarrierId[] = " shutdown";

// How long a preemption round lasts when the notice names no deadline.
constexpr absl::Duration kDefaultPreemptionWindow = absl::Minutes(10);

// A task's words (a reported error, a reason for leaving) go to every session and into every
// snapshot: at most `max` bytes of them, keeping the start, which says what happened.
std::string Bounded(std::string text, size_t max) {
  if (text.size() > max) {
    text.resize(max);
    text += "... (truncated)";
  }
  return text;
}

// What every call meets once the coordinator stops: clients reconnect to its successor, re-register
// and retry (docs/coordination.md, "What a coordinator restart loses").
absl::Status CoordinatorStoppingError() {
  return absl::UnavailableError("coordinator is shutting down; retry");
}

std::string RandomId() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x", rd(), rd());
}

// An alive-tasks round works on the listed ids (it answers with the alive ones among them).
std::vector<int> AliveSubset(const Participants& participants) {
  std::vector<int> ids;
  ids.reserve(participants.size());
  participants.ForEach([&](int id) { ids.push_back(id); });
  return ids;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinationService>> CoordinationService::Create(
    Options options, base::Clock& clock, CoordinatorMetrics& metrics) {
  if (absl::Status s = ValidateServiceOptions(options); !s.ok()) return s;
  if (options.coordinator_id.empty()) options.coordinator_id = RandomId();
  return std::unique_ptr<CoordinationService>(
      new CoordinationService(std::move(options), clock, metrics));
}

CoordinationService::CoordinationService(Options options, base::Clock& clock,
                                         CoordinatorMetrics& metrics)
    : options_(std::move(options)),
      clock_(clock),
      metrics_(metrics),
      barriers_(metrics, options_.barrier_limits),
      kv_(options_.kv_limits),
      sync_(options_.num_tasks),
      spares_(options_.spare_limits),
      tasks_(options_.num_tasks, clock_.Now()) {
  absl::MutexLock lock(&mu_);
  UpdateGaugesLocked();
}

CoordinationService::~CoordinationService() { Stop(); }

absl::StatusOr<CoordinationService::Registration> CoordinationService::Register(TaskRef ref) {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (stopped_) return CoordinatorStoppingError();
  absl::StatusOr<TaskTable::Admission> admission = tasks_.Admit(ref);
  if (!admission.ok()) return admission.status();
  // A retried Register of the connected incarnation changes nothing.
  if (*admission != TaskTable::Admission::kRetry) {
    ConnectLocked(ref, *admission == TaskTable::Admission::kReplace, out);
  }
  return Registration{options_.job, options_.num_tasks, options_.heartbeat_interval,
                      options_.heartbeat_timeout, options_.coordinator_id};
}

void CoordinationService::ConnectLocked(TaskRef ref, bool replacing, Completions& out) {
  TaskTable::Task& task = tasks_[ref.task_id];
  TaskInfo& info = task.info;
  if (replacing) {
    if (info.state == TaskState::kConnected) metrics_.TaskFailed(FailureKind::kSuperseded);
    sync_.Superseded(ref.task_id);
    RetireIncarnationLocked(
        task,
        absl::AbortedError(absl::StrCat("task ", ref.task_id, " restarted: incarnation ",
                                        info.incarnation, " superseded by ", ref.incarnation)),
        out);
    // A connected incarnation replaced without a failure seen: it died unnoticed.
    if (info.state == TaskState::kConnected) {
      stepping_.OnFailure(version_, task.last_seen);  // the group re-forms around its successor
      FailPeerWaitsLocked({ref.task_id, info.incarnation},
                          absl::StrCat("restarted as incarnation ", ref.incarnation), out);
    }
  }
  const std::string reason =
      replacing ? absl::StrCat("registered, replacing incarnation ", info.incarnation)
                : std::string("registered");
  info.incarnation = ref.incarnation;
  task.last_seen = clock_.Now();
  spares_.Registered(ref.task_id, ref.incarnation);
  SetStateLocked(task, TaskState::kConnected, reason, out);
}

absl::StatusOr<uint64_t> CoordinationService::OpenSession(TaskRef ref,
                                                          std::shared_ptr<SessionOutbox> outbox) {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (stopped_) return CoordinatorStoppingError();
  if (absl::Status s = CheckCallerLocked(ref); !s.ok()) return s;
  TaskTable::Task& task = tasks_[ref.task_id];
  uint64_t id = 0;
  if (std::shared_ptr<SessionOutbox> replaced =
          tasks_.Attach(task, std::move(outbox), clock_.Now(), &id);
      replaced != nullptr) {
    replaced->Close(absl::AbortedError("replaced by a newer session of the same task"));
    out.Add([replaced] { replaced->Notify(); });
  }
  // The first event says the session is open. It carries the job's header, not every task:
  // a full snapshot per session would make start-up O(N^2) (1M task entries at 1024 tasks);
  // a task that wants the membership asks WatchJobState.
  PushLocked(task, JobSnapshot{options_.job, version_, {}, options_.coordinator_id}, out);
  if (std::optional<PreemptionRound> round = sync_.Active(); round.has_value()) {
    PushLocked(task, *round, out);  // a task (re)joining mid-round must hear of it too
  }
  return id;
}

void CoordinationService::Heartbeat(uint64_t session_id, int64_t sent_unix_micros) {
  Completions out;
  absl::MutexLock lock(&mu_);
  TaskTable::Task* task = tasks_.FindSession(session_id);
  if (task == nullptr) return;
  task->last_seen = clock_.Now();
  PushLocked(*task, HeartbeatAck{sent_unix_micros}, out);
}

void CoordinationService::Leave(uint64_t session_id, std::string reason) {
  Completions out;
  absl::MutexLock lock(&mu_);
  TaskTable::Task* task = tasks_.FindSession(session_id);
  if (task == nullptr || task->info.state != TaskState::kConnected || stopped_) return;
  reason = Bounded(std::move(reason), options_.max_error_message_bytes);
  task->last_seen = clock_.Now();
  RetireIncarnationLocked(
      *task, absl::CancelledError(absl::StrCat("task ", task->info.task_id, " left")), out);
  SetStateLocked(*task, TaskState::kShutdown,
                 absl::StrCat("left: ", reason.empty() ? "the task said so" : reason), out);
  // A shutdown is not pushed to peers (they all pass the shutdown barrier together); a
  // departure of one task is news they may act on.
  TellPeersLocked(task->info, out);
}

void CoordinationService::CloseSession(uint64_t session_id, const absl::Status& why) {
  CloseSessions({session_id}, why);
}

void CoordinationService::CloseSessions(const std::vector<uint64_t>& session_ids,
                                        const absl::Status& why) {
  Completions out;
  absl::MutexLock lock(&mu_);
  // The failures go out together, at once unless something went out this tick already.
  const bool now = !peer_events_.holding();
  peer_events_.Hold();
  BeginBatchLocked();
  for (uint64_t session_id : session_ids) {
    TaskTable::Task* found = tasks_.FindSession(session_id);
    if (found == nullptr) continue;  // already replaced or retired
    TaskTable::Task& task = *found;
    tasks_.Detach(task);
    if (task.info.state == TaskState::kConnected && !stopped_) {
      task.last_seen = clock_.Now();  // hearing it go: for a crash, when it stopped
      metrics_.SessionBroken();
      // The task's own close (Cancelled) may be its script's normal end: only the operator,
      // from the pod's exit, can tell, so no spare takes it over. A connection that ended
      // without a close is a death.
      const bool closed_by_task = why.ok() || absl::IsCancelled(why);
      FailTaskLocked(task, FailureKind::kSessionBroken,
                     absl::StrCat("session broken: ",
                                  why.ok() ? "closed by the task" : std::string(why.message())),
                     out, /*spare_may_take_over=*/!closed_by_task);
    }
  }
  EndBatchLocked(out);
  if (now) FlushPeerEventsLocked(out);
}

absl::Status CoordinationService::ReportError(TaskRef ref, std::string message) {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckCallerLocked(ref); !s.ok()) return s;
  message = Bounded(std::move(message), options_.max_error_message_bytes);
  // The report and the failure it causes go out together (at once, unless something went out
  // this tick already).
  const bool now = !peer_events_.holding();
  tasks_[ref.task_id].last_seen = clock_.Now();
  peer_events_.Hold();
  TellPeersLocked(ErrorReport{ref, message}, out);
  FailTaskLocked(tasks_[ref.task_id], FailureKind::kReportedError,
                 absl::StrCat("reported error: ", message), out);
  if (now) FlushPeerEventsLocked(out);
  return absl::OkStatus();
}

void CoordinationService::Barrier(TaskRef ref, std::string id, absl::Duration timeout,
                                  std::vector<int> tasks, StatusCallback done) {
  Completions out;
  absl::MutexLock lock(&mu_);
  absl::Status status = CheckCallerLocked(ref);
  absl::StatusOr<absl::Duration> resolved =
      ResolveTimeout(timeout, options_.barrier_default_timeout);
  absl::StatusOr<Participants> subset = tasks_.ResolveSubset(std::move(tasks), ref.task_id);
  if (status.ok()) status = barriers_.ValidateId(id);
  if (status.ok() && id.front() == ' ') {
    status = absl::InvalidArgumentError("barrier ids may not start with a space");
  }
  if (status.ok()) status = resolved.status();
  if (status.ok()) status = subset.status();
  if (!status.ok()) {
    out.Answer(std::move(done), status);
    return;
  }
  const absl::Time now = clock_.Now();
  const uint64_t caller_registered = tasks_[ref.task_id].state_version;
  // Only the failed tasks are visited (not every participant: O(tasks) per arrival made a round
  // O(tasks²)). Fail fast only on news: a peer that failed before the caller registered (a
  // whole-job restart, a rendezvous after a recovery) is one the caller knows of; it waits, up to
  // the timeout, for that peer's next incarnation instead of tripping on the previous one.
  for (int failed : tasks_.failed()) {
    const TaskTable::Task& peer = tasks_[failed];
    if (peer.state_version > caller_registered && subset->Contains(failed)) {
      barriers_.FailNow(id, PeerFailedError({failed, peer.info.incarnation}, peer.info.reason), now,
                        std::move(done), out);
      return;
    }
  }
  barriers_.Arrive(ref, id, *std::move(subset), now + *resolved, now, std::move(done), out);
}

absl::Status CoordinationService::CancelBarrier(TaskRef ref, const std::string& id) {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckCallerLocked(ref); !s.ok()) return s;
  if (absl::Status s = barriers_.ValidateId(id); !s.ok()) return s;
  if (id.front() == ' ') {
    return absl::InvalidArgumentError("barrier ids may not start with a space");
  }
  return barriers_.Cancel(ref, id, out);
}

absl::Status CoordinationService::KvInsert(const std::string& key, std::string value,
                                           bool allow_overwrite) {
  Completions out;
  absl::MutexLock lock(&mu_);
  absl::Status status = kv_.Insert(key, std::move(value), allow_overwrite, out);
  metrics_.SetKv(kv_.entries(), kv_.bytes());
  return status;
}

absl::StatusOr<int64_t> CoordinationService::KvAdd(const std::string& key, int64_t delta) {
  Completions out;  // runs the woken gets after the lock is released
  absl::MutexLock lock(&mu_);
  absl::StatusOr<int64_t> sum = kv_.Add(key, delta, out);
  metrics_.SetKv(kv_.entries(), kv_.bytes());
  return sum;
}

absl::StatusOr<CompareSetResult> CoordinationService::KvCompareAndSet(
    const std::string& key, const std::optional<std::string>& expected, std::string desired) {
  Completions out;
  absl::MutexLock lock(&mu_);
  absl::StatusOr<CompareSetResult> result =
      kv_.CompareAndSet(key, expected, std::move(desired), out);
  metrics_.SetKv(kv_.entries(), kv_.bytes());
  return result;
}

void CoordinationService::KvGet(const std::string& key, std::optional<TaskRef> waiter,
                                absl::Duration timeout, ValueCallback done) {
  Completions out;
  absl::MutexLock lock(&mu_);
  absl::StatusOr<absl::Duration> resolved =
      ResolveTimeout(timeout, options_.barrier_default_timeout);
  absl::Status status = resolved.status();
  if (status.ok() && stopped_) status = CoordinatorStoppingError();
  if (status.ok() && waiter.has_value()) status = CheckCallerLocked(*waiter);
  if (!status.ok()) {
    out.Answer(std::move(done), status);
    return;
  }
  kv_.Get(key, waiter, clock_.Now() + *resolved, std::move(done), out);
}

absl::StatusOr<std::string> CoordinationService::KvTryGet(const std::string& key) {
  absl::MutexLock lock(&mu_);
  return kv_.TryGet(key);
}

absl::StatusOr<KvStore::DirPage> CoordinationService::KvGetDir(const std::string& directory,
                                                               const std::string& page_token,
                                                               bool paged) {
  absl::MutexLock lock(&mu_);
  return kv_.GetDir(directory, page_token, paged);
}

absl::StatusOr<int> CoordinationService::KvDelete(const std::string& key) {
  int deleted = 0;
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = kv_.ValidateKey(key); !s.ok()) return s;
    deleted = kv_.Delete(key, &freed_since_release_);
    metrics_.SetKv(kv_.entries(), kv_.bytes());
    if (freed_since_release_ >= options_.release_memory_after_bytes) {
      freed_since_release_ = 0;
      release = true;
    }
  }
  // Freed map nodes and small values stay in the heap's free lists otherwise, and the
  // coordinator's RSS would keep the high-water mark of the store. Outside the lock: trimming
  // walks the heap.
  if (release) {
    if (options_.release_memory) {
      options_.release_memory();
    } else {
      malloc_trim(0);
    }
  }
  return deleted;
}

void CoordinationService::WatchJobState(uint64_t known_version, absl::Duration timeout,
                                        SnapshotCallback done) {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (known_version != version_ || stopped_) {
    out.Add([done = std::move(done), snapshot = SnapshotLocked()]() mutable {
      std::move(done)(std::move(snapshot));
    });
    return;
  }
  const absl::Duration wait = std::clamp(timeout, absl::ZeroDuration(), options_.max_wait);
  watchers_.Add(clock_.Now() + wait, std::move(done));
}

JobSnapshot CoordinationService::Snapshot() {
  absl::MutexLock lock(&mu_);
  return SnapshotLocked();
}

std::optional<base::Incarnation> CoordinationService::NewestIncarnation(int task_id) {
  absl::MutexLock lock(&mu_);
  if (!tasks_.CheckId(task_id).ok()) return std::nullopt;
  const TaskInfo& info = tasks_[task_id].info;
  if (info.state == TaskState::kUnregistered) return std::nullopt;
  return info.incarnation;
}

void CoordinationService::GetAliveTasks(TaskRef ref, std::vector<int> tasks, absl::Duration timeout,
                                        AliveTasksCallback done) {
  Completions out;
  absl::MutexLock lock(&mu_);
  absl::Status status = CheckCallerLocked(ref);
  absl::StatusOr<absl::Duration> resolved =
      ResolveTimeout(timeout, options_.barrier_default_timeout);
  absl::StatusOr<Participants> subset = tasks_.ResolveSubset(std::move(tasks), ref.task_id);
  if (status.ok()) status = resolved.status();
  if (status.ok()) status = subset.status();
  if (!status.ok()) {
    out.Answer(std::move(done), status);
    return;
  }
  alive_.Join(ref, AliveSubset(*subset), clock_.Now() + *resolved, std::move(done), AliveFnLocked(),
              out);
}

absl::StatusOr<std::pair<PreemptionRound, bool>> CoordinationService::NotifyPreemption(
    PreemptionNotice notice) {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (stopped_) return CoordinatorStoppingError();
  for (int task : notice.affected_tasks) {
    if (task < 0 || task >= options_.num_tasks) {
      return absl::InvalidArgumentError(absl::StrCat("affected task ", task, " is out of range"));
    }
  }
  if (notice.deadline == absl::InfiniteFuture()) {
    // A round must end some time, or every later notice would only join it.
    notice.deadline = clock_.Now() + kDefaultPreemptionWindow;
  }
  auto result = sync_.Notify(notice);
  if (!result.second) metrics_.PreemptionRoundOpened();
  BroadcastLocked(result.first, out);
  return result;
}

void CoordinationService::ReportSyncStep(TaskRef ref, uint64_t round, int64_t step,
                                         SyncStepCallback done) {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckCallerLocked(ref); !s.ok()) {
    out.Answer(std::move(done), s);
    return;
  }
  sync_.Report(ref, round, step, std::move(done), AliveFnLocked(), out);
}

absl::StatusOr<double> CoordinationService::ReportRolledBack(TaskRef ref,
                                                             const std::string& recovery,
                                                             absl::Duration rolled_back) {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckCallerLocked(ref); !s.ok()) return s;
  absl::StatusOr<bool> changed = rollbacks_.Report(recovery, rolled_back);
  if (!changed.ok()) return changed.status();
  if (*changed) {
    ++version_;
    AnswerWatchersLocked(out);
  }
  return rollbacks_.total_seconds();
}

absl::Status CoordinationService::ReportStepping(TaskRef ref) {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckCallerLocked(ref); !s.ok()) return s;
  if (stepping_.OnStep(tasks_[ref.task_id].state_version, clock_.Now())) {
    ++version_;
    AnswerWatchersLocked(out);
  }
  return absl::OkStatus();
}

void CoordinationService::Shutdown(TaskRef ref, absl::Duration timeout, StatusCallback done) {
  Completions out;
  absl::MutexLock lock(&mu_);
  absl::Status status = CheckCallerLocked(ref);
  absl::StatusOr<absl::Duration> resolved = ResolveTimeout(timeout, options_.shutdown_timeout);
  if (status.ok()) status = resolved.status();
  if (!status.ok()) {
    out.Answer(std::move(done), status);
    return;
  }
  const absl::Time now = clock_.Now();
  barriers_.ForgetFailure(kShutdownBarrierId);  // a timed-out shutdown may be tried again
  // Mark the tasks shut down before answering, so a task that exits right after its answer
  // never looks like a crash.
  barriers_.Arrive(
      ref, kShutdownBarrierId, tasks_.All(), now + *resolved, now,
      [this, done = std::move(done)](absl::Status s) mutable {
        if (s.ok()) MarkAllShutDown();
        std::move(done)(s);
      },
      out);
}

std::pair<size_t, size_t> CoordinationService::BarrierMemory() {
  absl::MutexLock lock(&mu_);
  return {barriers_.finished_count(), barriers_.finished_bytes()};
}

bool CoordinationService::AllTasksShutDown() {
  absl::MutexLock lock(&mu_);
  return tasks_.AllShutDown();
}

void CoordinationService::MarkAllShutDown() {
  Completions out;
  absl::MutexLock lock(&mu_);
  for (TaskTable::Task& task : tasks_) {
    if (task.info.state != TaskState::kConnected) continue;
    SetStateLocked(task, TaskState::kShutdown, "passed the shutdown barrier", out);
  }
}

void CoordinationService::Tick(absl::Time now) {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  // Failures found by this tick (a mass heartbeat timeout) go out together at its end.
  peer_events_.Hold();
  BeginBatchLocked();
  absl::Duration oldest = absl::ZeroDuration();
  for (TaskTable::Task& task : tasks_) {
    if (task.info.state != TaskState::kConnected) continue;
    const absl::Duration age = now - task.last_seen;
    if (age > options_.heartbeat_timeout) {
      FailTaskLocked(
          task, FailureKind::kHeartbeatTimeout,
          task.outbox == nullptr
              ? absl::StrCat("no session opened within ",
                             absl::FormatDuration(options_.heartbeat_timeout))
              : absl::StrCat("heartbeat timeout: none for ",
                             absl::FormatDuration(absl::Trunc(age, absl::Milliseconds(1)))),
          out);
    } else {
      oldest = std::max(oldest, age);
    }
  }
  metrics_.SetMaxHeartbeatAge(oldest);
  EndBatchLocked(out);
  barriers_.Expire(
      now, [this](int task) ABSL_NO_THREAD_SAFETY_ANALYSIS { return tasks_.Describe(task); }, out);
  kv_.Expire(now, out);
  alive_.Expire(now, out);
  sync_.Expire(now, AliveFnLocked(), out);
  ExpireSparesLocked(now, out);
  watchers_.Expire(
      now, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return SnapshotLocked(); }, out);
  FlushPeerEventsLocked(out);
  peer_events_.EndTick();
}

void CoordinationService::Stop() {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  stopped_ = true;
  // Unavailable, not Cancelled: the caller did nothing wrong and the call succeeds when retried
  // on the coordinator's successor (the code gRPC itself uses for a server going away). A
  // Cancelled here once failed a job whose coordinator pod was evicted: the worker took it as
  // "a peer cancelled the barrier" and exited 1.
  const absl::Status stopping = CoordinatorStoppingError();
  barriers_.FailAll(stopping, out);
  kv_.FailAll(stopping, out);
  alive_.FailAll(stopping, out);
  sync_.FailAll(stopping, out);
  spares_.FailAll(stopping, out);
  AnswerWatchersLocked(out);
  for (TaskTable::Task& task : tasks_) {
    std::shared_ptr<SessionOutbox> outbox = tasks_.Detach(task);
    if (outbox == nullptr) continue;
    outbox->Close(stopping);
    out.Add([outbox] { outbox->Notify(); });
  }
}

absl::Status CoordinationService::CheckCallerLocked(TaskRef ref) const {
  if (stopped_) return CoordinatorStoppingError();
  return tasks_.CheckCaller(ref);
}

absl::StatusOr<absl::Duration> CoordinationService::ResolveTimeout(absl::Duration timeout,
                                                                   absl::Duration fallback) const {
  if (timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout must not be negative, got ", absl::FormatDuration(timeout)));
  }
  if (timeout == absl::ZeroDuration()) timeout = fallback;
  return std::min(timeout, options_.max_wait);
}

AliveTasksAgreement::AliveFn CoordinationService::AliveFnLocked() const {
  // Only ever called (and the function only used) while mu_ is held.
  return [this](int task_id)
             ABSL_NO_THREAD_SAFETY_ANALYSIS { return tasks_.AliveIncarnation(task_id); };
}

void CoordinationService::SetStateLocked(TaskTable::Task& task, TaskState state, std::string reason,
                                         Completions& out) {
  const TaskState previous = task.info.state;
  tasks_.SetState(task, state);
  task.info.reason = std::move(reason);
  task.info.changed = clock_.Now();
  task.state_version = ++version_;
  // Peers hear of failures and restarts, the changes they must act on. A first registration
  // or a clean shutdown is not pushed to every session: at 1024 tasks that would be a million
  // events during start-up; watchers (WatchJobState) still see every change.
  if (previous != TaskState::kUnregistered && state != TaskState::kShutdown) {
    TellPeersLocked(task.info, out);
  }
  if (batching_) {
    batch_changed_ = true;  // EndBatchLocked does the rest once for the whole batch
    return;
  }
  MembershipChangedLocked(out);
}

void CoordinationService::BeginBatchLocked() { batching_ = true; }

void CoordinationService::EndBatchLocked(Completions& out) {
  batching_ = false;
  if (batch_changed_) MembershipChangedLocked(out);
  batch_changed_ = false;
}

void CoordinationService::MembershipChangedLocked(Completions& out) {
  // Agreements waiting on a task that changed may now complete.
  alive_.Reevaluate(AliveFnLocked(), out);
  sync_.Reevaluate(AliveFnLocked(), out);
  AnswerWatchersLocked(out);
  UpdateGaugesLocked();
}

void CoordinationService::AnswerWatchersLocked(Completions& out) {
  // The lambda runs at once, under this function's lock.
  watchers_.AnswerAll([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return SnapshotLocked(); }, out);
}

void CoordinationService::FailTaskLocked(TaskTable::Task& task, FailureKind kind,
                                         std::string reason, Completions& out,
                                         bool spare_may_take_over) {
  if (task.info.state != TaskState::kConnected) return;
  metrics_.TaskFailed(kind);
  RetireIncarnationLocked(
      task,
      absl::AbortedError(absl::StrCat("task ", task.info.task_id, " incarnation ",
                                      task.info.incarnation, " was declared failed: ", reason)),
      out);
  FailPeerWaitsLocked({task.info.task_id, task.info.incarnation}, reason, out);
  stepping_.OnFailure(version_, task.last_seen);  // before the watchers hear of the failure
  // Before the state changes: the snapshot that tells the watchers (the operator) of the
  // failure already names the spare that took the task over.
  if (spare_may_take_over) TakeOverLocked(task.info.task_id, task.info.incarnation + 1, out);
  SetStateLocked(task, TaskState::kFailed, std::move(reason), out);
}

bool CoordinationService::TakeOverLocked(int task, base::Incarnation incarnation,
                                         Completions& out) {
  std::optional<std::string> pod = spares_.TakeOver(task, incarnation, clock_.Now(), out);
  if (!pod.has_value()) return false;
  metrics_.SpareTookOver();
  PHX_LOG(INFO) << "spare " << *pod << " takes over task " << task << " as incarnation "
                << incarnation;
  return true;
}

void CoordinationService::ExpireSparesLocked(absl::Time now, Completions& out) {
  bool changed = spares_.Expire(now, out);
  // A spare that died while it waited was given a task it never registered as: the task's next
  // incarnation goes to the next spare (a new pod, if none waits: the operator's replacement).
  for (const SpareInfo& lost : spares_.Unclaimed(now - options_.heartbeat_timeout)) {
    TaskTable::Task& task = tasks_[lost.task_id];
    // Only while the task is still down at the incarnation before the lost one: anything else
    // (a replacement the operator made registered, healthy or not) is not the spare's to fix.
    if (task.info.state == TaskState::kConnected || task.info.incarnation + 1 != lost.incarnation) {
      continue;
    }
    PHX_LOG(WARNING) << "spare " << lost.pod << " did not register as task " << lost.task_id
                     << " within " << options_.heartbeat_timeout << "; handing the task on";
    changed |= TakeOverLocked(lost.task_id, lost.incarnation + 1, out);
  }
  if (changed) {
    ++version_;
    AnswerWatchersLocked(out);
    metrics_.SetSparesWaiting(spares_.waiting_count());
  }
}

void CoordinationService::AwaitAssignment(int slot, std::string pod, absl::Duration timeout,
                                          SpareAnswer done) {
  Completions out;
  absl::MutexLock lock(&mu_);
  if (stopped_)
    return out.Answer(std::move(done),
                      absl::StatusOr<std::optional<SpareAssignment>>(CoordinatorStoppingError()));
  absl::StatusOr<absl::Duration> resolved = ResolveTimeout(timeout, kDefaultSpareWait);
  if (!resolved.ok()) {
    return out.Answer(std::move(done),
                      absl::StatusOr<std::optional<SpareAssignment>>(resolved.status()));
  }
  const absl::Time now = clock_.Now();
  // Only a spare that starts waiting changes anything (a poll of one already waiting does not);
  // its gauge alone, not UpdateGaugesLocked's count over every task.
  if (spares_.Await(pod, slot, now, now + *resolved, std::move(done), out)) {
    ++version_;
    AnswerWatchersLocked(out);
    metrics_.SetSparesWaiting(spares_.waiting_count());
  }
}

absl::Status CoordinationService::PeerFailedError(TaskRef failed, const std::string& reason) {
  pb::ErrorDetails details;
  details.set_reason(pb::ErrorDetails::PEER_FAILED);
  *details.add_failed_tasks() = ToProto(failed);
  details.set_failure_reason(reason);
  return WithDetails(
      absl::CancelledError(absl::StrCat("peer task ", failed.task_id, " (incarnation ",
                                        failed.incarnation, ") failed: ", reason)),
      details);
}

void CoordinationService::FailPeerWaitsLocked(TaskRef failed, const std::string& reason,
                                              Completions& out) {
  const absl::Status why = PeerFailedError(failed, reason);
  barriers_.FailParticipant(failed.task_id, why, clock_.Now(), out);
  kv_.FailTaskWaits(why, out);
}

void CoordinationService::RetireIncarnationLocked(TaskTable::Task& task, const absl::Status& why,
                                                  Completions& out) {
  const TaskRef gone{task.info.task_id, task.info.incarnation};
  if (std::shared_ptr<SessionOutbox> outbox = tasks_.Detach(task); outbox != nullptr) {
    outbox->Close(why);
    out.Add([outbox] { outbox->Notify(); });
  }
  barriers_.DropTask(gone, why, out);
  kv_.DropTask(gone, why, out);
  alive_.DropTask(gone, why, out);
  sync_.DropTask(gone, why, out);
}

void CoordinationService::PushLocked(TaskTable::Task& task, SessionEvent event, Completions& out) {
  if (task.outbox == nullptr) return;
  task.outbox->Push(std::move(event));
  out.Add([o = task.outbox] { o->Notify(); });
}

void CoordinationService::BroadcastLocked(const SessionEvent& event, Completions& out) {
  // Held peer events happened first: keep that order on every stream.
  FlushPeerEventsLocked(out);
  for (TaskTable::Task& task : tasks_) PushLocked(task, event, out);
}

void CoordinationService::TellPeersLocked(SessionEvent event, Completions& out) {
  peer_events_.Add(std::move(event));
  if (!peer_events_.holding()) FlushPeerEventsLocked(out);
}

void CoordinationService::FlushPeerEventsLocked(Completions& out) {
  std::shared_ptr<const PeerBatch> batch = peer_events_.Take();
  if (batch == nullptr) return;
  for (TaskTable::Task& task : tasks_) {
    if (task.outbox == nullptr) continue;
    task.outbox->PushShared(batch);
    out.Add([o = task.outbox] { o->Notify(); });
  }
}

JobSnapshot CoordinationService::SnapshotLocked() const {
  return JobSnapshot{options_.job,
                     version_,
                     tasks_.Infos(),
                     options_.coordinator_id,
                     rollbacks_.total_seconds(),
                     stepping_.state(),
                     spares_.Infos()};
}

void CoordinationService::UpdateGaugesLocked() {
  metrics_.SetTaskCounts(tasks_.registered(), tasks_.CountIn(TaskState::kConnected));
  metrics_.SetSparesWaiting(spares_.waiting_count());
}

}  // namespace phalanx::coord
