// VMM checks for a real GPU (run by run_gpu_checks.sh; on cudasim by CTest, where the timings
// mean nothing but every call path is exercised):
//   1. the cost of each device call the allocators make, measured through cudacache's own
//      backend (the figures tools/replay/device_call_costs.inc estimates from published A100
//      numbers): median microseconds of N calls, 2 MiB to 140 MiB where size matters;
//   2. how much device memory a cudaMalloc of a given size takes (cudaMemGetInfo before and
//      after 8 of them), and what a 3 MiB cudaMalloc and small ones beside it hold, step by
//      step, against what cudasim's two models hold: by default each allocation its size
//      rounded to 256 B; with CUDASIM_MALLOC_PAGE=2MiB whole 2 MiB pages for one of more than
//      1 MiB, small ones sharing pages (PyTorch's pull request 17120 describes the driver so
//      since Pascal). Which one this GPU matches decides what CUB and nocache need in the
//      replay tables (their minimum device) on a real GPU (README, "cudasim");
//   3. PyTorch's expandable segments and cudacache's default policy (pages moved under the cap)
//      on this driver: random allocations under a memory cap with a byte pattern in every live
//      block, checked after every step, and empty_cache every 64 steps;
//   4. cudacache's default policy filling the whole device, uncapped: it assumes the device is
//      its own until a page cannot be created (Note [Room without asking]), while the CUDA
//      context and another user (a cudaMalloc of 256 MiB here) hold memory it does not know
//      of. The first refused page must make it read the device and go on in pages that fit,
//      not run out of memory early: it must serve all but 1 % of what the device had free.
// Prints one table and "vmm checks: ok" (exit 0), or what failed (exit 1).
//
//   vmm_checks [repetitions]   (default 20)
#include "device_allocator.h"
#include "device_api.h"
#include "segment_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

using cudacache::PageHandle;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMiB = std::size_t{1} << 20;
int g_failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what.c_str());
    ++g_failures;
  }
}

double micros(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void row(const char* kind, std::size_t bytes, const std::vector<double>& samples) {
  std::printf("  %-14s %6zu MiB  %10.2f us  (%zu calls)\n", kind, bytes / kMiB, median(samples),
              samples.size());
}

// Each repetition: create, map, set_access, unmap, release one page, and reserve/free a range.
void measure_pages(cudacache::SegmentBackend& backend, std::size_t page, int repetitions) {
  std::vector<double> create, map, access, unmap, release, reserve, address_free;
  for (int i = 0; i < repetitions; ++i) {
    std::uintptr_t base = 0;
    auto start = Clock::now();
    cudaError_t error = backend.reserve(64 * page, &base);
    reserve.push_back(micros(start));
    check(error == cudaSuccess, "reserve");
    PageHandle handle = 0;
    start = Clock::now();
    error = backend.create_page(page, &handle);
    create.push_back(micros(start));
    check(error == cudaSuccess, "create_page");
    start = Clock::now();
    error = backend.map(base, page, handle);
    map.push_back(micros(start));
    check(error == cudaSuccess, "map");
    start = Clock::now();
    error = backend.set_access(base, page);
    access.push_back(micros(start));
    check(error == cudaSuccess, "set_access");
    check(cudaMemset(reinterpret_cast<void*>(base), 1, page) == cudaSuccess, "memset of a page");
    cudaDeviceSynchronize();
    start = Clock::now();
    error = backend.unmap(base, page);
    unmap.push_back(micros(start));
    check(error == cudaSuccess, "unmap");
    start = Clock::now();
    error = backend.release_page(handle);
    release.push_back(micros(start));
    check(error == cudaSuccess, "release_page");
    start = Clock::now();
    error = backend.unreserve(base, 64 * page);
    address_free.push_back(micros(start));
    check(error == cudaSuccess, "unreserve");
  }
  row("create", page, create);
  row("map", page, map);
  row("set_access", page, access);
  row("unmap", page, unmap);
  row("release", page, release);
  row("reserve", 64 * page, reserve);
  row("address_free", 64 * page, address_free);
}

void measure_malloc(std::size_t bytes, int repetitions) {
  std::vector<double> malloc_times, free_times, sync_times;
  for (int i = 0; i < repetitions; ++i) {
    void* p = nullptr;
    auto start = Clock::now();
    const cudaError_t error = cudaMalloc(&p, bytes);
    malloc_times.push_back(micros(start));
    check(error == cudaSuccess, "cudaMalloc");
    start = Clock::now();
    cudaDeviceSynchronize();
    sync_times.push_back(micros(start));
    start = Clock::now();
    cudaFree(p);
    free_times.push_back(micros(start));
  }
  row("malloc", bytes, malloc_times);
  row("free", bytes, free_times);
  if (bytes == 2 * kMiB) row("synchronize", 0, sync_times);
}

// cudaMemGetInfo, which cudacache's policy reads to judge whether the device has room (costed
// 10.1 us in tools/replay/device_call_costs.cpp).
void measure_mem_get_info(int repetitions) {
  std::vector<double> times;
  for (int i = 0; i < repetitions * 10; ++i) {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    const auto start = Clock::now();
    const cudaError_t error = cudaMemGetInfo(&free_bytes, &total_bytes);
    times.push_back(micros(start));
    check(error == cudaSuccess, "cudaMemGetInfo");
  }
  row("mem_get_info", 0, times);
}

// What 8 cudaMallocs of `bytes` take from cudaMemGetInfo's free memory, per allocation.
void measure_malloc_footprint(std::size_t bytes) {
  constexpr int kCount = 8;
  std::size_t free_before = 0;
  std::size_t total = 0;
  check(cudaMemGetInfo(&free_before, &total) == cudaSuccess, "cudaMemGetInfo");
  std::vector<void*> pointers;
  for (int i = 0; i < kCount; ++i) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes) == cudaSuccess, "cudaMalloc for the footprint");
    pointers.push_back(p);
  }
  std::size_t free_after = 0;
  check(cudaMemGetInfo(&free_after, &total) == cudaSuccess, "cudaMemGetInfo");
  for (void* p : pointers) cudaFree(p);
  const double taken =
      free_before >= free_after ? static_cast<double>(free_before - free_after) / kCount : 0.0;
  std::printf("  malloc footprint %12zu B requested  %14.0f B taken each  (%.4f x)\n", bytes, taken,
              taken / static_cast<double>(bytes));
  // Device memory cannot hold a block in less than its size (a driver may hand small blocks
  // out of memory it took earlier, hence only for 1 MiB and more).
  if (bytes >= kMiB) check(taken >= static_cast<double>(bytes), "a cudaMalloc takes its size");
}

