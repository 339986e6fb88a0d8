// Fuzzer: an op language that drives a DeviceAllocator on cudasim and checks, after every op,
// what must always hold. The input is a program:
//   byte 0: configuration (every policy, with and without max_split_size_mb, roundup,
//           garbage collection, a memory fraction, history, a largest page, cut pages) and the
//           device (0 or 1);
//   byte 1: the device's capacity (32 MiB, 128 MiB or 512 MiB);
//   then ops, one byte each plus operands: allocate (size class and size, stream), free,
//   record_stream, empty_cache, fail the next device allocation, change the capacity, turn on a
//   retry hook that frees the oldest live block, reset the peak statistics.
// Checked after every op: live blocks do not overlap and keep the byte pattern written at
// allocation (first, middle and last byte); requested bytes match the live blocks (at least
// them once record_stream was used), allocated bytes cover them and the allocation count
// equals theirs; reserved bytes equal cudasim's bytes in use. At the end, with
// everything freed and the allocator destroyed, the device holds nothing. Any other exception
// than an out-of-memory error, and any violated check, aborts with a message.
#include "device_allocator.h"
#include "options.h"
#include "retry_hooks.h"

#include <cuda_runtime_api.h>
#include <cudasim.h>

#include <cudacache/cudacache.hpp>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <string>

namespace {

using cudacache::DeviceAllocator;
using cudacache::MemoryStats;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kMaxLive = 48;

constexpr std::array<const char*, 13> kConfigurations = {
    "policy:pytorch",
    "policy:pytorch,expandable_segments:True",
    "",  // cudacache's policy, the default
    "max_split_size_mb:40,roundup_power2_divisions:4",
    "policy:pytorch,max_split_size_mb:40,garbage_collection_threshold:0.5,"
    "per_process_memory_fraction:0.5",
    "record_history:64",
    "per_process_memory_fraction:0.5",
    "expandable_segments:True,record_history:64,per_process_memory_fraction:0.75",
    "policy:pytorch,roundup_power2_divisions:[1:2,>:4],record_history:16",
    "garbage_collection_threshold:0.6,per_process_memory_fraction:0.8",
    "max_page_size_mb:2",
    "max_page_size_mb:6,per_process_memory_fraction:0.75",
    "cut_pages:True",
};
constexpr std::array<std::size_t, 3> kCapacities = {32 * kMiB, 128 * kMiB, 512 * kMiB};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_allocator_ops: %s\n", what.c_str());
  std::abort();
}

void check(bool condition, const std::string& what) {
  if (!condition) fail(what);
}

void check_cuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorString(error));
}

