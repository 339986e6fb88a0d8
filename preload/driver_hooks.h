// Driver-level interposition, for programs whose runtime we cannot interpose: nvcc's default
// static runtime (and libraries that embed one) loads libcuda.so.1 itself and fetches every
// driver function through cuGetProcAddress. The dlsym hook and the cuGetProcAddress hooks
// hand out cudacache's cuMemAlloc_v2, cuMemFree_v2, cuMemAllocAsync and cuMemFreeAsync
// (and _ptsz) instead of the driver's; everything else is the driver's own.
#pragma once

#include <cuda.h>

// cuda.h maps these names to their newest versions; the hooks define each version itself.
#undef cuGetProcAddress

extern "C" {
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
}

namespace cudacache::preload {

// Our hook for a driver function looked up by its exported name (dlsym), or `found`.
void* substitute_driver_export(const char* name, void* found);

}  // namespace cudacache::preload