// The sequence of tests/cudasim/probe.cpp's shared_pages mode: what cudaMemGetInfo shows held
// after each step, beside what cudasim holds by default and with CUDASIM_MALLOC_PAGE=2MiB
// (config_test's expectations). Printed, not checked: which model the driver follows is what
// this measures. Also whether a cudaMalloc of just over 1 MiB starts on a 2 MiB boundary. On
// cudasim, CTest sets VMM_CHECKS_EXPECT_MALLOC_MODEL (`default` or `pages`) to the model it runs,
// and a mismatch fails.
void compare_malloc_models() {
  std::size_t free_at_start = 0;
  std::size_t total = 0;
  check(cudaMemGetInfo(&free_at_start, &total) == cudaSuccess, "cudaMemGetInfo");
  std::vector<std::size_t> held;
  auto step = [&] {
    std::size_t free_now = 0;
    check(cudaMemGetInfo(&free_now, &total) == cudaSuccess, "cudaMemGetInfo");
    held.push_back(free_at_start >= free_now ? free_at_start - free_now : 0);
  };
  void* large = nullptr;
  void* small[4] = {};
  const std::size_t small_sizes[4] = {512 * 1024, 512 * 1024, 1, kMiB};
  check(cudaMalloc(&large, 3 * kMiB) == cudaSuccess, "cudaMalloc 3 MiB");
  step();
  for (int i = 0; i < 4; ++i) {
    check(cudaMalloc(&small[i], small_sizes[i]) == cudaSuccess, "cudaMalloc small");
    step();
  }
  cudaFree(large);
  step();
  for (void* p : small) {
    cudaFree(p);
    step();
  }
  const std::size_t by_default[] = {3145728, 3670016, 4194304, 4194560, 5243136,
                                    2097408, 1573120, 1048832, 1048576, 0};
  const std::size_t in_pages[] = {4194304, 4194304, 4194304, 6291456, 6291456,
                                  4194304, 4194304, 2097152, 2097152, 0};
  bool exact_default = held.size() == std::size(by_default);
  bool exact_pages = held.size() == std::size(in_pages);
  std::printf(
      "  malloc model: bytes held after each step (GPU, its change, cudasim's default, "
      "CUDASIM_MALLOC_PAGE=2MiB)\n");
  for (std::size_t i = 0; i < held.size() && i < std::size(in_pages); ++i) {
    const long long change =
        static_cast<long long>(held[i]) - static_cast<long long>(i == 0 ? 0 : held[i - 1]);
    std::printf("    %10zu  %+11lld  %10zu  %10zu\n", held[i], change, by_default[i], in_pages[i]);
    exact_default = exact_default && held[i] == by_default[i];
    exact_pages = exact_pages && held[i] == in_pages[i];
  }
  // On a GPU, memory the context or the footprint checks above left in partly used pages may
  // take the small allocations without a change: the verdict rests on the 3 MiB one, which
  // takes 3 MiB in 256-byte units and two fresh 2 MiB pages in pages.
  const std::size_t large_took = held.empty() ? 0 : held[0];
  const bool pages = large_took == 4 * kMiB;
  const bool units = large_took == 3 * kMiB;
  std::printf("  malloc model: the GPU matches %s%s\n",
              pages   ? "CUDASIM_MALLOC_PAGE=2MiB"
              : units ? "cudasim's default (256-byte units)"
                      : "neither (compare the columns)",
              (pages && exact_pages) || (units && exact_default) ? ", step for step" : "");
  if (const char* expected = std::getenv("VMM_CHECKS_EXPECT_MALLOC_MODEL"); expected != nullptr) {
    // On cudasim, where nothing else holds device memory, every step must match.
    const std::string model = expected;
    check(model == "pages" ? pages && exact_pages : model == "default" && units && exact_default,
          "the malloc model VMM_CHECKS_EXPECT_MALLOC_MODEL names");
  }
  void* over_a_mib = nullptr;
  check(cudaMalloc(&over_a_mib, kMiB + 1) == cudaSuccess, "cudaMalloc 1 MiB + 1");
  // On cudasim the answer is the host's mmap's, not a model's.
  std::printf("  malloc model: a cudaMalloc of 1 MiB + 1 B starts %s a 2 MiB boundary\n",
              reinterpret_cast<std::uintptr_t>(over_a_mib) % (2 * kMiB) == 0 ? "on" : "off");
  cudaFree(over_a_mib);
}

