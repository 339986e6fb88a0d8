// The real CUDA runtime: whatever libcudart the process loaded, found on first use.
//
// Lookup order for each function: a pointer seeded by the dlsym hook (the program looked the
// function up itself), then dlsym(RTLD_NEXT) (the runtime the program linked), then the
// runtime handle: a libcudart.so* already loaded privately (Python's ctypes and `import torch`
// load it RTLD_LOCAL, invisible to RTLD_NEXT; found by walking dl_iterate_phdr and reopened
// with RTLD_NOLOAD), and as a last resort a private dlopen of libcudart.so.13, or of the path in
// CUDACACHE_PRELOAD_CUDART (a program on the static runtime loads none; the allocator then
// allocates through this one; if it cannot be opened, nothing is cached).
// A function that cannot be found returns cudaErrorSharedObjectSymbolNotFound.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

extern "C" {
// Declared by cuda_runtime_api.h only under CUDA_API_PER_THREAD_DEFAULT_STREAM.
cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream);
}

namespace cudacache::preload::real {

#define CUDACACHE_RUNTIME_FUNCTION(type, name, parameters, arguments) type name parameters;
#include "runtime_functions.inc"
#undef CUDACACHE_RUNTIME_FUNCTION

// Records `address` as the real `name` if that is one of ours and none is known yet.
void seed_runtime_function(const char* name, void* address);

// Makes the real runtime record cudaErrorInvalidValue as the calling thread's last error, as
// it does for a pointer it never allocated (see runtime_hooks.cpp, double frees).
cudaError_t record_invalid_free();

}  // namespace cudacache::preload::real
