// PreemptionSync: turns a preemption notice into one step at which every task checkpoints.
//
//            Notify                         every alive task reported its step
//   IDLE ─────────────▶ COLLECTING ─────────────────────────────────────▶ AGREED(sync_step)
//                          │  deadline passed                       │ deadline passed, or
//                          ▼                                        ▼ Notify (→ a new round)
//                        IDLE (waiters: DeadlineExceeded, names missing)    IDLE
//
// A notice while a round is collecting joins it (the earlier deadline wins); a notice after
// agreement opens the next round. A notice without a deadline gets a default window. Each task
// reports the step it is about to run; the sync step is the largest reported step, which every task
// can still reach (tasks only move forward), so `ReachedSyncPoint(step)` is true at the same step
// everywhere. A task that reports after agreement (a restarted one) gets the agreed step.
//
// Not thread-safe: CoordinationService calls it with its lock held.
#pragma once

#include <functional>
#include <map>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/incarnation.h"
#include "runtime/coordination/completions.h"
#include "runtime/coordination/types.h"

namespace phalanx::coord {

class PreemptionSync {
 public:
  using AliveFn = std::function<std::optional<base::Incarnation>(int task_id)>;

  explicit PreemptionSync(int num_tasks) : num_tasks_(num_tasks) {}

  // Opens a round (returns it, false) or joins the open one (returns it, true).
  std::pair<PreemptionRound, bool> Notify(const PreemptionNotice& notice);
  // The open round, if any.
  std::optional<PreemptionRound> Active() const;
  // `task` registered a new incarnation: a notice names the incarnation on the node being
  // preempted, and its successor runs elsewhere, so the open round stops naming the task (the
  // successor must checkpoint with the others, not leave as its predecessor did).
  void Superseded(int task);

  // FailedPrecondition when `round` is not the open round (a stale or unknown round).
  void Report(TaskRef task, uint64_t round, int64_t step, SyncStepCallback done,
              const AliveFn& alive, Completions& out);
  void Reevaluate(const AliveFn& alive, Completions& out);
  void DropTask(TaskRef gone, const absl::Status& why, Completions& out);
  void Expire(absl::Time now, const AliveFn& alive, Completions& out);
  void FailAll(const absl::Status& why, Completions& out);

 private:
  struct Report_ {
    base::Incarnation incarnation;
    int64_t step;
    std::optional<SyncStepCallback> done;  // empty once answered
  };
  struct Round {
    PreemptionRound info;
    std::map<int, Report_> reports;
    std::optional<int64_t> sync_step;
  };

  void TryAgree(const AliveFn& alive, Completions& out);

  std::optional<Round> round_;
  const int num_tasks_;
  uint64_t next_round_ = 1;
};

}  // namespace phalanx::coord
