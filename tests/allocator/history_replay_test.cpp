// End to end: a scenario recorded through cudacache with record_history, exported as a replay
// CSV, read back by cudacache-replay's CSV reader and replayed through a fresh allocator must
// reach the same peak allocated and peak reserved bytes as the recorded run.
#include "test_support.h"

#include "replayer.h"
#include "trace_csv.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

namespace cudacache {
namespace {

using testing::ScopedStream;

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Recording {
  std::string csv;
  std::int64_t peak_allocated = 0;
  std::int64_t peak_reserved = 0;
  std::size_t allocations = 0;
};

// A few hundred allocations of small, medium and large sizes on two streams, frees in random
// order, one empty_cache in the middle; some blocks are still live at the end.
Recording record_scenario(cudaStream_t side) {
  Recording recording;
  DeviceAllocator allocator(0, Options("record_history:100000"));
  std::mt19937_64 random(20261129);
  std::vector<void*> live;
  auto random_size = [&]() -> std::size_t {
    switch (random() % 4) {
      case 0: return 1 + random() % 4096;                  // tiny
      case 1: return 4096 + random() % kMiB;               // small pool
      case 2: return kMiB + 1 + random() % (9 * kMiB);     // 20 MiB segments
      default: return 10 * kMiB + random() % (22 * kMiB);  // own segments
    }
  };
  for (int step = 0; step < 600; ++step) {
    if (step == 300) {
      std::vector<void*> kept;
      for (std::size_t i = 0; i < live.size(); ++i) {
        if (i % 2 == 0) {
          allocator.deallocate(live[i]);
        } else {
          kept.push_back(live[i]);
        }
      }
      live = std::move(kept);
      allocator.empty_cache();
    }
    const bool free_one = !live.empty() && (live.size() > 40 || random() % 100 < 45);
    if (free_one) {
      const std::size_t victim = random() % live.size();
      allocator.deallocate(live[victim]);
      live[victim] = live.back();
      live.pop_back();
    } else {
      live.push_back(allocator.allocate(random_size(), random() % 3 == 0 ? side : nullptr));
      ++recording.allocations;
    }
  }
  recording.csv = allocator.history_csv();
  const MemoryStats stats = allocator.stats();
  recording.peak_allocated = stats.allocated_bytes[kAllPools].peak;
  recording.peak_reserved = stats.reserved_bytes[kAllPools].peak;
  for (void* ptr : live) allocator.deallocate(ptr);
  return recording;
}

TEST(HistoryReplay, ReplayOfTheRecordedCsvReachesTheSamePeaks) {
  CUDACACHE_REQUIRE_CUDASIM();
  const ScopedStream side;
  const Recording recording = record_scenario(side);
  ASSERT_GT(recording.allocations, 200u);
  ASSERT_GT(recording.peak_reserved, 0);

  const replay::Trace trace = replay::parse_trace_csv(recording.csv, "history.csv");
  EXPECT_EQ(trace.alloc_count, recording.allocations);
  EXPECT_EQ(trace.empty_cache_count, 1u);
  EXPECT_EQ(trace.stream_count, 2u);
  EXPECT_GT(trace.events.size(), 500u);
  RecordProperty("peak_allocated", std::to_string(recording.peak_allocated));
  RecordProperty("peak_reserved", std::to_string(recording.peak_reserved));

  const replay::ReplayResult result = replay::replay_trace(trace, "cudacache", std::nullopt);
  EXPECT_FALSE(result.oom) << result.oom_message;
  EXPECT_EQ(result.events_replayed, trace.events.size());
  ASSERT_TRUE(result.peak_allocated_bytes.has_value());
  ASSERT_TRUE(result.peak_reserved_bytes.has_value());
  EXPECT_EQ(*result.peak_allocated_bytes, static_cast<std::uint64_t>(recording.peak_allocated));
  EXPECT_EQ(*result.peak_reserved_bytes, static_cast<std::uint64_t>(recording.peak_reserved));
}

}  // namespace
}  // namespace cudacache
