#include "cub_allocator.h"

#include <cub/util_allocator.cuh>

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
    cudaError_t error = cub_.DeviceAllocate(kDevice, &ptr, size, stream);
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw ReplayOutOfMemory("cub DeviceAllocate(" + std::to_string(size) +
                              ") failed: out of memory");
    }
    if (error != cudaSuccess) {
      throw std::runtime_error(std::string("cub DeviceAllocate failed: ") +
                               cudaGetErrorString(error));
    }
    // Only an allocation can raise live or cached bytes, so peaks are sampled here.
    const auto& bytes = cub_.cached_bytes[kDevice];
    peak_allocated_ = std::max<std::uint64_t>(peak_allocated_, bytes.live);
    peak_reserved_ = std::max<std::uint64_t>(peak_reserved_, bytes.live + bytes.free);
    return ptr;
  }

  void free(void* ptr) override {
    cudaError_t error = cub_.DeviceFree(kDevice, ptr);
    if (error != cudaSuccess) {
      throw std::runtime_error(std::string("cub DeviceFree failed: ") + cudaGetErrorString(error));
    }
  }

  void empty_cache() override {
    cudaError_t error = cub_.FreeAllCached();
    if (error != cudaSuccess) {
      throw std::runtime_error(std::string("cub FreeAllCached failed: ") +
                               cudaGetErrorString(error));
    }
  }

  AllocatorFigures figures() const override { return {peak_allocated_, peak_reserved_}; }

 private:
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
