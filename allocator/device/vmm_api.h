// The driver's virtual memory management (VMM) calls, and the two context calls that a switch
// of devices needs to put a thread's own context back: the only code in cudacache that calls the
// CUDA driver. The functions are found through the runtime's cudaGetDriverEntryPointByVersion,
// so nothing links libcuda and the same binary runs on a GPU and on cudasim.
//
// Contract, as device_api.h: results are CUresult values converted to cudaError_t (the two
// enums share their numbers; CUDA_ERROR_OUT_OF_MEMORY is cudaErrorMemoryAllocation, "device
// full"); no function throws; none touches the runtime's last error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace cudacache::vmm_api {

using PageHandle = unsigned long long;  // CUmemGenericAllocationHandle

// Whether `device` supports VMM (the entry points exist and the device attribute says so).
// When it does not, `why` says what is missing.
bool supported(int device, std::string* why);
// The minimum granularity of physical allocations on `device` (2 MiB on current GPUs).
cudaError_t granularity(int device, std::size_t* bytes);

cudaError_t reserve(std::size_t bytes, std::size_t alignment, std::uintptr_t* base);
cudaError_t address_free(std::uintptr_t base, std::size_t bytes);
cudaError_t create(int device, std::size_t bytes, PageHandle* handle);
cudaError_t release(PageHandle handle);
// Maps the whole handle at `address` (offset 0, the handle's full size: the driver's rules).
cudaError_t map(std::uintptr_t address, std::size_t bytes, PageHandle handle);
cudaError_t unmap(std::uintptr_t address, std::size_t bytes);
// Read-write access for `device` to a mapped range.
cudaError_t set_access(int device, std::uintptr_t address, std::size_t bytes);

// The calling thread's current context (cuCtxGetCurrent, a CUcontext), or null: none, or the
// driver does not say. Independent of the VMM functions: a driver without VMM still has these.
void* current_context();
// Makes `context` (from current_context()) current again (cuCtxSetCurrent); false on failure.
bool make_context_current(void* context);

}  // namespace cudacache::vmm_api
