#include "runtime/clique/clique_manager.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/log.h"

namespace phalanx::clique {
namespace {

std::string ExchangeKey(const CliqueKey& key, int attempt) {
  return absl::StrCat(key.KvPrefix(), "/id", attempt);
}

// Fetch results that mean "not published yet": keep polling until the deadline.
bool NotYet(const absl::Status& s) {
  return absl::IsNotFound(s) || absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s);
}

absl::Status Annotate(const absl::Status& s, absl::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace

const char* CliqueStateName(CliqueState state) {
  switch (state) {
    case CliqueState::kForming:
      return "FORMING";
    case CliqueState::kReady:
      return "READY";
    case CliqueState::kAborting:
      return "ABORTING";
    case CliqueState::kWaiting:
      return "WAITING";
    case CliqueState::kShrinking:
      return "SHRINKING";
    case CliqueState::kReforming:
      return "REFORMING";
    case CliqueState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

// Work collected under mu_ and done after releasing it.
struct CliqueManager::Outbox {
  struct Publish {
    CliqueId id;
    uint64_t generation;
    std::string key;
    NcclUniqueId unique_id;
  };
  struct Notification {
    CliqueInfo info;
    CliqueState old_state;
    CliqueState new_state;
    absl::Status status;
  };
  std::vector<Publish> publishes;
  std::vector<Notification> notifications;
};

CliqueManager::CliqueManager(NcclApi& nccl, UniqueIdExchange& exchange, base::Clock& clock,
                             Options options)
    : nccl_(nccl), exchange_(exchange), clock_(clock), options_(std::move(options)) {}

CliqueManager::~CliqueManager() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, e] : entries_) AbortCommsLocked(e);
}

CliqueInfo CliqueManager::InfoLocked(const Entry& e) const {
  return CliqueInfo{e.id, e.key, e.rank, e.state, e.status, e.comm, e.attempt};
}

void CliqueManager::SetStateLocked(Entry& e, CliqueState state, absl::Status status, Outbox& out) {
  CliqueState old = e.state;
  if (old == state && status == e.status) return;  // e.g. a new clique entering FORMING
  e.state = state;
  e.status = std::move(status);
  out.notifications.push_back({InfoLocked(e), old, state, e.status});
}

void CliqueManager::AbortCommsLocked(Entry& e) {
  for (CommHandle* comm : {&e.comm, &e.old_comm}) {
    if (!comm->valid()) continue;
    if (absl::Status s = nccl_.CommAbort(*comm); !s.ok()) {
      PHX_LOG(WARNING) << "clique " << e.key.ToString() << ": ncclCommAbort: " << s;
    }
    ++counters_.aborts;
    *comm = CommHandle{};
  }
  e.old_comm_revoked = false;
  e.awaiting_id = false;
  e.next = Next::kNone;
  ++e.generation;
}

void CliqueManager::StartInitLocked(Entry& e, CliqueState state, absl::Time deadline,
                                    absl::Status why, absl::Time now, Outbox& out) {
  ++e.generation;
  e.deadline = deadline;
  e.awaiting_id = false;
  e.next = Next::kNone;
  SetStateLocked(e, state, std::move(why), out);
  if (e.rank != 0) {
    e.awaiting_id = true;
    return;
  }
  absl::StatusOr<NcclUniqueId> id = nccl_.GetUniqueId();
  if (!id.ok()) {
    FailAttemptLocked(e, Annotate(id.status(), "ncclGetUniqueId: "), now, out);
    return;
  }
  out.publishes.push_back({e.id, e.generation, ExchangeKey(e.key, e.attempt), *id});
  StartCommInitLocked(e, *id, now, out);
}

void CliqueManager::StartCommInitLocked(Entry& e, const NcclUniqueId& id, absl::Time now,
                                        Outbox& out) {
  absl::StatusOr<CommHandle> comm =
      nccl_.CommInitRank(e.key.num_ranks(), id, e.rank, e.cuda_device);
  if (!comm.ok()) {
    FailAttemptLocked(e, Annotate(comm.status(), "ncclCommInitRankConfig: "), now, out);
    return;
  }
  e.comm = *comm;
}

void CliqueManager::FailAttemptLocked(Entry& e, absl::Status why, absl::Time now, Outbox& out) {
  AbortCommsLocked(e);
  why = Annotate(why,
                 absl::StrCat("clique ", e.key.ToString(), " rank ", e.rank, "/", e.key.num_ranks(),
                              " attempt ", e.attempt + 1, "/", options_.max_init_attempts, ": "));
  if (e.attempt + 1 < options_.max_init_attempts) {
    ++e.attempt;
    CliqueState retry =
        e.state == CliqueState::kForming ? CliqueState::kForming : CliqueState::kReforming;
    StartInitLocked(e, retry, now + options_.reform_timeout, std::move(why), now, out);
    return;
  }
  SetStateLocked(e, CliqueState::kFailed, std::move(why), out);
}

absl::StatusOr<CliqueId> CliqueManager::Acquire(const CliqueKey& key, int my_rank,
                                                absl::Time deadline, int cuda_device) {
  std::optional<std::pair<int, int>> owner = key.RankOwner(my_rank);
  if (!owner) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", my_rank, " is not in clique ", key.ToString(), " of ", key.num_ranks(), " ranks"));
  }
  Outbox out;
  CliqueId id = 0;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_.Now();
    Entry* entry = nullptr;
    for (auto& [unused, e] : entries_) {
      if (e.key == key && e.rank == my_rank) entry = &e;
    }
    if (entry != nullptr && entry->state != CliqueState::kFailed) {
      return absl::AlreadyExistsError(absl::StrCat("clique ", key.ToString(), " rank ", my_rank,
                                                   " is held (", CliqueStateName(entry->state),
                                                   ")"));
    }
    if (entry != nullptr) {
      ++entry->attempt;  // a new unique-id key; the other ranks acquire again too
    } else {
      id = next_id_++;
      entry = &entries_[id];
      entry->id = id;
      entry->key = key;
      entry->task_id = owner->first;
      entry->device_id = owner->second;
      entry->rank = my_rank;
    }
    entry->cuda_device = cuda_device;
    id = entry->id;
    StartInitLocked(*entry, CliqueState::kForming, deadline, absl::OkStatus(), now, out);
  }
  Flush(out);
  return id;
}

