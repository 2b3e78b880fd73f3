#include "runtime/coordination/barrier_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/coordination/error_details.h"

namespace phalanx::coord {

namespace {

size_t ResultBytes(const std::string& id, const absl::Status& result) {
  return id.size() + result.message().size();
}

absl::Status ForBarrier(const std::string& id, const absl::Status& why) {
  absl::Status out = WithContext(why, absl::StrCat("barrier '", id, "' failed: "));
  if (std::optional<pb::ErrorDetails> details = DetailsOf(out)) {
    details->set_barrier_id(id);
    out = WithDetails(std::move(out), *details);
  }
  return out;
}

}  // namespace

absl::Status BarrierTable::ValidateId(const std::string& id) const {
  if (id.empty()) return absl::InvalidArgumentError("barrier id is empty");
  if (id.size() > limits_.max_id_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("barrier id is ", id.size(),
                                                   " bytes; the limit is ", limits_.max_id_bytes,
                                                   " (--barrier_max_id_bytes)"));
  }
  return absl::OkStatus();
}

void BarrierTable::Arrive(TaskRef task, const std::string& id, Participants participants,
                          absl::Time deadline, absl::Time now, StatusCallback done,
                          Completions& out) {
  if (auto it = finished_.find(id); it != finished_.end()) {
    out.Add([done = std::move(done), result = it->second.result]() mutable {
      std::move(done)(result);
    });
    return;
  }
  // The service's own barriers (ids starting with a space: the shutdown barrier) are exempt, so
  // a full table can never keep a job from shutting down.
  if (pending_.size() >= limits_.max_pending && id.front() != ' ' && !pending_.contains(id)) {
    out.Add([done = std::move(done), n = pending_.size(), max = limits_.max_pending]() mutable {
      std::move(done)(absl::ResourceExhaustedError(
          absl::StrCat("too many barriers waiting: ", n, " of ", max,
                       " pending barriers (--barrier_max_pending); finish or cancel some first")));
    });
    return;
  }
  // Each waiting arrival holds a call; one token holder acting as every task could otherwise
  // pin max_pending × tasks of them. An arrival that completes its barrier frees memory: allowed.
  if (auto existing = pending_.find(id);
      waiting_ >= limits_.max_waiting && id.front() != ' ' &&
      (existing == pending_.end() ||
       (!existing->second.arrivals.contains(task.task_id) &&
        existing->second.arrivals.size() + 1 < existing->second.participants.size()))) {
    out.Add([done = std::move(done), n = waiting_, max = limits_.max_waiting]() mutable {
      std::move(done)(absl::ResourceExhaustedError(
          absl::StrCat("too many barrier arrivals waiting: ", n, " of ", max,
                       " (--barrier_max_waiting); finish or cancel some barriers first")));
    });
    return;
  }
  auto [it, created] = pending_.try_emplace(id);
  Pending& barrier = it->second;
  if (created) {
    barrier.participants = std::move(participants);
    barrier.deadline = deadline;
  } else if (barrier.participants != participants) {
    out.Add([done = std::move(done), id]() mutable {
      std::move(done)(absl::InvalidArgumentError(
          absl::StrCat("barrier '", id, "' is already pending with a different set of tasks")));
    });
    return;
  }
  auto [arrival, fresh] = barrier.arrivals.try_emplace(task.task_id);
  if (fresh) ++waiting_;
  if (!fresh) {
    // A retry of the same wait (the client's first RPC died): the newer call takes over.
    out.Add([old = std::move(arrival->second.done)]() mutable {
      std::move(old)(absl::CancelledError("superseded by a newer arrival of the same task"));
    });
  }
  arrival->second = Arrival{task.incarnation, now, std::move(done)};
  if (barrier.arrivals.size() == barrier.participants.size()) {
    Finish(id, barrier, absl::OkStatus(), now, out);
    pending_.erase(it);
  }
}

absl::Status BarrierTable::Cancel(TaskRef by, const std::string& id, Completions& out) {
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    return absl::NotFoundError(absl::StrCat("no pending barrier '", id, "'"));
  }
  Finish(id, it->second,
         absl::CancelledError(absl::StrCat("barrier '", id, "' cancelled by task ", by.task_id)),
         absl::InfinitePast(), out);
  pending_.erase(it);
  return absl::OkStatus();
}

