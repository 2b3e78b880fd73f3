// BackgroundSource: runs another NoticeSource's Poll on a thread of its own, every `period` of
// the injected Clock, and answers the agent's Poll at once with the latest completed result.
// Without it the agent's tick polled every source in turn, so one hanging metadata server
// (each poll is bounded only by its source's own request timeout, 2 s a request) stretched the
// 1 s tick — and with it GPU health, node checks and every other source — to ~5 s. Now each
// source runs on its own schedule with its own deadline and a slow one delays nothing else.
//
// Poll(now) returns: nullopt before the first poll has finished (nothing known yet); the latest
// result otherwise; DeadlineExceeded when a poll has been running for longer than `stale_after`
// (a source that stopped answering is reported, not silently taken as "no notice"). Each result
// is that of one real poll of the wrapped source, whose errors are passed through.
// Used by the agent binary for the metadata and node-taint sources (not sigterm, which answers
// at once and is triggered from the signal path). Thread-safe; the destructor stops the thread,
// waiting for an in-flight poll to end (bounded by the wrapped source's own timeout).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "node_agent/preemption/notice_source.h"

namespace phalanx::agent {

class BackgroundSource final : public NoticeSource {
 public:
  BackgroundSource(std::unique_ptr<NoticeSource> source, base::Clock& clock, absl::Duration period,
                   absl::Duration stale_after);
  ~BackgroundSource() override;

  std::string name() const override { return name_; }
  absl::StatusOr<std::optional<NodeNotice>> Poll(absl::Time now) override;
  bool answered() const override { return completed_polls() > 0; }

  // Polls of the wrapped source that have finished (for tests and logs).
  int completed_polls() const;
  // Whether a poll of the wrapped source is running now.
  bool in_flight() const;

 private:
  void Loop();

  const std::unique_ptr<NoticeSource> source_;
  const std::string name_;
  base::Clock& clock_;
  const absl::Duration period_;
  const absl::Duration stale_after_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::StatusOr<std::optional<NodeNotice>>> latest_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> running_since_ ABSL_GUARDED_BY(mu_);
  int completed_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace phalanx::agent
