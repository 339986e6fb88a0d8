// Whole scenarios as a training loop sees them, checked against cudasim's own counters.
#include "test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace cudacache {
namespace {

using testing::allocated;
using testing::expect_invariants;
using testing::reserved;
using testing::sim_counters;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;

class Scenario : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cudasim_available()) GTEST_SKIP() << "needs the cudasim runtime";
    ASSERT_EQ(cudasim_reset_counters(0), 0);
  }
};

// One forward/backward step: activations come and go, the loss is a small tensor.
void* training_step(DeviceAllocator& allocator) {
  void* input = allocator.allocate(6 * kMiB, nullptr);
  void* hidden = allocator.allocate(24 * kMiB + 300, nullptr);
  void* logits = allocator.allocate(700 * 1024, nullptr);
  void* loss = allocator.allocate(4, nullptr);
  allocator.deallocate(logits);
  allocator.deallocate(hidden);
  allocator.deallocate(input);
  return loss;
}

TEST_F(Scenario, LossAccumulatedWithoutItemGrowsWhileACorrectLoopStaysFlat) {
  std::vector<std::int64_t> leaky_allocated;
  {
    DeviceAllocator allocator(0, Options{});
    std::vector<void*> kept;  // `total_loss += loss` keeps every step's loss alive
    for (int step = 0; step < 200; ++step) {
      kept.push_back(training_step(allocator));
      leaky_allocated.push_back(allocated(allocator.stats()));
    }
    for (std::size_t i = 1; i < leaky_allocated.size(); ++i) {
      EXPECT_EQ(leaky_allocated[i] - leaky_allocated[i - 1], 512) << "step " << i;
    }
    for (void* p : kept) allocator.deallocate(p);
  }
  ASSERT_EQ(cudasim_reset_counters(0), 0);
  {
    DeviceAllocator allocator(0, Options{});
    allocator.deallocate(training_step(allocator));  // warm-up
    const std::int64_t device_allocs = allocator.stats().num_device_alloc;
    const std::uint64_t sim_mallocs = sim_counters().mallocs;
    for (int step = 1; step < 200; ++step) {
      void* loss = training_step(allocator);
      allocator.deallocate(loss);  // `total_loss += loss.item()`
      ASSERT_EQ(allocated(allocator.stats()), 0) << "step " << step;
    }
    EXPECT_EQ(allocator.stats().num_device_alloc, device_allocs);
    EXPECT_EQ(sim_counters().mallocs, sim_mallocs) << "cudaMalloc after warm-up";
    EXPECT_EQ(static_cast<std::uint64_t>(reserved(allocator.stats())), sim_counters().in_use_bytes);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

TEST_F(Scenario, LargeActivationFreedThenReallocated) {
  DeviceAllocator allocator(0, Options{});
  void* activation = allocator.allocate(kGiB, nullptr);
  allocator.deallocate(activation);
  MemoryStats s = allocator.stats();
  EXPECT_EQ(allocated(s), 0);
  EXPECT_EQ(s.allocated_bytes[kAllPools].peak, static_cast<std::int64_t>(kGiB));
  EXPECT_EQ(reserved(s), static_cast<std::int64_t>(kGiB));  // cached, not returned
  void* again = allocator.allocate(kGiB, nullptr);
  EXPECT_EQ(again, activation);
  s = allocator.stats();
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(s.allocated_bytes[kAllPools].peak, static_cast<std::int64_t>(kGiB));
  EXPECT_EQ(s.allocated_bytes[kAllPools].allocated, static_cast<std::int64_t>(2 * kGiB));
  EXPECT_EQ(sim_counters().peak_bytes, kGiB);
  allocator.deallocate(again);
}

TEST_F(Scenario, HugeRequestIsAnOomThenWorkContinues) {
  DeviceAllocator allocator(0, Options{});
  void* weights = allocator.allocate(100 * kMiB, nullptr);
  try {
    allocator.allocate(256 * kGiB, nullptr);
    FAIL() << "256 GiB cannot fit";
  } catch (const OutOfMemoryError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("256.00 GiB"), std::string::npos) << message;
    EXPECT_NE(message.find("device 0"), std::string::npos) << message;
  }
  for (int step = 0; step < 10; ++step) allocator.deallocate(training_step(allocator));
  EXPECT_EQ(allocated(allocator.stats()), static_cast<std::int64_t>(100 * kMiB));
  EXPECT_EQ(allocator.stats().num_ooms, 1);
  allocator.deallocate(weights);
}

TEST_F(Scenario, EmptyCacheKeepsOnlyWhatLiveBlocksNeed) {
  DeviceAllocator allocator(0, Options{});
  std::vector<void*> all;
  for (std::size_t size : {kMiB / 2, 3 * kMiB, 15 * kMiB, 64 * kMiB, 4096ul, 200 * kMiB}) {
    for (int i = 0; i < 3; ++i) all.push_back(allocator.allocate(size, nullptr));
  }
  std::map<std::uintptr_t, std::size_t> live;
  std::vector<void*> kept;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i % 3 == 1) {
      kept.push_back(all[i]);
    } else {
      allocator.deallocate(all[i]);
    }
  }
  allocator.empty_cache();
  // Every remaining segment holds a live block; cudasim agrees with reserved.
  const MemorySnapshot snapshot = allocator.snapshot();
  for (const SegmentSnapshot& segment : snapshot.segments) EXPECT_GT(segment.allocated_size, 0u);
  EXPECT_EQ(static_cast<std::uint64_t>(reserved(allocator.stats())), sim_counters().in_use_bytes);
  for (void* p : kept) allocator.deallocate(p);
  allocator.empty_cache();
  EXPECT_EQ(reserved(allocator.stats()), 0);
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

