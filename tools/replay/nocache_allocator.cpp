#include "nocache_allocator.h"

#include <unordered_map>

namespace cudacache::replay {
namespace {

class NoCacheAllocator final : public ReplayAllocator {
 public:
  ~NoCacheAllocator() override {
    for (auto& [ptr, size] : live_) cudaFree(ptr);
  }

  void* allocate(std::size_t size, cudaStream_t /*stream*/) override {
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
    live_.emplace(ptr, size);
    return ptr;
  }

  void free(void* ptr) override {
    auto it = live_.find(ptr);
    if (it == live_.end())
      throw std::runtime_error("nocache: free of a pointer it did not allocate");
    live_bytes_ -= it->second;
    live_.erase(it);
    cudaError_t error = cudaFree(ptr);
    if (error != cudaSuccess) {
      throw std::runtime_error(std::string("cudaFree failed: ") + cudaGetErrorString(error));
    }
  }

  void empty_cache() override {}

  // It holds exactly what it hands out: allocated and reserved are the same live bytes.
  AllocatorFigures figures() const override { return {peak_bytes_, peak_bytes_}; }

 private:
  std::unordered_map<void*, std::size_t> live_;
  std::uint64_t live_bytes_ = 0;
  std::uint64_t peak_bytes_ = 0;
};

}  // namespace

std::unique_ptr<ReplayAllocator> make_nocache_allocator() {
  return std::make_unique<NoCacheAllocator>();
}

}  // namespace cudacache::replay
