/* libcudacache_torch: cudacache as PyTorch's CUDA allocator, with what the plain C ABI of
 * libcudacache cannot give PyTorch. Built against libtorch (optional, see CMakeLists.txt);
 * cudacache.torch.install() uses it when it is found.
 *
 * - cudacache_torch_malloc / cudacache_torch_free: PyTorch's CUDAPluggableAllocator ABI, like
 *   cudacache_malloc / cudacache_free, except that a failed allocation throws a C++
 *   exception instead of returning NULL: c10::OutOfMemoryError (torch.OutOfMemoryError in
 *   Python) for out-of-memory, c10::Error (RuntimeError) otherwise, each carrying
 *   cudacache_last_error(). Only PyTorch may call them (an exception must not cross into C).
 * - cudacache_torch_register_hooks: sets the C++ hooks of the current CUDAPluggableAllocator
 *   that Python cannot set: empty_cache -> cudacache_empty_cache, record_stream ->
 *   cudacache_record_stream.
 *
 * The library links libcudacache.so by its SONAME: in one process there is one cudacache.
 */
#ifndef CUDACACHE_TORCH_H
#define CUDACACHE_TORCH_H

#include <cuda_runtime_api.h>
#include <sys/types.h>

#define CUDACACHE_TORCH_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

CUDACACHE_TORCH_API void* cudacache_torch_malloc(ssize_t size, int device, cudaStream_t stream);
CUDACACHE_TORCH_API void cudacache_torch_free(void* ptr, ssize_t size, int device,
                                              cudaStream_t stream);

/* Registers the hooks on the current allocator. It must be a CUDAPluggableAllocator whose
 * alloc function is cudacache_torch_malloc or cudacache_malloc (of the same libcudacache).
 * Returns 0, or -1 with the reason in cudacache_torch_last_error(). Idempotent. */
CUDACACHE_TORCH_API int cudacache_torch_register_hooks(void);

/* Why the last call of this thread failed ("" if none). */
CUDACACHE_TORCH_API const char* cudacache_torch_last_error(void);

/* The PyTorch version the library was built against ("2.15.0"). Its C++ ABI is only
 * guaranteed for that version. */
CUDACACHE_TORCH_API const char* cudacache_torch_built_for(void);

/* The address of cudacache_malloc as this library resolved it: equal to the caller's when
 * both use the same libcudacache (one allocator state in the process). */
CUDACACHE_TORCH_API const void* cudacache_torch_backend(void);

#ifdef __cplusplus
}
#endif

#endif /* CUDACACHE_TORCH_H */