TEST_F(Scenario, SeveralAllocatorsShareOneDeviceIndependently) {
  auto first = std::make_unique<DeviceAllocator>(0, Options{});
  DeviceAllocator second(0, Options("max_split_size_mb:20,roundup_power2_divisions:4"));
  void* a = first->allocate(30 * kMiB, nullptr);
  void* b = second.allocate(30 * kMiB, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(first->stats().oversize_allocations.current, 0);
  EXPECT_EQ(second.stats().oversize_allocations.current, 1);
  EXPECT_EQ(sim_counters().in_use_bytes,
            static_cast<std::uint64_t>(reserved(first->stats()) + reserved(second.stats())));
  EXPECT_THROW(second.deallocate(a), Error);  // not second's block
  first.reset();  // the destructor returns its segments, live block included
  EXPECT_EQ(sim_counters().in_use_bytes, static_cast<std::uint64_t>(reserved(second.stats())));
  second.deallocate(b);
  second.empty_cache();
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// Random alloc/free/record_stream/empty_cache sequences with every invariant checked after
// every step.
void run_random_sequence(const std::string& config, unsigned seed, int steps) {
  SCOPED_TRACE("config \"" + config + "\" seed " + std::to_string(seed));
  const Options options(config);
  cudaStream_t streams[3] = {nullptr, nullptr, nullptr};
  ASSERT_EQ(cudaStreamCreate(&streams[1]), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&streams[2]), cudaSuccess);
  {
    DeviceAllocator allocator(0, options);
    std::mt19937_64 random(seed);
    std::map<std::uintptr_t, std::size_t> live;
    std::vector<void*> order;
    for (int step = 0; step < steps; ++step) {
      const auto op = random() % 100;
      if (op < 55 && order.size() < 60) {
        const double log_size = std::uniform_real_distribution<double>(0.0, 26.0)(random);
        const auto size = static_cast<std::size_t>(std::exp2(log_size));
        cudaStream_t stream = streams[random() % 3];
        void* p = allocator.allocate(size, stream);
        ASSERT_NE(p, nullptr);
        const std::size_t rounded = round_size(size, options.roundup_power2_divisions);
        ASSERT_TRUE(live.emplace(reinterpret_cast<std::uintptr_t>(p), rounded).second);
        order.push_back(p);
      } else if (op < 95 && !order.empty()) {
        const std::size_t index = random() % order.size();
        void* p = order[index];
        if (random() % 4 == 0) allocator.record_stream(p, streams[random() % 3]);
        order.erase(order.begin() + static_cast<std::ptrdiff_t>(index));
        live.erase(reinterpret_cast<std::uintptr_t>(p));
        allocator.deallocate(p);
      } else if (op < 97) {
        allocator.empty_cache();
        EXPECT_EQ(static_cast<std::uint64_t>(reserved(allocator.stats())),
                  sim_counters().in_use_bytes);
      } else {
        allocator.reset_peak_stats();
      }
      expect_invariants(allocator, live);
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "first failure at step " << step;
        return;
      }
    }
    for (void* p : order) allocator.deallocate(p);
    live.clear();
    expect_invariants(allocator, live);
    allocator.empty_cache();
    EXPECT_EQ(reserved(allocator.stats()), 0);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
  cudaStreamDestroy(streams[1]);
  cudaStreamDestroy(streams[2]);
}

TEST_F(Scenario, RandomSequencesKeepAccountingExactDefault) {
  run_random_sequence("", 1, 4000);
}

TEST_F(Scenario, RandomSequencesKeepAccountingExactMaxSplit) {
  run_random_sequence("max_split_size_mb:20", 2, 4000);
}

TEST_F(Scenario, RandomSequencesKeepAccountingExactRoundup) {
  run_random_sequence("roundup_power2_divisions:[1:2,4:4,>:8]", 3, 4000);
}

}  // namespace
}  // namespace cudacache
