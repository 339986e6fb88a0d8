#include "cub_allocator.h"

#include <cub/util_allocator.cuh>

#include <algorithm>
#include <unordered_map>

namespace cudacache::replay {
namespace {

constexpr int kDevice = 0;
constexpr unsigned kBinGrowth = 8;  // CUB's defaults
constexpr unsigned kMinBin = 3;
constexpr unsigned kMaxBin = 7;

class CubAllocator final : public ReplayAllocator {
 public:
  CubAllocator()
      : cub_(kBinGrowth, kMinBin, kMaxBin, cub::CachingDeviceAllocator::INVALID_SIZE,
             /*skip_cleanup=*/false) {}

  void* allocate(std::size_t size, cudaStream_t stream) override {
    void* ptr = nullptr;
    // Read only when recording: a plain replay times CUB alone.
    const bool recording = trace_.recording();
    const std::uint64_t live_before = recording ? cub_.cached_bytes[kDevice].live : 0;
    const std::uint64_t cached_before = recording ? cub_.cached_bytes[kDevice].free : 0;
    cudaError_t error = cub_.DeviceAllocate(kDevice, &ptr, size, stream);
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      // Before giving up, CUB freed its whole cache.
      if (recording && cub_.cached_bytes[kDevice].free < cached_before) release_cached_segments();
      throw ReplayOutOfMemory("cub DeviceAllocate(" + std::to_string(size) +
                              ") failed: out of memory");
    }
    if (error != cudaSuccess) {
      throw std::runtime_error(std::string("cub DeviceAllocate failed: ") +
                               cudaGetErrorString(error));
    }
    if (recording) track_allocation(ptr, size, stream, live_before, cached_before);
    // Only an allocation can raise live or cached bytes, so peaks are sampled here.
    const auto& bytes = cub_.cached_bytes[kDevice];
    peak_allocated_ = std::max<std::uint64_t>(peak_allocated_, bytes.live);
    peak_reserved_ = std::max<std::uint64_t>(peak_reserved_, bytes.live + bytes.free);
    return ptr;
  }

  void free(void* ptr) override {
    const bool recording = trace_.recording();
    const std::uint64_t cached_before = recording ? cub_.cached_bytes[kDevice].free : 0;
    cudaError_t error = cub_.DeviceFree(kDevice, ptr);
    if (error != cudaSuccess) {
      throw std::runtime_error(std::string("cub DeviceFree failed: ") + cudaGetErrorString(error));
    }
    if (recording) track_free(ptr, cached_before);
  }

  void empty_cache() override {
    cudaError_t error = cub_.FreeAllCached();
    if (error != cudaSuccess) {
      throw std::runtime_error(std::string("cub FreeAllCached failed: ") +
                               cudaGetErrorString(error));
    }
    if (trace_.recording()) release_cached_segments();
  }

  AllocatorFigures figures() const override { return {peak_allocated_, peak_reserved_}; }

  CurrentFigures current() const override {
    auto it = cub_.cached_bytes.find(kDevice);
    if (it == cub_.cached_bytes.end()) return {0, 0};  // nothing allocated yet
    return {it->second.live, it->second.live + it->second.free};
  }

  void record_history(std::size_t max_entries) override {
    // CUB tells only its byte counts, so its cudaMalloc'd blocks (segments) are followed from
    // the start of the recording; it starts before the first allocation.
    trace_.start(max_entries);
  }

  ReplaySnapshot snapshot() const override {
    ReplaySnapshot snapshot;
    for (const auto& [ptr, segment] : segments_) {
      SnapshotSegment out;
      out.address = address(ptr);
      out.total_size = segment.bytes;
      out.allocated_size = out.active_size = segment.live ? segment.bytes : 0;
      out.requested_size = segment.live ? segment.requested : 0;
      out.stream = segment.stream;
      out.segment_type = segment.bytes <= kMaxBinBytes ? "small" : "large";
      out.blocks.push_back({out.address, segment.bytes, out.requested_size,
                            segment.live ? "active_allocated" : "inactive"});
      snapshot.segments.push_back(std::move(out));
    }
    std::sort(snapshot.segments.begin(), snapshot.segments.end(),
              [](const auto& a, const auto& b) { return a.address < b.address; });
    snapshot.trace = trace_.entries();
    return snapshot;
  }

 private:
  // CUB never splits: every block it hands out is one whole cudaMalloc, a segment.
  struct CubSegment {
    std::uint64_t bytes = 0;
    std::uint64_t requested = 0;
    std::uint64_t stream = 0;
    bool live = false;
  };
  static constexpr std::uint64_t kMaxBinBytes = std::uint64_t{1} << (3 * kMaxBin);  // 8^7
  static std::uint64_t address(void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); }

  // What DeviceAllocate did, told from CUB's byte counts: a cached block reused, or a new
  // cudaMalloc, possibly after CUB freed its whole cache on a failed cudaMalloc.
  void track_allocation(void* ptr, std::size_t size, cudaStream_t stream, std::uint64_t live_before,
                        std::uint64_t cached_before) {
    const auto& bytes = cub_.cached_bytes[kDevice];
    auto it = segments_.find(ptr);
    bool reused = it != segments_.end() && !it->second.live;
    const std::uint64_t cached_if_reused = cached_before - (reused ? it->second.bytes : 0);
    if (bytes.free < cached_if_reused) {
      release_cached_segments();
      reused = false;
    }
    const auto stream_id = reinterpret_cast<std::uintptr_t>(stream);
    CubSegment& segment = segments_[ptr];
    if (!reused) {
      segment = {bytes.live - live_before, 0, stream_id, false};
      trace_.record("segment_alloc", address(ptr), segment.bytes, stream_id);
    }
    segment.live = true;
    segment.requested = size;
    segment.stream = stream_id;
    trace_.record("alloc", address(ptr), size, stream_id);
  }

  void track_free(void* ptr, std::uint64_t cached_before) {
    auto it = segments_.find(ptr);
    if (it == segments_.end()) return;
    CubSegment& segment = it->second;
    trace_.record("free_requested", address(ptr), segment.requested, segment.stream);
    trace_.record("free_completed", address(ptr), segment.requested, segment.stream);
    segment.live = false;
    // A block CUB does not cache (larger than its largest bin) is cudaFree'd at once.
    if (cub_.cached_bytes[kDevice].free < cached_before + segment.bytes) {
      trace_.record("segment_free", address(ptr), segment.bytes, segment.stream);
      segments_.erase(it);
    }
  }

  void release_cached_segments() {
    for (auto it = segments_.begin(); it != segments_.end();) {
      if (it->second.live) {
        ++it;
        continue;
      }
      trace_.record("segment_free", address(it->first), it->second.bytes, it->second.stream);
      it = segments_.erase(it);
    }
  }

  SnapshotTrace trace_;
  std::unordered_map<void*, CubSegment> segments_;
  cub::CachingDeviceAllocator cub_;
  std::uint64_t peak_allocated_ = 0;
  std::uint64_t peak_reserved_ = 0;
};

}  // namespace

std::unique_ptr<ReplayAllocator> make_cub_allocator() { return std::make_unique<CubAllocator>(); }

std::string cub_config_string() {
  return "bin_growth:" + std::to_string(kBinGrowth) + ",min_bin:" + std::to_string(kMinBin) +
         ",max_bin:" + std::to_string(kMaxBin) + ",max_cached_bytes:unlimited";
}

}  // namespace cudacache::replay