void BarrierTable::DropTask(TaskRef gone, const absl::Status& why, Completions& out) {
  for (auto& [id, barrier] : pending_) {
    auto arrival = barrier.arrivals.find(gone.task_id);
    if (arrival == barrier.arrivals.end() || arrival->second.incarnation != gone.incarnation) {
      continue;
    }
    out.Answer(std::move(arrival->second.done), why);
    barrier.arrivals.erase(arrival);
    --waiting_;
  }
}

void BarrierTable::FailParticipant(int task_id, const absl::Status& why, absl::Time now,
                                   Completions& out) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->first.front() == ' ' || !it->second.participants.Contains(task_id)) {
      ++it;
      continue;
    }
    Finish(it->first, it->second, ForBarrier(it->first, why), now, out);
    it = pending_.erase(it);
  }
}

void BarrierTable::FailNow(const std::string& id, const absl::Status& why, absl::Time now,
                           StatusCallback done, Completions& out) {
  absl::Status result = ForBarrier(id, why);
  if (auto finished = finished_.find(id); finished != finished_.end()) {
    result = finished->second.result;
  } else if (auto pending = pending_.find(id); pending != pending_.end()) {
    Finish(id, pending->second, result, now, out);
    pending_.erase(pending);
  } else {
    Remember(id, result);
  }
  out.Answer(std::move(done), result);
}

void BarrierTable::Expire(absl::Time now, const DescribeTask& describe, Completions& out) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& barrier = it->second;
    if (barrier.deadline > now) {
      ++it;
      continue;
    }
    std::vector<std::string> missing;
    pb::ErrorDetails details;
    details.set_reason(pb::ErrorDetails::BARRIER_TIMED_OUT);
    details.set_barrier_id(it->first);
    barrier.participants.ForEach([&](int task) {
      if (barrier.arrivals.contains(task)) return;
      missing.push_back(describe(task));
      details.add_missing_task_ids(task);
    });
    metrics_.BarrierTimedOut();
    Finish(it->first, barrier,
           WithDetails(absl::DeadlineExceededError(
                           absl::StrCat("barrier '", it->first, "' timed out; tasks that never ",
                                        "arrived: ", absl::StrJoin(missing, ", "))),
                       details),
           now, out);
    it = pending_.erase(it);
  }
}

void BarrierTable::FailAll(const absl::Status& why, Completions& out) {
  for (auto& [id, barrier] : pending_) {
    for (auto& [task, arrival] : barrier.arrivals) {
      out.Answer(std::move(arrival.done), why);
    }
  }
  pending_.clear();
  waiting_ = 0;
}

void BarrierTable::ForgetFailure(const std::string& id) {
  auto it = finished_.find(id);
  if (it != finished_.end() && !it->second.result.ok()) EraseFinished(id);
}

void BarrierTable::EraseFinished(const std::string& id) {
  auto it = finished_.find(id);
  if (it == finished_.end()) return;
  finished_bytes_ -= ResultBytes(id, it->second.result);
  finished_.erase(it);
}

void BarrierTable::Finish(const std::string& id, Pending& barrier, const absl::Status& result,
                          absl::Time now, Completions& out) {
  waiting_ -= barrier.arrivals.size();
  for (auto& [task, arrival] : barrier.arrivals) {
    if (result.ok()) metrics_.BarrierWait(now - arrival.arrived);
    out.Answer(std::move(arrival.done), result);
  }
  Remember(id, result);
}

void BarrierTable::Remember(const std::string& id, absl::Status result) {
  EraseFinished(id);
  finished_bytes_ += ResultBytes(id, result);
  const uint64_t seq = next_seq_++;
  finished_.insert_or_assign(id, Finished{std::move(result), seq});
  finished_order_.emplace_back(id, seq);
  // Oldest results go first; stale order entries (forgotten ids) count against the cap too, so
  // the deque stays bounded as well.
  while (!finished_order_.empty() && (finished_order_.size() > limits_.max_finished ||
                                      finished_bytes_ > limits_.max_finished_bytes)) {
    const auto& [old_id, old_seq] = finished_order_.front();
    if (auto it = finished_.find(old_id); it != finished_.end() && it->second.seq == old_seq) {
      EraseFinished(old_id);
    }
    finished_order_.pop_front();
  }
}

}  // namespace phalanx::coord
