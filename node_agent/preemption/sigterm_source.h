// SigtermSource: a "preemption" notice once the node agent process has been sent SIGTERM, which
// is how graceful node shutdown (kubelet's shutdownGracePeriod, a spot VM's ACPI shutdown) reaches
// it. The agent's signal-handling thread calls Trigger(); the agent's tick polls it like any other
// source. The deadline is (the first Poll that sees the trigger) + grace, so it is late by at most
// one poll interval.
// Caveat for the wiring: a DaemonSet rollout or `kubectl delete pod` also sends SIGTERM; the agent
// should call Trigger() only when its own pod is not being deleted through the API (no
// deletionTimestamp) or when the node is shutting down.
// Thread-safety: Trigger() and triggered() are safe from any thread and async-signal-safe (one
// lock-free atomic); Poll from one thread at a time.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "node_agent/preemption/notice_source.h"

namespace phalanx::agent {

class SigtermSource final : public NoticeSource {
 public:
  // `grace`: how long the node has after SIGTERM (match kubelet's shutdownGracePeriod).
  explicit SigtermSource(absl::Duration grace = absl::Seconds(30)) : grace_(grace) {}

  // Records that SIGTERM arrived. Idempotent.
  void Trigger() { triggered_.store(true, std::memory_order_release); }
  bool triggered() const { return triggered_.load(std::memory_order_acquire); }

  std::string name() const override { return "sigterm"; }

  // nullopt until Trigger(); then the same notice on every Poll. Never fails.
  absl::StatusOr<std::optional<NodeNotice>> Poll(absl::Time now) override;

 private:
  static_assert(std::atomic<bool>::is_always_lock_free);

  const absl::Duration grace_;
  std::atomic<bool> triggered_{false};
  FirstSeen seen_;
};

}  // namespace phalanx::agent
