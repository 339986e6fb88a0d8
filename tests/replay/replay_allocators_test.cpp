// Each adapter replayed on a tiny trace whose figures are worked out by hand below.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "cudasim.h"
#include "replay_allocator.h"
#include "replayer.h"
#include "require_cudasim.h"
#include "trace_csv.h"

namespace cudacache::replay {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

// Sizes chosen so that every rounding is visible: cudasim counts cudaMalloc sizes rounded up
// to 256 B; CUB bins are powers of 8 from 512 B to 2 MiB, larger requests are exact.
const char* const kTinyTrace =
    "op,id,size,stream\n"
    "alloc,0,1000,0\n"
    "alloc,1,3000,0\n"
    "free,0,1000,0\n"
    "alloc,2,5000,0\n"
    "free,1,3000,0\n"
    "free,2,5000,0\n"
    "alloc,3,1500,0\n"
    "alloc,4,3145728,0\n"
    "free,4,3145728,0\n"
    "free,3,1500,0\n"
    "empty_cache,,,\n";

// Device calls with the given counts, every other kind 0.
DeviceCalls calls(std::initializer_list<std::pair<DeviceCallKind, std::uint64_t>> counts) {
  DeviceCalls result;
  for (const auto& [kind, count] : counts) result[kind] = count;
  return result;
}

class ReplayAllocators : public ::testing::Test {
 protected:
  void SetUp() override { CUDACACHE_REQUIRE_CUDASIM(); }
  Trace tiny_ = parse_trace_csv(kTinyTrace, "tiny.csv");
};

TEST_F(ReplayAllocators, NoCacheHoldsExactlyWhatIsLive) {
  ASSERT_EQ(tiny_.peak_requested_bytes, 1500u + 3145728);
  const ReplayResult r = replay_trace(tiny_, "nocache", 64 * kMiB);
  EXPECT_FALSE(r.oom);
  EXPECT_EQ(r.events_replayed, tiny_.events.size());
  EXPECT_EQ(r.peak_allocated_bytes, tiny_.peak_requested_bytes);
  EXPECT_EQ(r.peak_reserved_bytes, tiny_.peak_requested_bytes);
  // cudasim's peak: 1536 + 3145728 (1500 rounded up to 256 B) beats 3072 + 5120.
  EXPECT_EQ(r.device_peak_bytes, 1536u + 3145728);
  EXPECT_EQ(r.device_mallocs, 5u);
  EXPECT_EQ(r.device_frees, 5u);
  EXPECT_EQ(r.capacity_bytes, 64 * kMiB);
  // By kind: one cudaMalloc per alloc, one cudaFree per free, nothing else.
  EXPECT_EQ(r.device_calls, calls({{DeviceCallKind::kMalloc, 5}, {DeviceCallKind::kFree, 5}}));
}

TEST_F(ReplayAllocators, CubCachesBinnedBlocksAndFreesLargeOnes) {
  const ReplayResult r = replay_trace(tiny_, "cub", 64 * kMiB);
  EXPECT_FALSE(r.oom);
  // 1000 and 3000 B take 4096 B bins (two cudaMallocs), 5000 B a 32 KiB bin (one more);
  // 1500 B reuses a cached 4096 B block; 3 MiB is above the largest bin: cudaMalloc'd exactly
  // and cudaFree'd at once. empty_cache frees the three cached blocks.
  EXPECT_EQ(r.device_mallocs, 4u);
  EXPECT_EQ(r.device_frees, 4u);
  EXPECT_EQ(r.device_calls, calls({{DeviceCallKind::kMalloc, 4}, {DeviceCallKind::kFree, 4}}));
  // Peak while the 3 MiB block is live: live 4096 + 3 MiB, cached 4096 + 32768.
  EXPECT_EQ(r.peak_allocated_bytes, 4096u + 3145728);
  EXPECT_EQ(r.peak_reserved_bytes, 4096u + 3145728 + 4096 + 32768);
  EXPECT_EQ(r.device_peak_bytes, r.peak_reserved_bytes);
}

TEST_F(ReplayAllocators, OutOfMemoryIsRecordedAndCleanedUp) {
  const Trace trace =
      parse_trace_csv("op,id,size,stream\nalloc,0,4194304,0\nalloc,1,4194304,0\n", "oom.csv");
  for (const std::string name : {"nocache", "cub"}) {
    SCOPED_TRACE(name);
    const ReplayResult r = replay_trace(trace, name, 6 * kMiB);
    EXPECT_TRUE(r.oom);
    EXPECT_EQ(r.oom_event, 1u);
    EXPECT_EQ(r.events_replayed, 2u);
    EXPECT_FALSE(r.oom_message.empty());
    cudasim_counters counters{};
    ASSERT_EQ(cudasim_get_counters(0, &counters), 0);
    EXPECT_EQ(counters.in_use_bytes, 0u);  // the live 4 MiB block was freed after the OOM
  }
  // A failed call costs the driver too: nocache's refused cudaMalloc is a call, not a malloc.
  const ReplayResult r = replay_trace(trace, "nocache", 6 * kMiB);
  EXPECT_EQ(r.device_mallocs, 1u);
  EXPECT_EQ(r.device_calls, calls({{DeviceCallKind::kMalloc, 2}}));
}

// Issue 12, defect 5: a size above PTRDIFF_MAX (valid in a CSV) made the cudacache adapters
// throw an invalid-argument error that ended the whole comparison; it is an out-of-memory
// result, as for cub and nocache.
TEST_F(ReplayAllocators, ASizeNoDeviceCanHoldIsAnOutOfMemoryResult) {
  const Trace trace = parse_trace_csv(
      "op,id,size,stream\nalloc,0,4096,0\nalloc,1,9223372036854775808,0\n", "huge.csv");
  std::vector<std::string> names{"nocache", "cub"};
  if (cudacache_adapter_built()) {
    names.insert(names.end(),
                 {"cudacache", "pytorch", "pytorch-expandable", "cudacache:policy:pytorch"});
  }
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const ReplayResult r = replay_trace(trace, name, 64 * kMiB);
    EXPECT_TRUE(r.oom);
    EXPECT_EQ(r.oom_event, 1u);
    EXPECT_FALSE(r.oom_message.empty());
  }
}