// Reads the program byte by byte; past the end every read is 0 and done() is true.
class Program {
 public:
  Program(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool done() const { return next_ >= size_; }
  std::uint8_t byte() { return next_ < size_ ? data_[next_++] : 0; }
  std::uint16_t word() { return static_cast<std::uint16_t>(byte() | (byte() << 8)); }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t next_ = 0;
};

struct Live {
  std::size_t size;
  unsigned char pattern;
};

struct State {
  int device = 0;
  std::array<cudaStream_t, 3> streams{};
  std::map<std::uintptr_t, Live> live;  // by address
  std::uintptr_t oldest = 0;            // the block the retry hook frees
  bool hook_frees = false;
  bool recorded = false;  // record_stream was called
};

// Sizes across both pools and the segment-size boundaries: 0, small (< 1 MiB), medium
// (1-16 MiB in 256 KiB steps), large (1-48 MiB in 1 MiB steps, plus a few bytes).
std::size_t draw_size(std::uint16_t word) {
  const std::size_t value = word >> 2;
  switch (word & 3) {
    case 0: return value % 64 == 0 ? 0 : value % kMiB + 1;
    case 1: return value * 37 % kMiB + 1;
    case 2: return (value % 64 + 1) * 256 * 1024;
    default: return (value % 48 + 1) * kMiB + value % 7;
  }
}

std::uint64_t device_bytes_in_use(int device) {
  cudasim_counters counters{};
  check(cudasim_get_counters(device, &counters) == 0, "cudasim_get_counters");
  return counters.in_use_bytes;
}

unsigned char read_byte(std::uintptr_t address) {
  unsigned char byte = 0;
  check_cuda(cudaMemcpy(&byte, reinterpret_cast<void*>(address), 1, cudaMemcpyDeviceToHost),
             "cudaMemcpy of a live block");
  return byte;
}

void check_invariants(const DeviceAllocator& allocator, const State& state, std::size_t op) {
  const std::string where = " after op " + std::to_string(op);
  std::uintptr_t end = 0;
  std::int64_t requested = 0;
  for (const auto& [address, block] : state.live) {
    check(address >= end, "live blocks overlap" + where);
    end = address + block.size;
    requested += static_cast<std::int64_t>(block.size);
    for (std::size_t offset : {std::size_t{0}, block.size / 2, block.size - 1}) {
      check(read_byte(address + offset) == block.pattern,
            "a live block lost its contents at offset " + std::to_string(offset) + where);
    }
  }
  const MemoryStats stats = allocator.stats();
  const auto all = cudacache::kAllPools;
  // A block freed after record_stream stays active (requested) until its events are seen
  // complete, at a later allocation, as in PyTorch; without record_stream the count is exact.
  const std::int64_t counted = stats.requested_bytes[all].current;
  check(state.recorded ? counted >= requested : counted == requested,
        "requested_bytes " + std::to_string(counted) + " against live requests " +
            std::to_string(requested) + where);
  check(stats.allocated_bytes[all].current >= requested, "allocated < requested" + where);
  check(stats.allocation[all].current == static_cast<std::int64_t>(state.live.size()),
        "allocation count differs from the live blocks" + where);
  const std::uint64_t in_use = device_bytes_in_use(state.device);
  check(static_cast<std::uint64_t>(stats.reserved_bytes[all].current) == in_use,
        "reserved_bytes " + std::to_string(stats.reserved_bytes[all].current) +
            " != cudasim's bytes in use " + std::to_string(in_use) + where);
}

void allocate(DeviceAllocator& allocator, State& state, std::size_t size, cudaStream_t stream,
              unsigned char pattern) {
  void* ptr = nullptr;
  try {
    ptr = allocator.allocate(size, stream);
  } catch (const cudacache::OutOfMemoryError&) {
    return;  // a result, not a failure
  }
  if (size == 0) {
    check(ptr == nullptr, "a 0-byte allocation returned a pointer");
    return;
  }
  check(ptr != nullptr, "an allocation returned NULL without an error");
  check(reinterpret_cast<std::uintptr_t>(ptr) % 512 == 0, "a block is not 512-byte aligned");
  check_cuda(cudaMemsetAsync(ptr, pattern, size, stream), "cudaMemsetAsync");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  check(state.live.emplace(address, Live{size, pattern}).second,
        "a live block was handed out again");
  if (state.oldest == 0) state.oldest = address;
}

void free_block(DeviceAllocator& allocator, State& state, std::uintptr_t address) {
  allocator.deallocate(reinterpret_cast<void*>(address));
  state.live.erase(address);
  if (state.oldest == address) state.oldest = state.live.empty() ? 0 : state.live.begin()->first;
}

void run(const std::uint8_t* data, std::size_t size, State& state) {
  Program program(data, size);
  const std::uint8_t setup = program.byte();
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  state.device = devices > 1 ? (setup >> 7) : 0;
  check_cuda(cudaSetDevice(state.device), "cudaSetDevice");
  check(device_bytes_in_use(state.device) == 0, "the device is not empty at the start");
  check(cudasim_set_capacity(state.device, kCapacities[program.byte() % kCapacities.size()]) == 0,
        "cudasim_set_capacity");
  for (std::size_t i = 1; i < state.streams.size(); ++i) {
    check_cuda(cudaStreamCreate(&state.streams[i]), "cudaStreamCreate");
  }
  {
    auto hooks = std::make_shared<cudacache::RetryHooks>();
    DeviceAllocator* self = nullptr;
    hooks->add([&state, &self](const cudacache::OomContext&) {
      if (!state.hook_frees || state.oldest == 0 || self == nullptr) return false;
      free_block(*self, state, state.oldest);
      return true;
    });
    DeviceAllocator allocator(
        state.device, cudacache::Options(kConfigurations[(setup & 0x7f) % kConfigurations.size()]),
        hooks);
    self = &allocator;
    for (std::size_t op = 0; !program.done(); ++op) {
      const std::uint8_t code = program.byte();
      switch (code % 10) {
        case 0:
        case 1:
        case 2: {
          const std::size_t bytes = draw_size(program.word());
          const cudaStream_t stream = state.streams[program.byte() % state.streams.size()];
          if (state.live.size() < kMaxLive) {
            allocate(allocator, state, bytes, stream, static_cast<unsigned char>(op | 1));
          }
          break;
        }
        case 3:
        case 4:
          if (!state.live.empty()) {
            auto it = state.live.begin();
            std::advance(it, program.byte() % state.live.size());
            free_block(allocator, state, it->first);
          }
          break;
        case 5:
          if (!state.live.empty()) {
            auto it = state.live.begin();
            std::advance(it, program.byte() % state.live.size());
            allocator.record_stream(reinterpret_cast<void*>(it->first),
                                    state.streams[program.byte() % state.streams.size()]);
            state.recorded = true;
          }
          break;
        case 6: allocator.empty_cache(); break;
        case 7: cudasim_fail_nth_allocation(state.device, 1 + program.byte() % 3); break;
        case 8:
          cudasim_set_capacity(state.device, kCapacities[program.byte() % kCapacities.size()]);
          break;
        default:
          state.hook_frees = !state.hook_frees;
          allocator.reset_peak_stats();
          break;
      }
      check_invariants(allocator, state, op);
    }
    cudasim_fail_nth_allocation(state.device, 0);
    while (!state.live.empty()) free_block(allocator, state, state.live.begin()->first);
    allocator.empty_cache();
  }
  for (std::size_t i = 1; i < state.streams.size(); ++i) {
    check_cuda(cudaStreamDestroy(state.streams[i]), "cudaStreamDestroy");
  }
  check(device_bytes_in_use(state.device) == 0,
        "the device holds " + std::to_string(device_bytes_in_use(state.device)) +
            " bytes after the allocator is gone");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (!cudasim_available()) fail("needs the cudasim runtime (LD_LIBRARY_PATH)");
  State state;
  try {
    run(data, size, state);
  } catch (const std::exception& error) {
    fail(std::string("unexpected exception: ") + error.what());
  }
  return 0;
}