void CliqueManager::Poll(absl::Time now) {
  struct Fetch {
    CliqueId id;
    uint64_t generation;
    std::string key;
    absl::StatusOr<NcclUniqueId> result;
  };
  std::vector<Fetch> fetches;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, e] : entries_) {
      if (e.awaiting_id) {
        fetches.push_back(
            {id, e.generation, ExchangeKey(e.key, e.attempt), absl::UnknownError("")});
      }
    }
  }
  for (Fetch& f : fetches) f.result = exchange_.Fetch(f.key, absl::ZeroDuration());

  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    for (Fetch& f : fetches) {
      auto it = entries_.find(f.id);
      if (it == entries_.end() || it->second.generation != f.generation) continue;
      Entry& e = it->second;
      if (f.result.ok()) {
        e.awaiting_id = false;
        StartCommInitLocked(e, *f.result, now, out);
      } else if (!NotYet(f.result.status())) {
        FailAttemptLocked(e, Annotate(f.result.status(), "fetching the unique id: "), now, out);
      }
    }
    for (auto& [id, e] : entries_) AdvanceLocked(e, now, out);
  }
  Flush(out);
}

void CliqueManager::AdvanceLocked(Entry& e, absl::Time now, Outbox& out) {
  switch (e.state) {
    case CliqueState::kForming:
    case CliqueState::kReforming:
    case CliqueState::kShrinking: {
      if (e.comm.valid()) {
        absl::StatusOr<CommProgress> progress = nccl_.CommGetAsyncError(e.comm);
        if (!progress.ok()) {
          ++counters_.async_errors;
          FailAttemptLocked(e, Annotate(progress.status(), "init failed: "), now, out);
          return;
        }
        if (*progress == CommProgress::kReady) {
          if (e.old_comm.valid()) {  // the shrink's parent
            absl::Status s =
                e.old_comm_revoked ? nccl_.CommDestroy(e.old_comm) : nccl_.CommAbort(e.old_comm);
            if (!s.ok())
              PHX_LOG(WARNING) << "clique " << e.key.ToString() << ": freeing parent: " << s;
            e.old_comm = CommHandle{};
            e.old_comm_revoked = false;
          }
          if (e.state != CliqueState::kForming) ++counters_.reforms;
          if (e.state == CliqueState::kShrinking) ++counters_.shrinks;
          SetStateLocked(e, CliqueState::kReady, absl::OkStatus(), out);
          return;
        }
      }
      if (now >= e.deadline) {
        ++counters_.init_timeouts;
        FailAttemptLocked(
            e,
            absl::DeadlineExceededError(absl::StrCat(
                "not formed by its deadline ", absl::FormatTime(e.deadline), "; ",
                e.awaiting_id ? absl::StrCat("rank 0 never published the unique id under ",
                                             ExchangeKey(e.key, e.attempt))
                              : "NCCL init still in progress (a peer never joined?)")),
            now, out);
      }
      return;
    }
    case CliqueState::kAborting: {
      absl::StatusOr<CommProgress> progress = nccl_.CommGetAsyncError(e.old_comm);
      bool expired = progress.ok() && *progress == CommProgress::kInProgress && now >= e.deadline;
      if (!progress.ok() || expired) {
        // Revoke failed or never quiesced: abort it; a shrink needs a quiescent parent.
        if (absl::Status s = nccl_.CommAbort(e.old_comm); !s.ok()) {
          PHX_LOG(WARNING) << "clique " << e.key.ToString() << ": ncclCommAbort: " << s;
        }
        e.old_comm = CommHandle{};
        e.old_comm_revoked = false;
        if (e.next == Next::kShrink) e.next = Next::kReinit;
      }
      if (!progress.ok() || expired || *progress == CommProgress::kReady) {
        AfterTeardownLocked(e, now, out);
      }
      return;
    }
    case CliqueState::kReady: {
      absl::StatusOr<CommProgress> progress = nccl_.CommGetAsyncError(e.comm);
      if (progress.ok()) return;
      ++counters_.async_errors;
      absl::Status why = Annotate(
          progress.status(), absl::StrCat("clique ", e.key.ToString(), " rank ", e.rank, ": "));
      AbortCommsLocked(e);
      SetStateLocked(e, CliqueState::kFailed, std::move(why), out);
      return;
    }
    case CliqueState::kWaiting:
    case CliqueState::kFailed:
      return;
  }
}

