// Cache-hit cost: one allocate + free pair that the cache serves without any device call,
// for cudacache (DeviceAllocator directly with its default policy and with PyTorch's native
// one, with and without record_history, with and without the stats page, on a created stream,
// and the C ABI) and CUB's CachingDeviceAllocator.
// Run in a Release build; on cudasim: cmake --build <dir> --target run_bench_cache_hit.
#include "device_allocator.h"

#include <cudacache/cudacache.h>

#include <benchmark/benchmark.h>
#include <cub/util_allocator.cuh>

#include <cstddef>

namespace {

void cache_hits(benchmark::State& state, const cudacache::Options& options,
                cudaStream_t stream = nullptr) {
  const auto size = static_cast<std::size_t>(state.range(0));
  cudacache::DeviceAllocator allocator(0, options);
  allocator.deallocate(allocator.allocate(size, stream));  // warm the cache
  for (auto _ : state) {
    void* p = allocator.allocate(size, stream);
    benchmark::DoNotOptimize(p);
    allocator.deallocate(p);
  }
  if (allocator.stats().num_device_alloc != 1) state.SkipWithError("not a cache hit");
}

void BM_DeviceAllocator(benchmark::State& state) { cache_hits(state, cudacache::Options{}); }

// The same without the stats page (publish_stats:False): the cost of publishing for
// cudacache-top is BM_DeviceAllocator minus this, measured side by side.
void BM_DeviceAllocatorStatsPageOff(benchmark::State& state) {
  cache_hits(state, cudacache::Options("publish_stats:False"));
}

void BM_DeviceAllocatorPyTorchPolicy(benchmark::State& state) {
  cache_hits(state, cudacache::Options("policy:pytorch"));
}

// On a stream the program created: each allocation checks that the stream still exists and
// belongs to the device (one cudaStreamGetDevice).
void BM_DeviceAllocatorOnAStream(benchmark::State& state) {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) state.SkipWithError("cudaStreamCreate");
  cache_hits(state, cudacache::Options{}, stream);
  cudaStreamDestroy(stream);
}

// History on: 3 entries per pair (alloc, free_requested, free_completed) into a ring of
// 100000, which wraps after the first ~33000 pairs.
void BM_DeviceAllocatorHistoryOn(benchmark::State& state) {
  cache_hits(state, cudacache::Options("record_history:100000"));
}

// History with C++ stacks (record_stacks:cpp): a backtrace and an interned stack per
// allocation, what _record_memory_history(stacks=...) costs.
void BM_DeviceAllocatorHistoryCppStacks(benchmark::State& state) {
  cache_hits(state, cudacache::Options("record_history:100000,record_stacks:cpp"));
}

// The growth detector watching (detect_growth:3, C++ stacks), no step marked in the loop.
void BM_DeviceAllocatorGrowthWatch(benchmark::State& state) {
  cache_hits(state, cudacache::Options("detect_growth:3"));
}

void BM_CApi(benchmark::State& state) {
  const auto size = static_cast<ssize_t>(state.range(0));
  cudacache_free(cudacache_malloc(size, 0, nullptr), size, 0, nullptr);
  for (auto _ : state) {
    void* p = cudacache_malloc(size, 0, nullptr);
    benchmark::DoNotOptimize(p);
    cudacache_free(p, size, 0, nullptr);
  }
  cudacache_empty_cache();
}

void BM_Cub(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  // Bins 512 B .. 16 MiB (growth 8) so that every size measured is cached, as for cudacache.
  cub::CachingDeviceAllocator allocator(8, 3, 8, std::size_t{1} << 30);
  void* p = nullptr;
  if (allocator.DeviceAllocate(&p, size, nullptr) != cudaSuccess) state.SkipWithError("alloc");
  allocator.DeviceFree(p);
  for (auto _ : state) {
    allocator.DeviceAllocate(&p, size, nullptr);
    benchmark::DoNotOptimize(p);
    allocator.DeviceFree(p);
  }
}

void sizes(benchmark::internal::Benchmark* b) {
  for (const long size : {512L, 64L << 10, 1L << 20, 16L << 20}) b->Arg(size);
}

BENCHMARK(BM_DeviceAllocator)->Apply(sizes);
BENCHMARK(BM_DeviceAllocatorStatsPageOff)->Apply(sizes);
BENCHMARK(BM_DeviceAllocatorPyTorchPolicy)->Apply(sizes);
BENCHMARK(BM_DeviceAllocatorOnAStream)->Apply(sizes);
BENCHMARK(BM_DeviceAllocatorHistoryOn)->Apply(sizes);
BENCHMARK(BM_DeviceAllocatorHistoryCppStacks)->Apply(sizes);
BENCHMARK(BM_DeviceAllocatorGrowthWatch)->Apply(sizes);
BENCHMARK(BM_CApi)->Apply(sizes);
BENCHMARK(BM_Cub)->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