// A byte pattern per live block, checked through cudaMemcpy after every step, under `policy`:
// PyTorch's expandable segments, or cudacache's default policy (pages moved under the cap).
void expandable_pattern_check(const std::string& policy, int steps) {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  // Cap at 1 GiB (or the device) so that empty_cache and the ladder's unmapping are exercised.
  const double fraction =
      std::min(1.0, static_cast<double>(1024 * kMiB) / static_cast<double>(total_bytes));
  cudacache::DeviceAllocator allocator(
      0, cudacache::Options(policy + "per_process_memory_fraction:" + std::to_string(fraction)));
  check(allocator.expandable(), "driver-VMM pages are available on this device");
  std::mt19937_64 random(7);
  std::map<void*, std::pair<std::size_t, unsigned char>> live;
  int ooms = 0;
  for (int step = 0; step < steps && g_failures == 0; ++step) {
    if (random() % 100 < 55 && live.size() < 48) {
      const auto size = static_cast<std::size_t>(
          std::exp2(std::uniform_real_distribution<double>(8.0, 27.0)(random)));
      try {
        void* p = allocator.allocate(size, nullptr);
        const auto value = static_cast<unsigned char>(step);
        check(cudaMemset(p, value, size) == cudaSuccess, "cudaMemset of a block");
        live[p] = {size, value};
      } catch (const cudacache::OutOfMemoryError&) {
        ++ooms;
      }
    } else if (!live.empty()) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(random() % live.size()));
      allocator.deallocate(it->first);
      live.erase(it);
    }
    if (step % 64 == 63) allocator.empty_cache();
    for (const auto& [p, pattern] : live) {
      for (std::size_t offset : {std::size_t{0}, pattern.first / 2, pattern.first - 1}) {
        unsigned char byte = 0;
        cudaMemcpy(&byte, static_cast<char*>(p) + offset, 1, cudaMemcpyDeviceToHost);
        check(byte == pattern.second, "block contents intact at step " + std::to_string(step));
      }
    }
  }
  for (const auto& [p, pattern] : live) allocator.deallocate(p);
  allocator.empty_cache();
  const cudacache::MemoryStats stats = allocator.stats();
  check(stats.reserved_bytes[cudacache::kAllPools].current == 0, "everything unmapped at the end");
  std::printf(
      "  pattern check (%s): %d steps, %d out-of-memory errors survived, %lld maps, "
      "%lld unmaps\n",
      policy.empty() ? "default policy" : policy.substr(0, policy.size() - 1).c_str(), steps, ooms,
      static_cast<long long>(stats.num_device_alloc),
      static_cast<long long>(stats.num_device_free));
}

