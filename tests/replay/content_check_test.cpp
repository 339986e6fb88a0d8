#include "content_check.h"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "replay_allocator.h"
#include "replayer.h"
#include "require_cudasim.h"
#include "trace_csv.h"

namespace cudacache::replay {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

class ContentChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    ASSERT_EQ(cudaMalloc(&memory_, 8 * kMiB), cudaSuccess);
  }
  void TearDown() override {
    if (memory_ != nullptr) cudaFree(memory_);
  }
  char* at(std::uint64_t offset) const { return static_cast<char*>(memory_) + offset; }

  void* memory_ = nullptr;
};

// The message of the ContentError `check` throws ("" when it throws none).
template <typename Check>
std::string content_error(const Check& check) {
  try {
    check();
  } catch (const ContentError& error) {
    return error.what();
  }
  return "";
}

TEST(ContentCheckOffsets, FirstAndLastWordsAndEveryGranuleBetween) {
  constexpr std::uintptr_t kAligned = std::uintptr_t{1} << 40;  // a 2 MiB boundary
  EXPECT_EQ(ContentCheck::stamp_offsets(kAligned, 5 * kMiB),
            (std::vector<std::uint64_t>{0, 2 * kMiB, 4 * kMiB, 5 * kMiB - 8}));
  // A block starting mid-granule: the next boundaries are 1 MiB and 3 MiB into it.
  EXPECT_EQ(ContentCheck::stamp_offsets(kAligned + kMiB, 4 * kMiB),
            (std::vector<std::uint64_t>{0, kMiB, 3 * kMiB, 4 * kMiB - 8}));
  EXPECT_EQ(ContentCheck::stamp_offsets(kAligned, 16), (std::vector<std::uint64_t>{0, 8}));
  EXPECT_EQ(ContentCheck::stamp_offsets(kAligned, 8), (std::vector<std::uint64_t>{0}));
  EXPECT_EQ(ContentCheck::stamp_offsets(kAligned + 3, 3), (std::vector<std::uint64_t>{0}));
}

// Found by the first checked run of bench/variants.sh's traces: a 10-byte block was stamped at 0
// and at 2 (its last 8 bytes), the second stamp overwrote the first, and the check blamed the
// allocator. Stamps now follow one another: the last one is what is left after the others.
TEST(ContentCheckOffsets, StampsNeverOverlap) {
  constexpr std::uintptr_t kAligned = std::uintptr_t{1} << 40;
  EXPECT_EQ(ContentCheck::stamp_offsets(kAligned, 10), (std::vector<std::uint64_t>{0, 8}));
  // A granule boundary inside the first word is covered by it.
  EXPECT_EQ(ContentCheck::stamp_offsets(kAligned + 2 * kMiB - 3, 20),
            (std::vector<std::uint64_t>{0, 12}));
  // A boundary whose word would not fit is left to the last stamp.
  EXPECT_EQ(ContentCheck::stamp_offsets(kAligned + 2 * kMiB - 8, 12),
            (std::vector<std::uint64_t>{0, 8}));
  for (const std::uint64_t start :
       {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{5}, 2 * kMiB - 9, 2 * kMiB - 1}) {
    for (std::uint64_t size = 1; size <= 40; ++size) {
      const std::vector<std::uint64_t> offsets =
          ContentCheck::stamp_offsets(kAligned + start, size);
      ASSERT_EQ(offsets.front(), 0u);
      for (std::size_t i = 1; i < offsets.size(); ++i) {
        EXPECT_GE(offsets[i], offsets[i - 1] + 8) << "start " << start << " size " << size;
      }
      EXPECT_LT(offsets.back(), size);
      // The last stamp reaches the block's last byte.
      EXPECT_GE(offsets.back() + 8, size) << "start " << start << " size " << size;
    }
  }
}

TEST_F(ContentChecks, IntactBlocksPass) {
  ContentCheck check(5);
  check.stamp(0, 0, at(0), 5 * kMiB);
  check.stamp(1, 1, at(5 * kMiB), 3);         // under a word
  check.stamp(1, 4, at(5 * kMiB + 512), 10);  // between one word and two
  check.stamp(2, 2, at(6 * kMiB), 0);         // nothing to stamp
  check.verify_live(3, "end of the replay");
  check.verify_and_forget(3, 0);
  check.verify_and_forget(4, 1);
  check.verify_and_forget(5, 2);
  check.verify_and_forget(5, 4);
  // Freed blocks are forgotten: their memory may be handed out again.
  check.stamp(6, 3, at(kMiB), 2 * kMiB);
  check.verify_live(7, "end of the replay");
}

