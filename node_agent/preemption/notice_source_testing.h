// Test helper for NoticeSource implementations: PollOrFail polls once and records a test
// failure (with the status) when Poll returns an error. Test-only; as thread-safe as the source.
#pragma once

#include <optional>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "node_agent/preemption/notice_source.h"

namespace phalanx::agent::testing {

inline std::optional<NodeNotice> PollOrFail(NoticeSource& source, absl::Time now) {
  absl::StatusOr<std::optional<NodeNotice>> notice = source.Poll(now);
  EXPECT_TRUE(notice.ok()) << source.name() << ": " << notice.status();
  return notice.ok() ? *notice : std::nullopt;
}

}  // namespace phalanx::agent::testing
