#include "cudacache_allocator.h"

#include "device_allocator.h"
#include "options.h"
#include "size_policy.h"
#include "snapshot.h"

#include <algorithm>
#include <string>

namespace cudacache::replay {
namespace {

class CudacacheAllocator final : public ReplayAllocator {
 public:
  explicit CudacacheAllocator(const Options& options) : allocator_(0, options) {}

  void* allocate(std::size_t size, cudaStream_t stream) override {
    // A size no device can hold is an out-of-memory result of the replay, as it is for the
    // other allocators, not an invalid argument that stops the whole comparison.
    if (size > kMaxRequestBytes) {
      throw ReplayOutOfMemory("cudacache: a request of " + std::to_string(size) +
                              " bytes is larger than any device (the largest accepted is " +
                              std::to_string(kMaxRequestBytes) + ")");
    }
    try {
      return allocator_.allocate(size, stream);
    } catch (const OutOfMemoryError& error) {
      throw ReplayOutOfMemory(error.what());
    }
  }

  void free(void* ptr) override { allocator_.deallocate(ptr); }

  void empty_cache() override { allocator_.empty_cache(); }

  AllocatorFigures figures() const override {
    const MemoryStats stats = allocator_.stats();
    return {static_cast<std::uint64_t>(stats.allocated_bytes[kAllPools].peak),
            static_cast<std::uint64_t>(stats.reserved_bytes[kAllPools].peak)};
  }

  CurrentFigures current() const override {
    const MemoryStats stats = allocator_.stats();
    return {static_cast<std::uint64_t>(stats.allocated_bytes[kAllPools].current),
            static_cast<std::uint64_t>(stats.reserved_bytes[kAllPools].current)};
  }

  void record_history(std::size_t max_entries) override {
    allocator_.record_history(std::min(max_entries, kMaxHistoryEntries));
  }

  ReplaySnapshot snapshot() const override {
    const MemorySnapshot taken = allocator_.snapshot();
    ReplaySnapshot out;
    for (const SegmentSnapshot& segment : taken.segments) {
      SnapshotSegment& copy = out.segments.emplace_back();
      copy.address = segment.address;
      copy.total_size = segment.total_size;
      copy.allocated_size = segment.allocated_size;
      copy.active_size = segment.active_size;
      copy.requested_size = segment.requested_size;
      copy.stream = segment.stream;
      copy.segment_type = segment.segment_type;
      copy.is_expandable = segment.is_expandable;
      for (const BlockSnapshot& block : segment.blocks) {
        copy.blocks.push_back({block.address, block.size, block.requested_size, block.state});
      }
      // memory_viz assumes that the blocks tile the segment in address order.
      std::sort(copy.blocks.begin(), copy.blocks.end(),
                [](const auto& a, const auto& b) { return a.address < b.address; });
    }
    for (const HistoryEntry& entry : taken.trace) {
      out.trace.push_back({history_action_name(entry.action), entry.address, entry.size,
                           entry.stream, entry.time_us});
    }
    return out;
  }

 private:
  DeviceAllocator allocator_;
};

Options parse_options(const std::string& config) {
  try {
    return Options(config);
  } catch (const Error& error) {
    throw std::invalid_argument(error.what());
  }
}

}  // namespace

std::unique_ptr<ReplayAllocator> make_cudacache_allocator(const std::string& config) {
  return std::make_unique<CudacacheAllocator>(parse_options(config));
}

void validate_cudacache_config(const std::string& config) { parse_options(config); }

std::string cudacache_config_string(const std::string& config) {
  return parse_options(config).to_config_string();
}

std::string describe_cudacache_config(const std::string& config) {
  return parse_options(config).describe();
}

}  // namespace cudacache::replay
