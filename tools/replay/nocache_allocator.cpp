#include "nocache_allocator.h"

#include <algorithm>
#include <unordered_map>

namespace cudacache::replay {
namespace {

class NoCacheAllocator final : public ReplayAllocator {
 public:
  ~NoCacheAllocator() override {
    for (auto& [ptr, block] : live_) cudaFree(ptr);
  }

  void* allocate(std::size_t size, cudaStream_t stream) override {
    void* ptr = nullptr;
    // cudaMalloc(0) may succeed with nullptr, which could not be told apart at free time.
    cudaError_t error = cudaMalloc(&ptr, size == 0 ? 1 : size);
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky last error for the next call
      throw ReplayOutOfMemory("cudaMalloc(" + std::to_string(size) + ") failed: out of memory");
    }
    if (error != cudaSuccess) {
      throw std::runtime_error(std::string("cudaMalloc failed: ") + cudaGetErrorString(error));
    }
    live_bytes_ += size;
    if (live_bytes_ > peak_bytes_) peak_bytes_ = live_bytes_;
    const auto stream_id = reinterpret_cast<std::uintptr_t>(stream);
    live_.emplace(ptr, Block{size, stream_id});
    // Every request is its own cudaMalloc: a segment holding one block.
    trace_.record("segment_alloc", address(ptr), size, stream_id);
    trace_.record("alloc", address(ptr), size, stream_id);
    return ptr;
  }

  void free(void* ptr) override {
    auto it = live_.find(ptr);
    if (it == live_.end())
      throw std::runtime_error("nocache: free of a pointer it did not allocate");
    const Block block = it->second;
    live_bytes_ -= block.size;
    live_.erase(it);
    cudaError_t error = cudaFree(ptr);
    if (error != cudaSuccess) {
      throw std::runtime_error(std::string("cudaFree failed: ") + cudaGetErrorString(error));
    }
    trace_.record("free_requested", address(ptr), block.size, block.stream);
    trace_.record("free_completed", address(ptr), block.size, block.stream);
    trace_.record("segment_free", address(ptr), block.size, block.stream);
  }

  void empty_cache() override {}

  // It holds exactly what it hands out: allocated and reserved are the same live bytes.
  AllocatorFigures figures() const override { return {peak_bytes_, peak_bytes_}; }
  CurrentFigures current() const override { return {live_bytes_, live_bytes_}; }

  void record_history(std::size_t max_entries) override { trace_.start(max_entries); }

  ReplaySnapshot snapshot() const override {
    ReplaySnapshot snapshot;
    for (const auto& [ptr, block] : live_) {
      SnapshotSegment segment;
      segment.address = address(ptr);
      segment.total_size = segment.allocated_size = segment.active_size = block.size;
      segment.requested_size = block.size;
      segment.stream = block.stream;
      segment.segment_type = block.size <= kSmallSize ? "small" : "large";
      segment.blocks.push_back({segment.address, block.size, block.size, "active_allocated"});
      snapshot.segments.push_back(std::move(segment));
    }
    std::sort(snapshot.segments.begin(), snapshot.segments.end(),
              [](const auto& a, const auto& b) { return a.address < b.address; });
    snapshot.trace = trace_.entries();
    return snapshot;
  }

 private:
  // PyTorch's small-pool bound, only to label segments as memory_viz expects.
  static constexpr std::uint64_t kSmallSize = std::uint64_t{1} << 20;
  struct Block {
    std::uint64_t size;
    std::uint64_t stream;
  };
  static std::uint64_t address(void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); }

  std::unordered_map<void*, Block> live_;
  SnapshotTrace trace_;
  std::uint64_t live_bytes_ = 0;
  std::uint64_t peak_bytes_ = 0;
};

}  // namespace

std::unique_ptr<ReplayAllocator> make_nocache_allocator() {
  return std::make_unique<NoCacheAllocator>();
}

}  // namespace cudacache::replay