TEST_F(ReplayAllocators, StreamsAreCreatedPerTraceStream) {
  const Trace trace = parse_trace_csv(
      "op,id,size,stream\nalloc,0,100,1\nalloc,1,100,2\nfree,0,100,1\nfree,1,100,2\nalloc,2,100,"
      "0\nfree,2,100,0\n",
      "streams.csv");
  EXPECT_EQ(trace.stream_count, 3u);
  for (const std::string name : {"nocache", "cub"}) {
    const ReplayResult r = replay_trace(trace, name, 64 * kMiB);
    EXPECT_FALSE(r.oom) << name;
  }
}

TEST_F(ReplayAllocators, UnknownNamesAreRejectedWithTheValidOnes) {
  try {
    make_replay_allocator("tcmalloc");
    FAIL();
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("unknown allocator 'tcmalloc' (valid: cudacache"),
              std::string::npos);
  }
}

class CudacacheAdapters : public ReplayAllocators {
 protected:
  void SetUp() override {
    ReplayAllocators::SetUp();
    if (!cudacache_adapter_built())
      GTEST_SKIP() << "built with CUDACACHE_REPLAY_WITH_CUDACACHE=OFF";
  }
};

// PyTorch's native policy, as documented for CUDACachingAllocator: 512 B rounding; requests up
// to 1 MiB from 2 MiB small-pool segments; larger ones below 10 MiB get a 20 MiB segment;
// others a segment of the request rounded up to 2 MiB. Best fit first reuses free space.
TEST_F(CudacacheAdapters, PytorchIsPyTorchsNativePolicy) {
  const Trace trace = parse_trace_csv(
      "op,id,size,stream\n"
      "alloc,0,1000,0\n"       // 1024 B block in a new 2 MiB segment
      "alloc,1,5242880,0\n"    // 5 MiB in a new 20 MiB segment (15 MiB left free)
      "alloc,2,16777216,0\n",  // 16 MiB does not fit the 15 MiB: a new 16 MiB segment
      "policy.csv");
  const ReplayResult r = replay_trace(trace, "pytorch", 256 * kMiB);
  EXPECT_FALSE(r.oom);
  EXPECT_EQ(r.peak_allocated_bytes, 1024u + 5 * kMiB + 16 * kMiB);
  EXPECT_EQ(r.peak_reserved_bytes, (2 + 20 + 16) * kMiB);
  EXPECT_EQ(r.device_peak_bytes, (2 + 20 + 16) * kMiB);
  EXPECT_EQ(r.device_mallocs, 3u);
  EXPECT_EQ(r.device_calls, calls({{DeviceCallKind::kMalloc, 3}}));
}