void CliqueManager::AfterTeardownLocked(Entry& e, absl::Time now, Outbox& out) {
  Next next = e.next;
  e.next = Next::kNone;
  if (next == Next::kShrink) {
    absl::StatusOr<CommHandle> child =
        nccl_.CommShrink(e.old_comm, e.shrink_excluded, /*abort_in_flight=*/false);
    if (child.ok()) {
      e.comm = *child;
      ++e.generation;
      e.deadline = now + options_.reform_timeout;
      SetStateLocked(e, CliqueState::kShrinking, e.status, out);
      return;
    }
    PHX_LOG(WARNING) << "clique " << e.key.ToString() << ": ncclCommShrink: " << child.status()
                     << "; re-forming with a fresh init";
    next = Next::kReinit;
  }
  if (e.old_comm.valid()) {  // revoked and quiescent
    if (absl::Status s = nccl_.CommDestroy(e.old_comm); !s.ok()) {
      PHX_LOG(WARNING) << "clique " << e.key.ToString() << ": ncclCommDestroy: " << s;
    }
    e.old_comm = CommHandle{};
    e.old_comm_revoked = false;
  }
  if (next == Next::kWait) {
    SetStateLocked(e, CliqueState::kWaiting, e.status, out);
  } else {
    StartInitLocked(e, CliqueState::kReforming, now + options_.reform_timeout, e.status, now, out);
  }
}

