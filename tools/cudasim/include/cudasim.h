/* cudasim test controls.
 *
 * These functions live in cudasim's libcudart.so.13 and nowhere else. They are declared weak so
 * that the same test binary also loads on NVIDIA's runtime, where every one of them is NULL:
 * call cudasim_available() first and skip a check that needs the simulator when it is 0.
 *
 * All functions but cudasim_thread_call_ns (a count) return 0 on success and -1 on bad input
 * (unknown device, unknown stream).
 *
 * What they cover:
 *   cudasim_get_counters / cudasim_reset_counters   allocation counters and bytes in use
 *   cudasim_get_call_counts                         device calls by kind (what a caching
 *                                                   allocator tries to save), failed ones too
 *   cudasim_thread_call_ns                          time this thread spent in those calls
 *   cudasim_set_capacity / cudasim_get_capacity     device memory size
 *   cudasim_fail_nth_allocation                     inject one out-of-memory
 *   cudasim_fail_nth_call                           fail one device call of a kind
 *   cudasim_hold_stream / cudasim_release_stream    keep a stream's work pending
 *   cudasim_set_vmm_supported                       a device without the driver's VMM API
 *   cudasim_set_stream_capturing                    a stream the capture queries call capturing
 *                                                   (CUDASIM_VMM=0: every device)
 *
 * The driver VMM API follows the rules that CUDA documents, strictly, so that what works on
 * cudasim works on a GPU: sizes and addresses (address hints too) are multiples of the 2 MiB
 * granularity and alignments powers of two; cuMemMap maps a whole handle at offset 0;
 * cuMemUnmap takes whole mappings starting at a mapping; a new mapping is not accessible
 * (touching it is a SIGSEGV) until cuMemSetAccess.
 *
 * CUDASIM_REPORT=1 prints, at exit, the counters summed over devices:
 *   cudasim: mallocs=N frees=N maps=N unmaps=N in_use=BYTES peak=BYTES calls: malloc=N free=N
 *   create=N release=N map=N unmap=N set_access=N synchronize=N reserve=N address_free=N
 *   mem_get_info=N
 * (one line; the fields after "calls:" are cudasim_call_counts but the event calls).
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
  uint64_t mallocs;      /* cudaMalloc, cudaMallocAsync and cuMemCreate calls that succeeded */
  uint64_t frees;        /* cudaFree, cudaFreeAsync and cuMemRelease calls that succeeded */
  uint64_t maps;         /* cuMemMap calls that succeeded */
  uint64_t unmaps;       /* cuMemUnmap calls that succeeded */
  uint64_t in_use_bytes; /* device memory allocated now */
  uint64_t peak_bytes;   /* high-water mark of in_use_bytes */
} cudasim_counters;

CUDASIM_WEAK int cudasim_get_counters(int device, cudasim_counters* out);
/* Sets peak_bytes to in_use_bytes and the call counters, including cudasim_call_counts, to
 * zero. */
CUDASIM_WEAK int cudasim_reset_counters(int device);

/* Device calls by kind on one device, since the last cudasim_reset_counters. Every call is
 * counted, whether it succeeded or failed (a failed cudaMalloc costs the driver too), except a
 * free of NULL (cudaFree(NULL), cudaFreeAsync(NULL, s)), which does nothing. A call counts on
 * the device of what it names: the stream's (cudaMallocAsync, cudaStreamSynchronize), the
 * event's, the handle's (cuMemCreate: prop->location.id; cuMemRelease, cuMemMap), the
 * mapping's at ptr (cuMemUnmap, cuMemSetAccess), the pointer's allocation (cudaFree,
 * cudaFreeAsync); and on the calling thread's current device when there is none (cudaMalloc,
 * cudaDeviceSynchronize, cuMemAddressReserve/Free) or it cannot be determined (an invalid
 * argument). Counted as the caller made them: cuCtxSynchronize counts once, as synchronize. */
