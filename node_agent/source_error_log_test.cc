// SourceErrorLog: failures are told apart by kind (not only by status code), repeats of a kind
// are rate-limited, and a source cannot flood the log whatever it answers.
#include "node_agent/source_error_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace phalanx::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

TEST(SourceErrorLogTest, DistinctFailuresWithTheSameCodeAreEachLogged) {
  SourceErrorLog log;
  const absl::Status failures[] = {
      absl::UnavailableError("connecting to 127.0.0.1:80: Connection refused"),
      absl::UnavailableError("response from 127.0.0.1:80/x larger than 1048576 bytes"),
      absl::UnavailableError("response headers from 127.0.0.1:80/x larger than 1048576 bytes"),
      absl::DeadlineExceededError("timed out connecting to 127.0.0.1:80"),
      absl::DeadlineExceededError("timed out waiting for 127.0.0.1:80/x"),
  };
  absl::Time now = kStart;
  for (const absl::Status& s : failures) {
    SCOPED_TRACE(s.ToString());
    EXPECT_THAT(log.OnError("gce-metadata", s, now), Optional(HasSubstr(s.message())));
    now += absl::Seconds(1);
  }
}

TEST(SourceErrorLogTest, ARepeatedKindIsLoggedOncePerIntervalWithItsCount) {
  SourceErrorLog log;  // repeat_after 1 min
  const absl::Status refused = absl::UnavailableError("connecting to 10.0.0.1:80: refused");
  ASSERT_TRUE(log.OnError("aws-spot", refused, kStart).has_value());
  // The same kind, even with other numbers in it, is held back for a minute...
  for (int i = 1; i < 60; ++i) {
    EXPECT_EQ(
        log.OnError("aws-spot", absl::UnavailableError("connecting to 10.0.0.2:8080: refused"),
                    kStart + absl::Seconds(i)),
        std::nullopt);
  }
  // ...then logged again, saying how often it happened meanwhile.
  EXPECT_THAT(log.OnError("aws-spot", refused, kStart + absl::Seconds(60)),
              Optional(HasSubstr("59 more like it")));
  // Sources are counted separately.
  EXPECT_TRUE(log.OnError("gce-metadata", refused, kStart + absl::Seconds(1)).has_value());
}

TEST(SourceErrorLogTest, QuotedServerAnswersDoNotMakeNewKinds) {
  EXPECT_EQ(SourceErrorLog::KindOf(absl::InternalError("want TRUE or FALSE, got \"abc\"")),
            SourceErrorLog::KindOf(absl::InternalError("want TRUE or FALSE, got \"xyz\"")));
  EXPECT_NE(SourceErrorLog::KindOf(absl::UnavailableError("response from a larger than 1 bytes")),
            SourceErrorLog::KindOf(absl::UnavailableError("connecting to a: refused")));
}

TEST(SourceErrorLogTest, ASourceCannotFloodTheLog) {
  SourceErrorLog log(
      {.repeat_after = absl::Minutes(1), .window = absl::Minutes(1), .max_lines = 3});
  int lines = 0;
  for (int i = 0; i < 100; ++i) {
    // A hostile server's ever-new messages (words, not numbers, so each is a new kind).
    const std::string word(static_cast<size_t>(i % 26 + 1), static_cast<char>('a' + i % 26));
    if (log.OnError("gce-metadata", absl::UnavailableError(word + std::string(i / 26 + 1, 'z')),
                    kStart + absl::Milliseconds(i))
            .has_value()) {
      ++lines;
    }
  }
  EXPECT_EQ(lines, 3);
  // The next window's first line says how many were held back.
  EXPECT_THAT(log.OnError("gce-metadata", absl::UnavailableError("new"), kStart + absl::Minutes(2)),
              Optional(HasSubstr("held back by the rate limit")));
}

TEST(SourceErrorLogTest, RecoveryIsLoggedOnceAndResetsTheKinds) {
  SourceErrorLog log;
  const absl::Status refused = absl::UnavailableError("refused");
  ASSERT_TRUE(log.OnError("s", refused, kStart).has_value());
  ASSERT_FALSE(log.OnError("s", refused, kStart + absl::Seconds(1)).has_value());
  EXPECT_THAT(log.OnSuccess("s"), Optional(HasSubstr("answers again after 2 failed poll(s)")));
  EXPECT_EQ(log.OnSuccess("s"), std::nullopt);
  EXPECT_TRUE(log.OnError("s", refused, kStart + absl::Seconds(2)).has_value());
}

}  // namespace
}  // namespace phalanx::agent