void CliqueManager::OnMembershipChange(absl::Span<const MemberStatus> members) {
  std::map<int, MemberStatus> by_task;
  for (const MemberStatus& m : members) by_task[m.task_id] = m;
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_.Now();
    for (auto& [id, e] : entries_) ApplyMembershipLocked(e, by_task, now, out);
  }
  Flush(out);
}

void CliqueManager::ApplyMembershipLocked(Entry& e, const std::map<int, MemberStatus>& members,
                                          absl::Time now, Outbox& out) {
  MembershipDiff diff = DiffMembership(e.key, e.task_id, members);
  if (diff.unchanged() && e.state != CliqueState::kWaiting) return;  // nothing touches it
  if (diff.down && e.state == CliqueState::kWaiting) return;         // still waiting
  if (diff.unchanged()) diff.changes.push_back("every member is back");

  absl::Status why = absl::AbortedError(
      absl::StrCat("clique ", e.key.ToString(), ": ", absl::StrJoin(diff.changes, ", ")));
  if (diff.self_changed) {
    AbortCommsLocked(e);
    SetStateLocked(e, CliqueState::kFailed, Annotate(why, "this task is no longer that member: "),
                   out);
    return;
  }

  Next next = Next::kReinit;
  if (diff.down) {
    next = Next::kWait;
  } else if (!diff.excluded_ranks.empty() && !diff.restarted && e.state == CliqueState::kReady &&
             nccl_.SupportsShrink()) {
    next = Next::kShrink;
  }
  // The key to re-form with (a WAITING clique keeps its old key until every member is back).
  if (next != Next::kWait) {
    absl::StatusOr<CliqueKey> new_key = CliqueKey::Create(e.key.job(), std::move(diff.survivors));
    if (!new_key.ok()) {  // impossible: this task is still a member
      AbortCommsLocked(e);
      SetStateLocked(e, CliqueState::kFailed, new_key.status(), out);
      return;
    }
    if (*new_key == e.key) {
      ++e.attempt;  // same key, so a new unique-id key
    } else {
      e.key = *std::move(new_key);
      e.attempt = 0;
    }
    e.rank = *e.key.RankOf(e.task_id, e.device_id);
  }

  const bool was_ready = e.state == CliqueState::kReady;
  if (was_ready && nccl_.SupportsRevoke()) {
    absl::Status revoked = nccl_.CommRevoke(e.comm);
    if (revoked.ok()) {
      ++counters_.aborts;
      e.old_comm = e.comm;
      e.comm = CommHandle{};
      e.old_comm_revoked = true;
      e.next = next;
      e.shrink_excluded = diff.excluded_ranks;
      e.deadline = now + options_.reform_timeout;
      ++e.generation;
      SetStateLocked(e, CliqueState::kAborting, std::move(why), out);
      return;
    }
    PHX_LOG(WARNING) << "clique " << e.key.ToString() << ": ncclCommRevoke: " << revoked
                     << "; aborting instead";
  }
  if (was_ready && next == Next::kShrink) {
    // No revoke: NCCL_SHRINK_ABORT stops the parent's in-flight work as part of the shrink.
    absl::StatusOr<CommHandle> child =
        nccl_.CommShrink(e.comm, diff.excluded_ranks, /*abort_in_flight=*/true);
    if (child.ok()) {
      ++counters_.aborts;
      e.old_comm = e.comm;
      e.old_comm_revoked = false;
      e.comm = *child;
      e.deadline = now + options_.reform_timeout;
      ++e.generation;
      SetStateLocked(e, CliqueState::kShrinking, std::move(why), out);
      return;
    }
    PHX_LOG(WARNING) << "clique " << e.key.ToString() << ": ncclCommShrink: " << child.status()
                     << "; re-forming with a fresh init";
    next = Next::kReinit;
  }
  AbortCommsLocked(e);
  if (next == Next::kWait) {
    SetStateLocked(e, CliqueState::kWaiting, std::move(why), out);
  } else {
    StartInitLocked(e, CliqueState::kReforming, now + options_.reform_timeout, std::move(why), now,
                    out);
  }
}

