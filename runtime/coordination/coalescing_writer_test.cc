// The write rule both ends of the session wire share, as a sequence of events (no sockets).
#include "runtime/coordination/coalescing_writer.h"

#include <gtest/gtest.h>

namespace phalanx::coord {
namespace {

TEST(CoalescingWriter, AnAppendWithNobodySendingAsksTheCallerToSend) {
  CoalescingWriter w;
  EXPECT_TRUE(w.Append("ab"));
  EXPECT_EQ(w.Unsent(), "ab");
  w.Sent(1);  // a partial send keeps the rest, in order
  EXPECT_TRUE(w.Append("c"));
  EXPECT_EQ(w.Unsent(), "bc");
  w.Sent(2);
  EXPECT_EQ(w.unsent_bytes(), 0u);
  EXPECT_FALSE(w.ShouldSend());
}

TEST(CoalescingWriter, WhileCorked_WritesQueue_AndUncorkingSendsThemTogether) {
  CoalescingWriter w;
  w.Cork();
  EXPECT_FALSE(w.Append("one "));
  EXPECT_FALSE(w.Append("two"));
  EXPECT_FALSE(w.ShouldSend());
  EXPECT_TRUE(w.Uncork());
  EXPECT_EQ(w.Claim(), "one two");  // one send for both
  w.Release();
  EXPECT_FALSE(w.Uncork());  // nothing queued: nothing to send
}

TEST(CoalescingWriter, WhileOneThreadSends_OthersOnlyQueue_AndItTakesTheirBytesNext) {
  CoalescingWriter w;
  ASSERT_TRUE(w.Append("first"));
  EXPECT_EQ(w.Claim(), "first");
  EXPECT_FALSE(w.Append("second"));  // another thread: the sender takes it
  EXPECT_FALSE(w.Append("third"));
  w.Release();
  ASSERT_TRUE(w.ShouldSend());
  EXPECT_EQ(w.Claim(), "secondthird");
  w.Release();
  EXPECT_FALSE(w.ShouldSend());
}

TEST(CoalescingWriter, ClaimAfterAPartialSendTakesOnlyTheRest) {
  CoalescingWriter w;
  w.Append("abcdef");
  w.Sent(4);
  EXPECT_EQ(w.Claim(), "ef");
}

TEST(CoalescingWriter, ABrokenConnectionDropsWhatIsQueuedAndEveryLaterWrite) {
  CoalescingWriter w;
  w.Cork();
  w.Append("lost");
  w.Break();
  EXPECT_TRUE(w.broken());
  EXPECT_EQ(w.unsent_bytes(), 0u);
  EXPECT_FALSE(w.Append("also lost"));
  EXPECT_FALSE(w.Uncork());
  EXPECT_EQ(w.unsent_bytes(), 0u);
}

}  // namespace
}  // namespace phalanx::coord