// Check 4: blocks of 48 MiB + 1 KiB (pages of one block and end granules, as a real program's)
// until the device refuses, each marked at both ends and checked at the end.
void fill_device_check() {
  void* other = nullptr;  // memory the allocator's assumption does not know of
  check(cudaMalloc(&other, 256 * kMiB) == cudaSuccess, "cudaMalloc of another user's 256 MiB");
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess, "cudaMemGetInfo");
  constexpr std::size_t kBlock = 48 * kMiB + 1024;
  std::vector<void*> blocks;
  std::size_t served = 0;
  const auto start = Clock::now();
  {
    cudacache::DeviceAllocator allocator(0, cudacache::Options(""));
    try {
      while (served + kBlock <= free_bytes) {
        void* p = allocator.allocate(kBlock, nullptr);
        const auto mark = static_cast<int>(blocks.size() % 251);
        check(cudaMemset(p, mark, 1) == cudaSuccess, "cudaMemset of a block's first byte");
        check(cudaMemset(static_cast<char*>(p) + kBlock - 1, mark, 1) == cudaSuccess,
              "cudaMemset of a block's last byte");
        blocks.push_back(p);
        served += kBlock;
      }
    } catch (const cudacache::OutOfMemoryError&) {
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      for (const std::size_t offset : {std::size_t{0}, kBlock - 1}) {
        unsigned char byte = 0;
        cudaMemcpy(&byte, static_cast<char*>(blocks[i]) + offset, 1, cudaMemcpyDeviceToHost);
        check(static_cast<std::size_t>(byte) == i % 251,
              "a block's bytes intact after the device filled");
      }
    }
    const cudacache::MemoryStats stats = allocator.stats();
    std::printf(
        "  fill the device (default policy, 256 MiB held by another user): %zu of %zu MiB free "
        "served in %zu blocks, %.0f MiB reserved, %lld maps, %.1f ms\n",
        served / kMiB, free_bytes / kMiB, blocks.size(),
        static_cast<double>(stats.reserved_bytes[cudacache::kAllPools].current) / kMiB,
        static_cast<long long>(stats.num_device_alloc),
        std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    check(served + total_bytes / 100 >= free_bytes,
          "the default policy serves all but 1 % of the device's free memory");
    for (void* p : blocks) allocator.deallocate(p);
    allocator.empty_cache();
    check(allocator.stats().reserved_bytes[cudacache::kAllPools].current == 0,
          "everything unmapped after filling the device");
  }
  check(cudaFree(other) == cudaSuccess, "cudaFree of the other user's memory");
}

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  if (cudacache::device_api::device_count() == 0) {
    std::printf("vmm checks: no CUDA device\n");
    return 2;
  }
  cudaFree(nullptr);  // create the context outside the timings
  auto backend = cudacache::make_segment_backend(0, true);
  if (backend->page_granularity() == 0) {
    std::printf("vmm checks: this device or driver has no VMM support\n");
    return 1;
  }
  std::printf("device call costs, median of %d (cudacache's own backend)\n", repetitions);
  measure_malloc(2 * kMiB, repetitions);
  measure_malloc(20 * kMiB, repetitions);
  // 2 and 20 MiB are PyTorch's pages; cudacache's policy also makes the sizes between (Note
  // [Pages shrink as the device fills]) and, with room on a device of more than 20 GiB, pages of
  // up to 1/1024 of it (Note [Fewer pages with room]: 80 MiB on 80 GiB, 140 MiB on an H200),
  // all of which the replay estimate costs as one create each.
  for (const std::size_t page : {2 * kMiB, 6 * kMiB, 12 * kMiB, 20 * kMiB, 80 * kMiB, 140 * kMiB}) {
    measure_pages(*backend, page, repetitions);
  }
  measure_mem_get_info(repetitions);
  std::printf("device memory taken by one cudaMalloc (8 of each size, cudaMemGetInfo)\n");
  for (const std::size_t bytes :
       {std::size_t{512}, kMiB + 512, 2 * kMiB + 512, 20 * kMiB + 512, 100 * kMiB + 512}) {
    measure_malloc_footprint(bytes);
  }
  compare_malloc_models();
  expandable_pattern_check("expandable_segments:True,", std::max(200, repetitions * 20));
  expandable_pattern_check("", std::max(200, repetitions * 20));
  fill_device_check();
  std::printf("vmm checks: %s\n", g_failures == 0 ? "ok" : "FAILED");
  return g_failures == 0 ? 0 : 1;
}