absl::Status CliqueManager::Abort(CliqueId id, absl::Status why) {
  Outbox out;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("no clique ", id));
    Entry& e = it->second;
    if (e.state == CliqueState::kFailed) return absl::OkStatus();
    AbortCommsLocked(e);
    SetStateLocked(e, CliqueState::kFailed, std::move(why), out);
  }
  Flush(out);
  return absl::OkStatus();
}

absl::Status CliqueManager::Release(CliqueId id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("no clique ", id));
  Entry& e = it->second;
  if (e.state == CliqueState::kReady) {
    if (absl::Status s = nccl_.CommDestroy(e.comm); !s.ok()) {
      PHX_LOG(WARNING) << "clique " << e.key.ToString() << ": ncclCommDestroy: " << s;
    }
    e.comm = CommHandle{};
  }
  AbortCommsLocked(e);
  entries_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<CliqueInfo> CliqueManager::Get(CliqueId id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("no clique ", id));
  return InfoLocked(it->second);
}

absl::StatusOr<CommHandle> CliqueManager::Comm(CliqueId id) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return absl::NotFoundError(absl::StrCat("no clique ", id));
  const Entry& e = it->second;
  if (e.state != CliqueState::kReady) {
    return absl::FailedPreconditionError(
        absl::StrCat("clique ", e.key.ToString(), " is ", CliqueStateName(e.state),
                     e.status.ok() ? "" : absl::StrCat(": ", e.status.ToString())));
  }
  return e.comm;
}

std::vector<CliqueInfo> CliqueManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<CliqueInfo> all;
  for (const auto& [id, e] : entries_) all.push_back(InfoLocked(e));
  return all;
}

CliqueCounters CliqueManager::counters() const {
  absl::MutexLock lock(&mu_);
  CliqueCounters c = counters_;
  for (CliqueState s :
       {CliqueState::kForming, CliqueState::kReady, CliqueState::kAborting, CliqueState::kWaiting,
        CliqueState::kShrinking, CliqueState::kReforming, CliqueState::kFailed}) {
    c.cliques_by_state[s] = 0;
  }
  for (const auto& [id, e] : entries_) ++c.cliques_by_state[e.state];
  return c;
}

void CliqueManager::Flush(Outbox& out) {
  while (!out.publishes.empty()) {
    std::vector<Outbox::Publish> publishes = std::move(out.publishes);
    out.publishes.clear();
    std::vector<std::pair<Outbox::Publish, absl::Status>> failed;
    for (Outbox::Publish& p : publishes) {
      absl::Status s = exchange_.Publish(p.key, p.unique_id);
      if (!s.ok()) failed.emplace_back(std::move(p), std::move(s));
    }
    if (failed.empty()) break;
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_.Now();
    for (auto& [p, s] : failed) {
      auto it = entries_.find(p.id);
      if (it == entries_.end() || it->second.generation != p.generation) continue;
      FailAttemptLocked(it->second,
                        Annotate(s, absl::StrCat("publishing the unique id under ", p.key, ": ")),
                        now, out);
    }
  }
  for (Outbox::Notification& n : out.notifications) {
    PHX_LOG(INFO) << "clique " << n.info.key.ToString() << " rank " << n.info.rank << ": "
                  << CliqueStateName(n.old_state) << " -> " << CliqueStateName(n.new_state)
                  << (n.status.ok() ? "" : absl::StrCat(" (", n.status.ToString(), ")"));
    if (options_.on_state_change) {
      options_.on_state_change(n.info, n.old_state, n.new_state, n.status);
    }
  }
}

}  // namespace phalanx::clique
