// LifetimePredictor (Note [Lifetime classes] in policy_cudacache.cpp): a request's context is
// its size, its stream and the two sizes before it; its prediction, what the context's last
// block lived.
#include "lifetime_predictor.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace cudacache {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id); }

TEST(LifetimePredictor, TheContextIsTheSizeTheStreamAndTheTwoSizesBefore) {
  LifetimePredictor a;
  LifetimePredictor b;
  EXPECT_EQ(a.context(10 * kMiB, nullptr), b.context(10 * kMiB, nullptr));
  EXPECT_NE(a.context(10 * kMiB, nullptr), a.context(11 * kMiB, nullptr));
  EXPECT_NE(a.context(10 * kMiB, nullptr), a.context(10 * kMiB, fake_stream(5)));
  EXPECT_NE(a.context(10 * kMiB, nullptr), 0u);
  a.allocated(1 * kMiB);
  a.allocated(2 * kMiB);
  b.allocated(3 * kMiB);
  b.allocated(2 * kMiB);
  EXPECT_NE(a.context(10 * kMiB, nullptr), b.context(10 * kMiB, nullptr));  // two sizes back
  b.allocated(1 * kMiB);
  b.allocated(2 * kMiB);
  EXPECT_EQ(a.context(10 * kMiB, nullptr), b.context(10 * kMiB, nullptr));  // not three
}

TEST(LifetimePredictor, PredictsWhatTheContextsLastBlockLived) {
  LifetimePredictor predictor;
  const std::uint32_t context = predictor.context(64 * kMiB, nullptr);
  EXPECT_EQ(predictor.predict(context), Lifetime::kUnknown);
  // A lifetime counts the allocations from the block's own to its free, itself included.
  const std::uint32_t long_lived = LifetimePredictor::kLongLivedAllocations;
  std::uint32_t born = predictor.allocated(64 * kMiB);
  for (std::uint32_t i = 2; i < long_lived; ++i) predictor.allocated(kMiB);
  EXPECT_FALSE(predictor.freed(context, born));  // lived long_lived - 1
  EXPECT_EQ(predictor.predict(context), Lifetime::kShort);
  born = predictor.allocated(64 * kMiB);
  for (std::uint32_t i = 1; i < long_lived; ++i) predictor.allocated(kMiB);
  EXPECT_TRUE(predictor.freed(context, born));  // lived long_lived
  EXPECT_EQ(predictor.predict(context), Lifetime::kLong);
  born = predictor.allocated(64 * kMiB);
  EXPECT_FALSE(predictor.freed(context, born));  // the last block decides
  EXPECT_EQ(predictor.predict(context), Lifetime::kShort);
  EXPECT_EQ(predictor.predict(predictor.context(65 * kMiB, nullptr)), Lifetime::kUnknown);
}

}  // namespace
}  // namespace cudacache
