// SegmentBackend: the one place where the allocator obtains and returns device memory.
//
// Two shapes of memory go through it:
// - whole segments (cudaMalloc/cudaFree): allocate() and release();
// - pages (the driver's VMM API), when page_granularity() > 0: reserve a virtual range, create
//   a physical page, map it whole at a page-aligned address, grant access, unmap, release.
// A backend is bound to one device. Errors are cudaError_t; cudaErrorMemoryAllocation means
// "device full" (from cudaMalloc or cuMemCreate) and is never left as a sticky runtime error.
//
// Note [Segment backends]: DeviceAllocator is handed a backend at construction
// (make_segment_backend() by default). The LD_PRELOAD interposer wraps that default in a
// ForwardingSegmentBackend that records which ranges are cudacache's; tests wrap it to inject
// faults. A new backend implements this interface in its own file and adds a case to
// make_segment_backend(); nothing else changes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace cudacache {

using PageHandle = unsigned long long;  // a physical allocation (CUmemGenericAllocationHandle)

class SegmentBackend {
 public:
  virtual ~SegmentBackend() = default;
  virtual int device() const = 0;

  virtual cudaError_t allocate(std::size_t bytes, std::uintptr_t* base) = 0;
  virtual cudaError_t release(std::uintptr_t base, std::size_t bytes) = 0;

  // 0 when this backend has no pages; else the size every page and address is a multiple of.
  virtual std::size_t page_granularity() const { return 0; }
  virtual cudaError_t reserve(std::size_t bytes, std::uintptr_t* base);
  virtual cudaError_t unreserve(std::uintptr_t base, std::size_t bytes);
  virtual cudaError_t create_page(std::size_t bytes, PageHandle* handle);
  virtual cudaError_t release_page(PageHandle handle);
  // Maps the whole page (offset 0, its full size): the driver's rule for non-multicast handles.
  virtual cudaError_t map(std::uintptr_t address, std::size_t bytes, PageHandle handle);
  virtual cudaError_t unmap(std::uintptr_t address, std::size_t bytes);
  virtual cudaError_t set_access(std::uintptr_t address, std::size_t bytes);
};

// One cudaMalloc per segment, one cudaFree per released segment (PyTorch's native policy).
class MallocSegmentBackend final : public SegmentBackend {
 public:
  explicit MallocSegmentBackend(int device) : device_(device) {}
  int device() const override { return device_; }
  cudaError_t allocate(std::size_t bytes, std::uintptr_t* base) override;
  cudaError_t release(std::uintptr_t base, std::size_t bytes) override;

 private:
  int device_;
};

// cudaMalloc segments plus pages on the driver's VMM API (vmm_api.h).
class VmmSegmentBackend final : public SegmentBackend {
 public:
  VmmSegmentBackend(int device, std::size_t granularity)
      : device_(device), granularity_(granularity) {}
  int device() const override { return device_; }
  cudaError_t allocate(std::size_t bytes, std::uintptr_t* base) override;
  cudaError_t release(std::uintptr_t base, std::size_t bytes) override;
  std::size_t page_granularity() const override { return granularity_; }
  cudaError_t reserve(std::size_t bytes, std::uintptr_t* base) override;
  cudaError_t unreserve(std::uintptr_t base, std::size_t bytes) override;
  cudaError_t create_page(std::size_t bytes, PageHandle* handle) override;
  cudaError_t release_page(PageHandle handle) override;
  cudaError_t map(std::uintptr_t address, std::size_t bytes, PageHandle handle) override;
  cudaError_t unmap(std::uintptr_t address, std::size_t bytes) override;
  cudaError_t set_access(std::uintptr_t address, std::size_t bytes) override;

 private:
  int device_;
  std::size_t granularity_;
};

// Forwards every call to an inner backend; override the calls to observe or alter.
class ForwardingSegmentBackend : public SegmentBackend {
 public:
  explicit ForwardingSegmentBackend(std::unique_ptr<SegmentBackend> inner)
      : inner_(std::move(inner)) {}
  int device() const override { return inner_->device(); }
  cudaError_t allocate(std::size_t bytes, std::uintptr_t* base) override {
    return inner_->allocate(bytes, base);
  }
  cudaError_t release(std::uintptr_t base, std::size_t bytes) override {
    return inner_->release(base, bytes);
  }
  std::size_t page_granularity() const override { return inner_->page_granularity(); }
  cudaError_t reserve(std::size_t bytes, std::uintptr_t* base) override {
    return inner_->reserve(bytes, base);
  }
  cudaError_t unreserve(std::uintptr_t base, std::size_t bytes) override {
    return inner_->unreserve(base, bytes);
  }
  cudaError_t create_page(std::size_t bytes, PageHandle* handle) override {
    return inner_->create_page(bytes, handle);
  }
  cudaError_t release_page(PageHandle handle) override { return inner_->release_page(handle); }
  cudaError_t map(std::uintptr_t address, std::size_t bytes, PageHandle handle) override {
    return inner_->map(address, bytes, handle);
  }
  cudaError_t unmap(std::uintptr_t address, std::size_t bytes) override {
    return inner_->unmap(address, bytes);
  }
  cudaError_t set_access(std::uintptr_t address, std::size_t bytes) override {
    return inner_->set_access(address, bytes);
  }

 private:
  std::unique_ptr<SegmentBackend> inner_;
};

// The backend for `device`: with want_pages, a VmmSegmentBackend when the driver and device
// support VMM, else (one warning per process) a MallocSegmentBackend.
std::unique_ptr<SegmentBackend> make_segment_backend(int device, bool want_pages);

}  // namespace cudacache