// PyTorch's policy with expandable_segments:True (Note [Expandable Segments] in PyTorch's
// CUDACachingAllocator.cpp): one address reservation per (pool, stream); physical memory in
// 2 MiB (small pool) or 20 MiB (large pool) cuMemCreate chunks, each cuMemMap'ed at the end of
// its segment as it grows, with one cuMemSetAccess per growth; empty_cache synchronizes, unmaps
// and releases every free chunk and frees a reservation left empty. These are the counts
// PyTorch 2.15 itself makes on cudasim (torch-expandable, tests/torch/test_torch_replay.py):
// the 1000 B block maps one 2 MiB chunk; the 5 MiB block one 20 MiB chunk; the 16 MiB block
// does not fit the 15 MiB left, so the segment grows by one more 20 MiB chunk.
TEST_F(CudacacheAdapters, PytorchExpandableIsPyTorchsExpandablePolicy) {
  const Trace trace = parse_trace_csv(
      "op,id,size,stream\n"
      "alloc,0,1000,0\n"
      "alloc,1,5242880,0\n"
      "alloc,2,16777216,0\n"
      "free,0,1000,0\n"
      "free,1,5242880,0\n"
      "free,2,16777216,0\n"
      "empty_cache,,,\n",
      "expandable.csv");
  const ReplayResult r = replay_trace(trace, "pytorch-expandable", 256 * kMiB);
  EXPECT_FALSE(r.oom) << r.oom_message;
  EXPECT_EQ(r.peak_allocated_bytes, 1024u + 5 * kMiB + 16 * kMiB);
  EXPECT_EQ(r.peak_reserved_bytes, (2 + 20 + 20) * kMiB);
  EXPECT_EQ(r.device_peak_bytes, (2 + 20 + 20) * kMiB);
  EXPECT_EQ(r.device_calls, calls({{DeviceCallKind::kCreate, 3},
                                   {DeviceCallKind::kRelease, 3},
                                   {DeviceCallKind::kMap, 3},
                                   {DeviceCallKind::kUnmap, 3},
                                   {DeviceCallKind::kSetAccess, 3},
                                   {DeviceCallKind::kSynchronize, 2},
                                   {DeviceCallKind::kReserve, 2},
                                   {DeviceCallKind::kAddressFree, 2}}));
  // The native policy on the same trace: three cudaMalloc'd segments, freed by empty_cache.
  const ReplayResult native = replay_trace(trace, "pytorch", 256 * kMiB);
  EXPECT_EQ(native.device_calls, calls({{DeviceCallKind::kMalloc, 3}, {DeviceCallKind::kFree, 3}}));
}

// cudacache's default is its own policy: driver-VMM pages, no cudaMalloc; `pytorch` stays
// PyTorch's native policy, spelled out.
TEST_F(CudacacheAdapters, DefaultOptionsAreCudacachesOwnPolicy) {
  const ReplayResult cudacache = replay_trace(tiny_, "cudacache", 64 * kMiB);
  const ReplayResult own = replay_trace(tiny_, "cudacache:policy:cudacache", 64 * kMiB);
  const ReplayResult pytorch = replay_trace(tiny_, "pytorch", 64 * kMiB);
  EXPECT_FALSE(cudacache.oom);
  EXPECT_EQ(cudacache.peak_allocated_bytes, own.peak_allocated_bytes);
  EXPECT_EQ(cudacache.peak_reserved_bytes, own.peak_reserved_bytes);
  ASSERT_TRUE(cudacache.device_calls && pytorch.device_calls);
  EXPECT_EQ(cudacache.device_calls, own.device_calls);
  EXPECT_EQ((*cudacache.device_calls)[DeviceCallKind::kMalloc], 0u);
  EXPECT_GT((*cudacache.device_calls)[DeviceCallKind::kCreate], 0u);
  EXPECT_GT((*pytorch.device_calls)[DeviceCallKind::kMalloc], 0u);
  ASSERT_TRUE(cudacache.peak_allocated_bytes && cudacache.peak_reserved_bytes);
  EXPECT_GE(*cudacache.peak_allocated_bytes, tiny_.peak_requested_bytes);
  EXPECT_GE(*cudacache.peak_reserved_bytes, *cudacache.peak_allocated_bytes);
  // Pages are multiples of 2 MiB, so cudasim's 256 B rounding changes nothing.
  EXPECT_EQ(cudacache.device_peak_bytes, cudacache.peak_reserved_bytes);
}

TEST_F(CudacacheAdapters, ConfigStringsAreParsedByCudacache) {
  EXPECT_NO_THROW(
      validate_allocator_name("cudacache:max_split_size_mb:128,roundup_power2_divisions:4"));
  EXPECT_THROW(validate_allocator_name("cudacache:no_such_key:1"), std::invalid_argument);
  const ReplayResult r = replay_trace(tiny_, "cudacache:roundup_power2_divisions:4", 64 * kMiB);
  EXPECT_FALSE(r.oom);
}

}  // namespace
}  // namespace cudacache::replay
