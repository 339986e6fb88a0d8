/* cudasim test controls.
 *
 * These functions live in cudasim's libcudart.so.13 and nowhere else. They are declared weak so
 * that the same test binary also loads on NVIDIA's runtime, where every one of them is NULL:
 * call cudasim_available() first and skip a check that needs the simulator when it is 0.
 *
 * All functions return 0 on success and -1 on bad input (unknown device, unknown stream).
 */
#ifndef CUDASIM_H
#define CUDASIM_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDASIM_WEAK __attribute__((weak))

/* Counters of one simulated device, as printed by CUDASIM_REPORT=1. "Device allocations"
 * are cudaMalloc/cudaMallocAsync blocks and cuMemCreate physical allocations. Bytes count
 * cudaMalloc sizes rounded up to 256 (CUDA's minimum alignment) and cuMemCreate sizes as
 * given; a cudaFreeAsync counts when its stream reaches it, and a cuMemRelease'd allocation
 * that is still mapped keeps counting in_use_bytes until its last cuMemUnmap. */
typedef struct cudasim_counters {
  uint64_t mallocs;       /* cudaMalloc, cudaMallocAsync and cuMemCreate calls that succeeded */
  uint64_t frees;         /* cudaFree, cudaFreeAsync and cuMemRelease calls that succeeded */
  uint64_t maps;          /* cuMemMap calls that succeeded */
  uint64_t unmaps;        /* cuMemUnmap calls that succeeded */
  uint64_t in_use_bytes;  /* device memory allocated now */
  uint64_t peak_bytes;    /* high-water mark of in_use_bytes */
} cudasim_counters;

CUDASIM_WEAK int cudasim_get_counters(int device, cudasim_counters* out);
/* Sets peak_bytes to in_use_bytes and the call counters to zero. */
CUDASIM_WEAK int cudasim_reset_counters(int device);

/* Capacity of a device in bytes. Lowering it below what is in use is allowed: further
 * allocations fail until enough is freed. */
CUDASIM_WEAK int cudasim_set_capacity(int device, size_t bytes);
CUDASIM_WEAK size_t cudasim_get_capacity(int device);

/* The nth device allocation from now on (1 = the next one) on this device fails with
 * cudaErrorMemoryAllocation, once. n = 0 cancels a pending failure. */
CUDASIM_WEAK int cudasim_fail_nth_allocation(int device, int n);

/* While a stream is held, work enqueued on it does not complete: events recorded on it stay
 * pending (cudaEventQuery returns cudaErrorNotReady) and cudaStreamQuery returns
 * cudaErrorNotReady. Synchronizing on held work blocks until another thread releases it.
 * Releasing completes everything that was enqueued. The legacy default stream (NULL) can be
 * held too. */
CUDASIM_WEAK int cudasim_hold_stream(cudaStream_t stream);
CUDASIM_WEAK int cudasim_release_stream(cudaStream_t stream);

/* 1 when the process runs on cudasim. */
static inline int cudasim_available(void) { return cudasim_get_counters != NULL; }

#ifdef __cplusplus
}
#endif

#endif /* CUDASIM_H */