TEST_F(ContentChecks, AStampOverwrittenBehindTheBlocksBackIsNamed) {
  ContentCheck check(4);
  check.stamp(7, 3, at(0), 6 * kMiB);
  // Memory under the block changes (as when a page is mapped elsewhere while the block lives).
  const auto boundary = static_cast<std::uint64_t>(
      (reinterpret_cast<std::uintptr_t>(at(0)) / (2 * kMiB) + 1) * (2 * kMiB) -
      reinterpret_cast<std::uintptr_t>(at(0)));
  ASSERT_EQ(cudaMemset(at(boundary), 0, 8), cudaSuccess);
  const std::string message = content_error([&] { check.verify_and_forget(9, 3); });
  EXPECT_NE(message.find("event 9 (free): byte offset " + std::to_string(boundary) +
                         " of block 3 "
                         "(6291456 bytes at "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("allocated at event 7, holds 0x0 where 0x"), std::string::npos) << message;
  EXPECT_NE(content_error([&] {
              check.verify_live(10, "empty_cache");
            }).find("event 10 (empty_cache): byte offset "),
            std::string::npos);
}

TEST_F(ContentChecks, OverlappingLiveBlocksAreRefusedAndNeighboursAreNot) {
  ContentCheck check(4);
  check.stamp(0, 0, at(2 * kMiB), 2 * kMiB);
  check.stamp(1, 1, at(0), 2 * kMiB);         // ends where block 0 starts
  check.stamp(2, 2, at(4 * kMiB), 2 * kMiB);  // starts where block 0 ends
  EXPECT_NE(content_error([&] {
              check.stamp(3, 3, at(4 * kMiB - 1), 1);
            }).find("event 3: block 3 (1 bytes at "),
            std::string::npos);
  EXPECT_NE(content_error([&] {
              check.stamp(3, 3, at(kMiB), 4 * kMiB);
            }).find("overlaps the live block 1 (2097152 bytes at "),
            std::string::npos);
  check.verify_and_forget(4, 0);
  check.stamp(5, 3, at(2 * kMiB + 512), 512);  // block 0's memory, free again
  check.verify_live(6, "end of the replay");
}

TEST_F(ContentChecks, MemoryGoneFromUnderABlockIsAnError) {
  ContentCheck check(1);
  check.stamp(0, 0, at(0), 4 * kMiB);
  ASSERT_EQ(cudaFree(memory_), cudaSuccess);
  memory_ = nullptr;
  const std::string message = content_error([&] { check.verify_and_forget(1, 0); });
  EXPECT_NE(message.find("reading byte offset 0 of block 0"), std::string::npos) << message;
  EXPECT_NE(message.find("failed: "), std::string::npos) << message;
  cudaGetLastError();  // the refused copy is the thread's last error
}

TEST_F(ContentChecks, NullOrASlotOutsideTheTraceIsAnError) {
  ContentCheck check(2);
  EXPECT_NE(content_error([&] {
              check.stamp(0, 0, nullptr, 16);
            }).find("the allocator returned null for block 0"),
            std::string::npos);
  EXPECT_NE(content_error([&] {
              check.stamp(0, 2, at(0), 16);
            }).find("slot 2 is outside the trace's 2 slots"),
            std::string::npos);
}

// Every replay allocator passes a checked replay, and the check changes none of its figures
// (cudaMemcpy is no memory call). On a device with nothing else allocated (a replay checks that
// its allocator left nothing behind).
TEST(CheckedReplays, KeepTheirFigures) {
  CUDACACHE_REQUIRE_CUDASIM();
  const Trace trace = parse_trace_csv(
      "op,id,size,stream\nalloc,0,5242880,0\nalloc,1,3,1\nalloc,2,1048577,0\nfree,0,5242880,0\n"
      "alloc,3,9437184,1\nfree,2,1048577,0\nempty_cache,,,\nalloc,4,700,0\nfree,1,3,1\n"
      "free,3,9437184,1\n",
      "checked.csv");
  ReplayRecording checked;
  checked.check_contents = true;
  for (const std::string& allocator : default_allocator_names()) {
    SCOPED_TRACE(allocator);
    const ReplayResult plain = replay_trace(trace, allocator, 64 * kMiB);
    const ReplayResult with_check = replay_trace(trace, allocator, 64 * kMiB, {}, checked);
    EXPECT_FALSE(with_check.oom);
    // Every stamp was read back, at the frees and (block 4) at the end: at least first, last and
    // two granule words of the 5 MiB block, first, last and four of the 9 MiB one, first and
    // last of the others but the 3-byte block's one word.
    ASSERT_TRUE(with_check.intact_stamps);
    EXPECT_GE(*with_check.intact_stamps, 4u + 1 + 2 + 6 + 2);
    EXPECT_FALSE(plain.intact_stamps);
    EXPECT_EQ(with_check.peak_reserved_bytes, plain.peak_reserved_bytes);
    ASSERT_TRUE(plain.device_calls && with_check.device_calls);
    EXPECT_EQ(with_check.device_calls->total(), plain.device_calls->total());
  }
}

}  // namespace
}  // namespace cudacache::replay
