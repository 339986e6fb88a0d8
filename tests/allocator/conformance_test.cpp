// The shared conformance suite: whole scenarios as a training loop sees them, checked against
// cudasim's own counters, run once per configuration (INSTANTIATE_TEST_SUITE_P at the end:
// cudaMalloc segments, PyTorch's expandable VMM segments and cudacache's own policy, with
// history, max_split_size_mb and roundup_power2_divisions). A behaviour every configuration must
// have belongs here; one that depends on a policy's layout belongs to that policy's own test file.
#include "test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace cudacache {
namespace {

using testing::allocated;
using testing::expect_invariants;
using testing::reserved;
using testing::ScopedStream;
using testing::sim_counters;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    ASSERT_EQ(cudasim_reset_counters(0), 0);
  }
  Options options() const { return Options(GetParam()); }
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

TEST_P(Conformance, LossAccumulatedWithoutItemGrowsWhileACorrectLoopStaysFlat) {
  std::vector<std::int64_t> leaky_allocated;
  {
    DeviceAllocator allocator(0, options());
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
    DeviceAllocator allocator(0, options());
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

TEST_P(Conformance, LargeActivationFreedThenReallocated) {
  DeviceAllocator allocator(0, options());
  void* activation = allocator.allocate(kGiB, nullptr);
  allocator.deallocate(activation);
  MemoryStats s = allocator.stats();
  EXPECT_EQ(allocated(s), 0);
  EXPECT_EQ(s.allocated_bytes[kAllPools].peak, static_cast<std::int64_t>(kGiB));
  EXPECT_GE(reserved(s), static_cast<std::int64_t>(kGiB));  // cached, not returned
  EXPECT_EQ(static_cast<std::uint64_t>(reserved(s)), sim_counters().in_use_bytes);
  void* again = allocator.allocate(kGiB, nullptr);
  EXPECT_EQ(again, activation);
  s = allocator.stats();
  EXPECT_EQ(s.num_device_alloc, 1);
  EXPECT_EQ(s.allocated_bytes[kAllPools].peak, static_cast<std::int64_t>(kGiB));
  EXPECT_EQ(s.allocated_bytes[kAllPools].allocated, static_cast<std::int64_t>(2 * kGiB));
  EXPECT_EQ(sim_counters().peak_bytes, static_cast<std::uint64_t>(reserved(s)));
  allocator.deallocate(again);
}

TEST_P(Conformance, HugeRequestIsAnOomThenWorkContinues) {
  DeviceAllocator allocator(0, options());
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
  EXPECT_EQ(allocated(allocator.stats()),
            static_cast<std::int64_t>(round_size(100 * kMiB, options().roundup_power2_divisions)));
  EXPECT_EQ(allocator.stats().num_ooms, 1);
  allocator.deallocate(weights);
}

TEST_P(Conformance, EmptyCacheKeepsOnlyWhatLiveBlocksNeed) {
  DeviceAllocator allocator(0, options());
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

TEST(Scenario, SeveralAllocatorsShareOneDeviceIndependently) {
  CUDACACHE_REQUIRE_CUDASIM();
  ASSERT_EQ(cudasim_reset_counters(0), 0);
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

// Random alloc/free/record_stream/empty_cache sequences on a small device (out-of-memory errors
// happen and are survived), with every invariant checked after every step and a byte pattern
// in every live block checked after every step: unmapping or reusing memory under a live or
// pending block shows as a changed byte (or, on cudasim, as a fault on unmapped memory).
class ContentChecker {
 public:
  explicit ContentChecker(int device = 0) : device_(device) {}
  void fill(void* p, std::size_t size, std::uint8_t value) {
    ASSERT_EQ(cudaSetDevice(device_), cudaSuccess);
    ASSERT_EQ(cudaMemset(p, value, size), cudaSuccess);
    blocks_[p] = {size, value};
  }
  void forget(void* p) { blocks_.erase(p); }
  void expect_intact() const {
    ASSERT_EQ(cudaSetDevice(device_), cudaSuccess);
    for (const auto& [p, block] : blocks_) {
      const auto* base = static_cast<const std::uint8_t*>(p);
      for (std::size_t offset : {std::size_t{0}, block.size / 2, block.size - 1}) {
        std::uint8_t byte = 0;
        ASSERT_EQ(cudaMemcpy(&byte, base + offset, 1, cudaMemcpyDeviceToHost), cudaSuccess);
        ASSERT_EQ(byte, block.value) << "block " << p << " byte " << offset << " changed";
      }
    }
  }

 private:
  struct Pattern {
    std::size_t size;
    std::uint8_t value;
  };
  int device_ = 0;
  std::map<void*, Pattern> blocks_;
};

void run_random_sequence(const std::string& config, unsigned seed, int steps) {
  SCOPED_TRACE("config \"" + config + "\" seed " + std::to_string(seed));
  const Options options(config);
  const std::size_t capacity = cudasim_get_capacity(0);
  ASSERT_EQ(cudasim_set_capacity(0, 256 * kMiB), 0);  // pressure: OOMs happen
  const ScopedStream side_1;
  const ScopedStream side_2;
  const cudaStream_t streams[3] = {nullptr, side_1, side_2};
  {
    DeviceAllocator allocator(0, options);
    std::mt19937_64 random(seed);
    std::map<std::uintptr_t, std::size_t> live;
    std::vector<void*> order;
    ContentChecker contents;
    int ooms = 0;
    for (int step = 0; step < steps; ++step) {
      const auto op = random() % 100;
      if (op < 55 && order.size() < 60) {
        const double log_size = std::uniform_real_distribution<double>(0.0, 26.0)(random);
        const auto size = static_cast<std::size_t>(std::exp2(log_size));
        cudaStream_t stream = streams[random() % 3];
        try {
          void* p = allocator.allocate(size, stream);
          ASSERT_NE(p, nullptr);
          const std::size_t rounded = round_size(size, options.roundup_power2_divisions);
          ASSERT_TRUE(live.emplace(reinterpret_cast<std::uintptr_t>(p), rounded).second);
          order.push_back(p);
          contents.fill(p, size, static_cast<std::uint8_t>(step));
        } catch (const OutOfMemoryError&) {
          ++ooms;
        }
      } else if (op < 95 && !order.empty()) {
        const std::size_t index = random() % order.size();
        void* p = order[index];
        if (random() % 4 == 0) allocator.record_stream(p, streams[random() % 3]);
        order.erase(order.begin() + static_cast<std::ptrdiff_t>(index));
        live.erase(reinterpret_cast<std::uintptr_t>(p));
        contents.forget(p);
        allocator.deallocate(p);
      } else if (op < 97) {
        allocator.empty_cache();
        EXPECT_EQ(static_cast<std::uint64_t>(reserved(allocator.stats())),
                  sim_counters().in_use_bytes);
      } else {
        allocator.reset_peak_stats();
      }
      expect_invariants(allocator, live);
      contents.expect_intact();
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "first failure at step " << step;
        break;
      }
    }
    EXPECT_GT(ooms, 0) << "the device was never full: no pressure";
    EXPECT_EQ(allocator.stats().num_ooms, ooms);
    for (void* p : order) allocator.deallocate(p);
    live.clear();
    expect_invariants(allocator, live);
    allocator.empty_cache();
    EXPECT_EQ(reserved(allocator.stats()), 0);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
  cudasim_set_capacity(0, capacity);
}

// CUDACACHE_SOAK_SEEDS=N runs the randomized tests below with N seeds each instead of one (a
// soak run; README, "Tests"). Not a number of at least 1: the test fails, naming the variable.
unsigned soak_seeds() {
  const char* value = std::getenv("CUDACACHE_SOAK_SEEDS");
  if (value == nullptr || *value == '\0') return 1;
  char* end = nullptr;
  const unsigned long seeds = std::strtoul(value, &end, 10);
  if (*end != '\0' || seeds == 0 || seeds > 1000000 || value[0] == '-') {
    ADD_FAILURE() << "CUDACACHE_SOAK_SEEDS='" << value << "': expected a count from 1 to 1000000";
    return 0;
  }
  return static_cast<unsigned>(seeds);
}

// In a soak run, says which seed starts (the output of a long run shows its progress).
void announce_seed(unsigned index, unsigned seeds) {
  if (seeds > 1) std::cout << "soak: seed " << index + 1 << " of " << seeds << std::endl;
}

TEST_P(Conformance, RandomSequencesUnderPressureKeepAccountingAndContents) {
  const auto base = static_cast<unsigned>(std::hash<std::string>{}(GetParam()));
  const unsigned seeds = soak_seeds();
  for (unsigned i = 0; i < seeds && !HasFailure(); ++i) {
    announce_seed(i, seeds);
    run_random_sequence(GetParam(), base + i, 3000);
  }
}

// Holds streams for a while, as a busy GPU does: a stream held longer than `hold_for` is
// released by a background thread, so that anything that waits for it (event synchronizes,
// the stream synchronize before an unmap) waits, then goes on.
class StreamHolder {
 public:
  explicit StreamHolder(std::chrono::milliseconds hold_for) : hold_for_(hold_for) {
    thread_ = std::thread([this] { run(); });
  }
  ~StreamHolder() {
    stop_ = true;
    thread_.join();
    for (const auto& [stream, since] : held_) cudasim_release_stream(stream);
  }
  void hold(cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    if (held_.emplace(stream, std::chrono::steady_clock::now()).second) {
      EXPECT_EQ(cudasim_hold_stream(stream), 0);
    }
  }

 private:
  void run() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard lock(mutex_);
      const auto now = std::chrono::steady_clock::now();
      for (auto it = held_.begin(); it != held_.end();) {
        if (now - it->second < hold_for_) {
          ++it;
          continue;
        }
        cudasim_release_stream(it->first);
        it = held_.erase(it);
      }
    }
  }
  const std::chrono::milliseconds hold_for_;
  std::mutex mutex_;
  std::map<cudaStream_t, std::chrono::steady_clock::time_point> held_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Random sequences on two small devices at once, with several streams per device,
// record_stream and streams held busy: after every step, on both devices, no live block lost a
// byte, the allocator's invariants hold and its reserved bytes equal what cudasim has handed
// out.
void run_random_sequence_on_two_devices(const std::string& config, std::uint64_t seed) {
  constexpr int kDevices = 2;
  SCOPED_TRACE("config \"" + config + "\" seed " + std::to_string(seed));
  const Options options(config);
  std::array<std::size_t, kDevices> capacity{};
  std::array<std::array<cudaStream_t, 3>, kDevices> streams{};
  for (int device = 0; device < kDevices; ++device) {
    capacity[device] = cudasim_get_capacity(device);
    ASSERT_EQ(cudasim_set_capacity(device, 128 * kMiB), 0);
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    for (int i = 1; i < 3; ++i) {
      ASSERT_EQ(cudaStreamCreateWithFlags(&streams[device][i], cudaStreamNonBlocking), cudaSuccess);
    }
  }
  {
    StreamHolder holder(std::chrono::milliseconds(2));
    std::vector<std::unique_ptr<DeviceAllocator>> allocators;
    std::vector<std::map<std::uintptr_t, std::size_t>> live(kDevices);
    std::vector<std::vector<void*>> order(kDevices);
    std::vector<ContentChecker> contents{ContentChecker(0), ContentChecker(1)};
    for (int device = 0; device < kDevices; ++device) {
      allocators.push_back(std::make_unique<DeviceAllocator>(device, options));
    }
    std::mt19937_64 random(seed);
    int ooms = 0;
    for (int step = 0; step < 1500; ++step) {
      const int device = static_cast<int>(random() % kDevices);
      DeviceAllocator& allocator = *allocators[device];
      const auto& device_streams = streams[device];
      const auto op = random() % 100;
      if (op < 50 && order[device].size() < 50) {
        const double log_size = std::uniform_real_distribution<double>(0.0, 26.0)(random);
        const auto size = static_cast<std::size_t>(std::exp2(log_size));
        try {
          void* p = allocator.allocate(size, device_streams[random() % 3]);
          ASSERT_NE(p, nullptr);
          live[device].emplace(reinterpret_cast<std::uintptr_t>(p),
                               round_size(size, options.roundup_power2_divisions));
          order[device].push_back(p);
          contents[device].fill(p, size, static_cast<std::uint8_t>(step));
        } catch (const OutOfMemoryError&) {
          ++ooms;
        }
      } else if (op < 90 && !order[device].empty()) {
        const std::size_t index = random() % order[device].size();
        void* p = order[device][index];
        if (random() % 3 == 0) allocator.record_stream(p, device_streams[1 + random() % 2]);
        order[device].erase(order[device].begin() + static_cast<std::ptrdiff_t>(index));
        live[device].erase(reinterpret_cast<std::uintptr_t>(p));
        contents[device].forget(p);
        allocator.deallocate(p);
      } else if (op < 96) {
        holder.hold(device_streams[1 + random() % 2]);  // its pending frees stay pending
      } else if (op < 98) {
        allocator.empty_cache();
      } else {
        allocator.reset_peak_stats();
      }
      for (int d = 0; d < kDevices; ++d) {
        expect_invariants(*allocators[d], live[d]);
        contents[d].expect_intact();
        EXPECT_EQ(static_cast<std::uint64_t>(reserved(allocators[d]->stats())),
                  sim_counters(d).in_use_bytes)
            << "device " << d;
      }
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "first failure at step " << step;
        break;
      }
    }
    EXPECT_GT(ooms, 0) << "the devices were never full: no pressure";
    for (int device = 0; device < kDevices; ++device) {
      for (void* p : order[device]) allocators[device]->deallocate(p);
      allocators[device]->empty_cache();
      EXPECT_EQ(reserved(allocators[device]->stats()), 0);
    }
  }
  for (int device = 0; device < kDevices; ++device) {
    EXPECT_EQ(sim_counters(device).in_use_bytes, 0u);
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    for (int i = 1; i < 3; ++i) cudaStreamDestroy(streams[device][i]);
    cudasim_set_capacity(device, capacity[device]);
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

TEST_P(Conformance, RandomSequencesOnTwoDevicesWithBusyStreamsKeepContentsAndAccounting) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  if (count < 2) GTEST_SKIP() << "needs CUDASIM_DEVICES=2";
  const std::uint64_t base = std::hash<std::string>{}(GetParam()) + 7;
  const unsigned seeds = soak_seeds();
  for (unsigned i = 0; i < seeds && !HasFailure(); ++i) {
    announce_seed(i, seeds);
    run_random_sequence_on_two_devices(GetParam(), base + i);
  }
}

// Each configuration with the name its tests carry.
const std::pair<const char*, const char*> kConfigurations[] = {
    {"MallocSegments", "policy:pytorch"},
    {"ExpandableSegments", "expandable_segments:True"},
    {"HistoryOn", "policy:pytorch,record_history:1000"},
    {"MaxSplitSize", "policy:pytorch,max_split_size_mb:40"},
    {"RoundupDivisions", "policy:pytorch,roundup_power2_divisions:4"},
    {"ExpandableWithMaxSplitAndHistory",
     "expandable_segments:True,max_split_size_mb:40,record_history:1000"},
    {"CudacachePolicy", ""},  // the default
    {"CudacachePolicyWithHistory", "record_history:1000"},
    {"CudacachePolicyWithMaxSplitAndRoundup", "max_split_size_mb:40,roundup_power2_divisions:4"},
    {"CudacachePolicyWithGranulePages", "max_page_size_mb:2"},
};

std::string configuration_name(const ::testing::TestParamInfo<std::string>& param) {
  for (const auto& [name, config] : kConfigurations) {
    if (param.param == config) return name;
  }
  return "Unnamed";
}

std::vector<std::string> configurations() {
  std::vector<std::string> configs;
  for (const auto& entry : kConfigurations) configs.emplace_back(entry.second);
  return configs;
}

INSTANTIATE_TEST_SUITE_P(Configurations, Conformance, ::testing::ValuesIn(configurations()),
                         configuration_name);

}  // namespace
}  // namespace cudacache