typedef struct cudasim_call_counts {
  uint64_t malloc;       /* cudaMalloc, cudaMallocAsync (+_ptsz), of 0 bytes too */
  uint64_t free;         /* cudaFree (non-NULL pointer), cudaFreeAsync (+_ptsz) */
  uint64_t create;       /* cuMemCreate */
  uint64_t release;      /* cuMemRelease */
  uint64_t map;          /* cuMemMap */
  uint64_t unmap;        /* cuMemUnmap */
  uint64_t set_access;   /* cuMemSetAccess */
  uint64_t synchronize;  /* cudaDeviceSynchronize, cudaStreamSynchronize(+_ptsz),
                            cudaEventSynchronize, cuCtxSynchronize */
  uint64_t reserve;      /* cuMemAddressReserve */
  uint64_t address_free; /* cuMemAddressFree */
  /* Event calls (what a stream-aware allocator makes around record_stream); not memory calls:
   * tools that total device memory calls leave them out. */
  uint64_t event_create; /* cudaEventCreate, cudaEventCreateWithFlags */
  uint64_t event_record; /* cudaEventRecord, cudaEventRecordWithFlags */
  uint64_t event_query;  /* cudaEventQuery */
  /* A query of the device's free memory: a driver round trip, as an allocator may make one
   * to decide how to grow. */
  uint64_t mem_get_info; /* cudaMemGetInfo */
} cudasim_call_counts;

CUDASIM_WEAK int cudasim_get_call_counts(int device, cudasim_call_counts* out);

/* Nanoseconds the calling thread has spent inside the calls cudasim_call_counts counts (on
 * every device, failed calls and the wait for cudasim's lock included) since the thread
 * started; never reset. Each call counts from its first reading of the clock to its last, plus
 * what one reading takes (measured once): the halves of the two readings outside that interval
 * are cudasim's time, not its caller's. cudasim's cost per call (a real mmap, mprotect or fallocate
 * for the VMM calls) is not a GPU's, so a benchmark subtracts this from its time to time the
 * caller's own work, and weighs the calls by a GPU's cost per call instead. */
CUDASIM_WEAK uint64_t cudasim_thread_call_ns(void);

/* Capacity of a device in bytes. Lowering it below what is in use is allowed: further
 * allocations fail until enough is freed. */
CUDASIM_WEAK int cudasim_set_capacity(int device, size_t bytes);
CUDASIM_WEAK size_t cudasim_get_capacity(int device);

/* The nth device allocation from now on (1 = the next one) on this device fails with
 * cudaErrorMemoryAllocation, once. n = 0 cancels a pending failure. */
CUDASIM_WEAK int cudasim_fail_nth_allocation(int device, int n);

/* The nth call of one kind from now on (1 = the next one) on this device fails, once, before
 * doing anything: kind is a field name of cudasim_call_counts ("malloc", "free", "create",
 * "release", "map", "unmap", "set_access", "synchronize", "reserve", "address_free",
 * "event_create", "event_record", "event_query", "mem_get_info"). Calls
 * that allocate (malloc, create, map, set_access, reserve) fail with out of memory
 * (cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY), the others with an unknown error
 * (cudaErrorUnknown, CUDA_ERROR_UNKNOWN). The call is counted as usual. n = 0 cancels; one
 * kind is pending at a time per device. Returns -1 for an unknown device or kind. */
CUDASIM_WEAK int cudasim_fail_nth_call(int device, const char* kind, int n);

/* While a stream is held, work enqueued on it does not complete: events recorded on it stay
 * pending (cudaEventQuery returns cudaErrorNotReady) and cudaStreamQuery returns
 * cudaErrorNotReady. Synchronizing on held work blocks until another thread releases it.
 * Releasing completes everything that was enqueued. The legacy default stream (NULL) can be
 * held too. */
CUDASIM_WEAK int cudasim_hold_stream(cudaStream_t stream);
CUDASIM_WEAK int cudasim_release_stream(cudaStream_t stream);

/* Makes cudaStreamIsCapturing and cudaStreamGetCaptureInfo report the stream as capturing
 * (cudaStreamCaptureStatusActive; capturing: 1) or not (0), so that a test sees how code that
 * asks behaves during a stream capture. cudasim records no graph: work enqueued on the stream
 * runs as usual. Returns -1 for an unknown stream or another value. */
CUDASIM_WEAK int cudasim_set_stream_capturing(cudaStream_t stream, int capturing);

/* Whether a device supports the driver's virtual memory management API (default: yes;
 * CUDASIM_VMM=0 makes every device start without it). Without it,
 * cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) is 0 and
 * cuMemCreate and cuMemGetAllocationGranularity for the device return CUDA_ERROR_NOT_SUPPORTED,
 * as on a GPU without VMM; cudaMalloc works as usual. Handles created before stay usable.
 * supported: 1 or 0. */
CUDASIM_WEAK int cudasim_set_vmm_supported(int device, int supported);

/* 1 when the process runs on cudasim. */
static inline int cudasim_available(void) { return cudasim_get_counters != NULL; }

#ifdef __cplusplus
}
#endif

#endif /* CUDASIM_H */
