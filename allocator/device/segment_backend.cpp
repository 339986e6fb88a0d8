#include "segment_backend.h"

#include "device_api.h"
#include "log.h"
#include "vmm_api.h"

#include <atomic>
#include <string>

namespace cudacache {

// A backend without pages answers every page call with "not supported".
cudaError_t SegmentBackend::reserve(std::size_t, std::uintptr_t* base) {
  *base = 0;
  return cudaErrorNotSupported;
}
cudaError_t SegmentBackend::unreserve(std::uintptr_t, std::size_t) { return cudaErrorNotSupported; }
cudaError_t SegmentBackend::create_page(std::size_t, PageHandle* handle) {
  *handle = 0;
  return cudaErrorNotSupported;
}
cudaError_t SegmentBackend::release_page(PageHandle) { return cudaErrorNotSupported; }
cudaError_t SegmentBackend::map(std::uintptr_t, std::size_t, PageHandle) {
  return cudaErrorNotSupported;
}
cudaError_t SegmentBackend::unmap(std::uintptr_t, std::size_t) { return cudaErrorNotSupported; }
cudaError_t SegmentBackend::set_access(std::uintptr_t, std::size_t) {
  return cudaErrorNotSupported;
}

namespace {

cudaError_t malloc_segment(int device, std::size_t bytes, std::uintptr_t* base) {
  void* ptr = nullptr;
  const cudaError_t error = device_api::malloc_memory(device, &ptr, bytes);
  *base = reinterpret_cast<std::uintptr_t>(ptr);
  return error;
}

}  // namespace

cudaError_t MallocSegmentBackend::allocate(std::size_t bytes, std::uintptr_t* base) {
  return malloc_segment(device_, bytes, base);
}

cudaError_t MallocSegmentBackend::release(std::uintptr_t base, std::size_t /*bytes*/) {
  return device_api::free_memory(device_, reinterpret_cast<void*>(base));
}

cudaError_t VmmSegmentBackend::allocate(std::size_t bytes, std::uintptr_t* base) {
  return malloc_segment(device_, bytes, base);
}

cudaError_t VmmSegmentBackend::release(std::uintptr_t base, std::size_t /*bytes*/) {
  return device_api::free_memory(device_, reinterpret_cast<void*>(base));
}

cudaError_t VmmSegmentBackend::reserve(std::size_t bytes, std::uintptr_t* base) {
  return vmm_api::reserve(bytes, granularity_, base);
}

cudaError_t VmmSegmentBackend::unreserve(std::uintptr_t base, std::size_t bytes) {
  return vmm_api::address_free(base, bytes);
}

cudaError_t VmmSegmentBackend::create_page(std::size_t bytes, PageHandle* handle) {
  return vmm_api::create(device_, bytes, handle);
}

cudaError_t VmmSegmentBackend::release_page(PageHandle handle) { return vmm_api::release(handle); }

cudaError_t VmmSegmentBackend::map(std::uintptr_t address, std::size_t bytes, PageHandle handle) {
  return vmm_api::map(address, bytes, handle);
}

cudaError_t VmmSegmentBackend::unmap(std::uintptr_t address, std::size_t bytes) {
  return vmm_api::unmap(address, bytes);
}

cudaError_t VmmSegmentBackend::set_access(std::uintptr_t address, std::size_t bytes) {
  return vmm_api::set_access(device_, address, bytes);
}

std::unique_ptr<SegmentBackend> make_segment_backend(int device, bool want_pages) {
  if (want_pages) {
    std::string why;
    std::size_t granularity = 0;
    if (vmm_api::supported(device, &why)) {
      const cudaError_t error = vmm_api::granularity(device, &granularity);
      if (error == cudaSuccess && granularity > 0) {
        return std::make_unique<VmmSegmentBackend>(device, granularity);
      }
      why = std::string("cuMemGetAllocationGranularity failed: ") + device_api::error_string(error);
    }
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      logger().warn(
          "driver-VMM pages (cudacache's policy, expandable segments) need the "
          "driver's virtual memory API, which is not available ({}); using "
          "PyTorch's native policy on cudaMalloc segments instead",
          why);
    }
  }
  return std::make_unique<MallocSegmentBackend>(device);
}

}  // namespace cudacache
