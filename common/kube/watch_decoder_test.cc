#include "common/kube/watch_decoder.h"

#include <random>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace phalanx::kube {
namespace {

using ::phalanx::testing::IsOk;
using ::phalanx::testing::StatusIs;
using ::testing::HasSubstr;

const std::string kAdded =
    R"({"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p","resourceVersion":"7"}}})";
const std::string kBookmark =
    R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}})";
const std::string kGone =
    R"json({"type":"ERROR","object":{"kind":"Status","status":"Failure","reason":"Expired","message":"too old resource version: 1 (5)","code":410}})json";

TEST(WatchDecoder, EventsSplitAcrossChunks_AreReassembled) {
  const std::string stream = kAdded + "\n" + kBookmark + "\n";
  for (size_t cut = 1; cut < stream.size(); cut += 7) {
    SCOPED_TRACE(cut);
    WatchDecoder decoder;
    std::vector<WatchDecoder::Item> items = decoder.Feed(stream.substr(0, cut));
    for (auto& item : decoder.Feed(stream.substr(cut))) items.push_back(item);
    ASSERT_EQ(items.size(), 2u);
    EXPECT_THAT(items[0].status, IsOk());
    EXPECT_EQ(items[0].event.type, "ADDED");
    EXPECT_EQ(items[0].event.resource_version, "7");
    EXPECT_EQ(items[1].event.type, "BOOKMARK");
    EXPECT_EQ(items[1].event.resource_version, "9");
    EXPECT_EQ(decoder.pending_bytes(), 0u);
  }
}

TEST(WatchDecoder, InStreamGone_IsOutOfRange_SoTheClientRelists) {
  WatchDecoder decoder;
  auto items = decoder.Feed(kGone + "\n");
  ASSERT_EQ(items.size(), 1u);
  EXPECT_THAT(items[0].status, StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("too old")));
}

// Found by fuzz/watch_decoder_fuzz.cc: an ERROR event whose Status claimed a 2xx code (or a code
// that truncates to one) decoded as OK with an empty type, so the watch went on as if nothing
// had happened instead of ending with the server's error.
TEST(WatchDecoder, ErrorEventWithA2xxCode_IsStillAnError) {
  for (const char* code : {"200", "204", "4294967496", "0"}) {
    SCOPED_TRACE(code);
    WatchDecoder::Item item = WatchDecoder::DecodeLine(
        R"({"type":"ERROR","object":{"kind":"Status","message":"odd","code":)" + std::string(code) +
        "}}");
    EXPECT_FALSE(item.status.ok());
    EXPECT_THAT(item.status.message(), HasSubstr("odd"));
    EXPECT_EQ(item.event.type, "");
  }
}

TEST(WatchDecoder, MalformedLines_AreErrors_AndDecodingGoesOn) {
  WatchDecoder decoder;
  auto items = decoder.Feed(
      "{not json\n"
      R"({"type":"ADDED"})"
      "\n"
      R"({"type":"NOPE","object":{}})"
      "\n" +
      kAdded + "\n");
  ASSERT_EQ(items.size(), 4u);
  EXPECT_THAT(items[0].status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(items[1].status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(items[2].status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("NOPE")));
  EXPECT_THAT(items[3].status, IsOk());
}

TEST(WatchDecoder, TruncatedStream_LeavesPendingBytes) {
  WatchDecoder decoder;
  EXPECT_TRUE(decoder.Feed(kAdded.substr(0, 20)).empty());
  EXPECT_EQ(decoder.pending_bytes(), 20u);
}

TEST(WatchDecoder, RandomGarbage_NeverThrows) {
  std::mt19937 rng(7);
  WatchDecoder decoder;
  for (int i = 0; i < 300; ++i) {
    std::string chunk(rng() % 128, '\0');
    for (char& c : chunk) c = static_cast<char>(rng() % 256);
    if (i % 3 == 0) chunk += "\n";
    for (const auto& item : decoder.Feed(chunk))
      EXPECT_FALSE(item.status.ok() && item.event.type.empty());
  }
}

}  // namespace
}  // namespace phalanx::kube
