#include "size_policy.h"

#include <gtest/gtest.h>

namespace cudacache {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(SizePolicy, RoundsTo512Bytes) {
  const RoundupDivisions none;
  EXPECT_EQ(round_size(1, none), 512u);
  EXPECT_EQ(round_size(512, none), 512u);
  EXPECT_EQ(round_size(513, none), 1024u);
  EXPECT_EQ(round_size(1200, none), 1536u);
  EXPECT_EQ(round_size(kMiB + 1, none), kMiB + 512);
}

TEST(SizePolicy, PowerOfTwoDivisions) {
  RoundupDivisions four;
  four.divisions.fill(4);
  // 1200 B <= 512 x 4: PyTorch's code keeps 512-byte rounding there (finer than a division).
  EXPECT_EQ(round_size(1200, four), 1536u);
  // 5000 B lies in [4096, 8192): steps of 1024.
  EXPECT_EQ(round_size(5000, four), 5120u);
  EXPECT_EQ(round_size(4096, four), 4096u);  // powers of two stay
  EXPECT_EQ(round_size(1200 * 1024, four), 1280u * 1024);
  EXPECT_EQ(round_size(std::size_t{600} * kMiB, four), std::size_t{640} * kMiB);
  EXPECT_EQ(round_to_power2_division(1200, 4), 1280u);  // the documented example
}

// Found in review: 512 x 2^55 divisions wrapped to 0, so every request rounded up to the
// next power of two (5,000,000 B -> 8 MiB). More divisions are finer rounding, never coarser.
TEST(SizePolicy, HugeDivisionCountsRoundTo512Bytes) {
  for (const std::size_t divisions :
       {std::size_t{1} << 23, std::size_t{1} << 55, std::size_t{1} << 63}) {
    RoundupDivisions huge;
    huge.divisions.fill(divisions);
    EXPECT_EQ(round_size(5000000, huge), round_up(5000000, 512)) << divisions;
    EXPECT_EQ(round_size(300000000, huge), round_up(300000000, 512)) << divisions;
  }
  RoundupDivisions four;
  four.divisions.fill(4);
  EXPECT_EQ(round_size(2049, four), 2560u);  // 2049 > 512 x 4: steps of 512 in [2048, 4096)
  EXPECT_EQ(round_size(2048, four), 2048u);
  EXPECT_EQ(round_to_power2_division(5000, std::size_t{1} << 40), 5000u);
}

TEST(SizePolicy, PoolsAndSegmentSizes) {
  EXPECT_EQ(pool_for(kSmallSize), PoolKind::kSmall);
  EXPECT_EQ(pool_for(kSmallSize + 512), PoolKind::kLarge);
  EXPECT_EQ(segment_size(512), kSmallBuffer);
  EXPECT_EQ(segment_size(kSmallSize), kSmallBuffer);
  EXPECT_EQ(segment_size(kSmallSize + 512), kLargeBuffer);
  EXPECT_EQ(segment_size(kMinLargeAlloc - 512), kLargeBuffer);
  EXPECT_EQ(segment_size(kMinLargeAlloc), kMinLargeAlloc);
  EXPECT_EQ(segment_size(kMinLargeAlloc + 512), kMinLargeAlloc + kRoundLarge);
}

TEST(SizePolicy, SplitRules) {
  const std::size_t unlimited = SIZE_MAX;
  EXPECT_TRUE(should_split(PoolKind::kSmall, kSmallBuffer, kSmallBuffer - 512, unlimited));
  EXPECT_FALSE(should_split(PoolKind::kSmall, 1024, 1024, unlimited));
  EXPECT_FALSE(should_split(PoolKind::kLarge, kLargeBuffer, kLargeBuffer - kMiB, unlimited));
  EXPECT_TRUE(should_split(PoolKind::kLarge, kLargeBuffer, kLargeBuffer - kMiB - 512, unlimited));
  // Requests at or above max_split_size never split.
  EXPECT_FALSE(should_split(PoolKind::kLarge, 100 * kMiB, 40 * kMiB, 40 * kMiB));
  EXPECT_TRUE(should_split(PoolKind::kLarge, 100 * kMiB, 39 * kMiB, 40 * kMiB));
}

TEST(SizePolicy, OversizeBlocksServeOnlyCloseLargeRequests) {
  const std::size_t max_split = 40 * kMiB;
  EXPECT_FALSE(may_serve(50 * kMiB, 30 * kMiB, max_split));  // small request, oversize block
  EXPECT_TRUE(may_serve(50 * kMiB, 45 * kMiB, max_split));
  EXPECT_FALSE(may_serve(70 * kMiB, 50 * kMiB, max_split));  // 20 MiB or more larger
  EXPECT_TRUE(may_serve(70 * kMiB - 512, 50 * kMiB, max_split));
  EXPECT_TRUE(may_serve(30 * kMiB, 20 * kMiB, max_split));  // normal blocks
}

TEST(SizePolicy, LargestRequestRoundsWithoutOverflow) {
  RoundupDivisions eight;
  eight.divisions.fill(8);
  const RoundupDivisions none;
  EXPECT_GE(round_size(kMaxRequestBytes, none), kMaxRequestBytes);
  EXPECT_GE(round_size(kMaxRequestBytes, eight), kMaxRequestBytes);
  EXPECT_GE(segment_size(round_size(kMaxRequestBytes, none)), kMaxRequestBytes);
}

}  // namespace
}  // namespace cudacache
