/* cudacache: a caching allocator for CUDA device memory. Stable C ABI (C99).
 *
 * The first two functions are exactly PyTorch's CUDAPluggableAllocator ABI:
 *   torch.cuda.memory.CUDAPluggableAllocator("libcudacache.so", "cudacache_malloc",
 *                                            "cudacache_free")
 *
 * Conventions
 * - device -1 means "the current device" (cudaGetDevice); other negative ordinals are invalid.
 * - Size 0: allocating 0 bytes returns NULL (status CUDACACHE_OK) and changes nothing;
 *   freeing NULL is a no-op. This is PyTorch's behaviour.
 * - Every failing call leaves the allocator unchanged, logs through spdlog (level from the
 *   CUDACACHE_LOG_LEVEL environment variable, silent by default) and stores a message that
 *   cudacache_last_error() returns on the same thread.
 * - Configuration: CUDACACHE_CONF="key:value,key:value" is read at first use (the first call
 *   that names a device, allocating or not: an allocation of 0 bytes, a free, a statistics
 *   query); cudacache_configure() may override keys before first use. See
 *   cudacache_config_help().
 * - Thread safe. One lock per device.
 */
#ifndef CUDACACHE_H
#define CUDACACHE_H

/* The version of these headers and of the library built from them (the one place it is
 * written: CMake reads it from here). cudacache_version() gives the loaded library's. */
#define CUDACACHE_VERSION_MAJOR 0
#define CUDACACHE_VERSION_MINOR 1
#define CUDACACHE_VERSION_PATCH 0
#define CUDACACHE_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH, for #if CUDACACHE_VERSION >= 100 comparisons. */
#define CUDACACHE_VERSION \
  (CUDACACHE_VERSION_MAJOR * 10000 + CUDACACHE_VERSION_MINOR * 100 + CUDACACHE_VERSION_PATCH)

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#if defined(_WIN32)
#define CUDACACHE_API
#else
#define CUDACACHE_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Result of every call that can fail. */
typedef enum cudacache_status {
  CUDACACHE_OK = 0,
  CUDACACHE_OUT_OF_MEMORY = 1,    /* the device (or per_process_memory_fraction) is full */
  CUDACACHE_INVALID_ARGUMENT = 2, /* negative/absurd size, size mismatch at free, NULL out */
  CUDACACHE_INVALID_DEVICE = 3,   /* device ordinal out of range, stream of another device */
  CUDACACHE_UNKNOWN_POINTER = 4,  /* not allocated by cudacache, or already freed */
  CUDACACHE_CONFIG = 5,           /* bad configuration string, or configure after first use */
  CUDACACHE_CUDA_ERROR = 6,       /* the CUDA runtime failed in an unexpected way */
  CUDACACHE_INTERNAL = 7          /* a bug in cudacache */
} cudacache_status;

/* The loaded library's version, "MAJOR.MINOR.PATCH" (may differ from CUDACACHE_VERSION_STRING
 * when a program runs with another build of libcudacache.so than its headers). */
CUDACACHE_API const char* cudacache_version(void);

/* Static English name of a status ("CUDACACHE_OUT_OF_MEMORY"). */
CUDACACHE_API const char* cudacache_status_string(cudacache_status status);

/* Message of the last failure on this thread ("" if none). Valid until the next failing call
 * on this thread. */
CUDACACHE_API const char* cudacache_last_error(void);

/* PyTorch pluggable ABI. malloc returns NULL on failure (and for size 0). free's size must be
 * the size that was requested at allocation; stream is the allocation stream and is ignored. */
CUDACACHE_API void* cudacache_malloc(ssize_t size, int device, cudaStream_t stream);
CUDACACHE_API void cudacache_free(void* ptr, ssize_t size, int device, cudaStream_t stream);

/* Status-code variant of cudacache_malloc. *out is NULL on failure and for size 0. */
CUDACACHE_API cudacache_status cudacache_allocate(void** out, size_t size, int device,
                                                  cudaStream_t stream);
/* Free by pointer alone (any device). */
CUDACACHE_API cudacache_status cudacache_deallocate(void* ptr);

/* The block of ptr is also used on stream: its memory is reused only after the work queued
 * on stream when it is freed has completed. */
CUDACACHE_API cudacache_status cudacache_record_stream(void* ptr, cudaStream_t stream);

/* Returns every fully free cached segment of every device to CUDA. */
CUDACACHE_API void cudacache_empty_cache(void);

/* PyTorch's memory_allocated / memory_reserved / max_* (bytes; 0 for a bad device). */
CUDACACHE_API size_t cudacache_memory_allocated(int device);
CUDACACHE_API size_t cudacache_memory_reserved(int device);
CUDACACHE_API size_t cudacache_max_memory_allocated(int device);
CUDACACHE_API size_t cudacache_max_memory_reserved(int device);
CUDACACHE_API cudacache_status cudacache_reset_peak_memory_stats(int device);
CUDACACHE_API cudacache_status cudacache_reset_accumulated_memory_stats(int device);

/* All of memory_stats() as a struct, for C callers who would rather not parse JSON. The
 * struct is versioned and only ever grows at its end: set `size` to sizeof(cudacache_memory_stats)
 * before the call; cudacache fills the first min(size, its own size) bytes, sets `size` to
 * the bytes it filled and `version` to its CUDACACHE_MEMORY_STATS_VERSION, so a program built
 * against an older header keeps working with a newer library. Field meanings: PyTorch's
 * memory_stats(), listed in <cudacache/memory_stats.inc>. A size smaller than the two header
 * fields, or a NULL stats, is CUDACACHE_INVALID_ARGUMENT. */
#define CUDACACHE_MEMORY_STATS_VERSION 1
typedef struct cudacache_stat {
  int64_t current;
  int64_t peak;
  int64_t allocated; /* accumulated increases */
  int64_t freed;     /* accumulated decreases */
} cudacache_stat;
/* Index of a per-pool counter. */
enum { CUDACACHE_ALL_POOLS = 0, CUDACACHE_SMALL_POOL = 1, CUDACACHE_LARGE_POOL = 2 };
typedef struct cudacache_memory_stats {
  uint32_t size;
  uint32_t version;
#define CUDACACHE_STAT_ARRAY(name, doc) cudacache_stat name[3];
#define CUDACACHE_STAT_SINGLE(name, doc) cudacache_stat name;
#define CUDACACHE_STAT_EVENTS(name, doc) int64_t name;
#define CUDACACHE_STAT_SETTING(name, doc) int64_t name;
#include <cudacache/memory_stats.inc>
} cudacache_memory_stats;
CUDACACHE_API cudacache_status cudacache_get_memory_stats(int device,
                                                          cudacache_memory_stats* stats);

/* JSON documents, snprintf-style: writes at most len bytes (NUL included) into buf (which may
 * be NULL when len is 0) and returns the length of the full document without the NUL, or -1
 * on failure (see cudacache_last_error): also for buf NULL with len > 0, and for a document
 * longer than INT_MAX (the C++ API returns any length). memory_stats is a flat object with
 * PyTorch's dotted keys ("allocated_bytes.all.current"); snapshot follows
 * torch.cuda.memory._snapshot(). */
CUDACACHE_API int cudacache_memory_stats_json(int device, char* buf, size_t len);
CUDACACHE_API int cudacache_snapshot_json(int device, char* buf, size_t len);

/* Allocation history, like PyTorch's torch.cuda.memory._record_memory_history(max_entries=N):
 * a bounded ring per device of alloc, free_requested, free_completed, segment_alloc,
 * segment_free, segment_map, segment_unmap (pages of expandable segments), oom and empty_cache
 * entries, without stacks (cudacache_record_history_stacks records them). max_entries > 0 starts a
 * new recording on device, dropping earlier entries, and keeps the newest max_entries; 0 stops
 * recording and keeps the entries for export until the next start. The record_history:N option
 * starts a recording on every device from its allocator's creation instead. Like any call that
 * names a device, this one is a first use (the options become fixed). CUDACACHE_INVALID_ARGUMENT
 * above 100000000. */
CUDACACHE_API cudacache_status cudacache_record_history(int device, size_t max_entries);
/* The history of device as a replay CSV ("op,id,size,stream" rows, the input of
 * cudacache-replay), snprintf-style like the JSON functions. The same entries are the
 * device_traces of cudacache_snapshot_json. */
CUDACACHE_API int cudacache_history_csv(int device, char* buf, size_t len);

/* Allocation stacks (PyTorch's _record_memory_history(stacks=...)): which frames an alloc or oom
 * entry of the history, an allocated block of a snapshot and a growth site carry, as PyTorch's
 * "frames" ([{"name", "filename", "line"}], innermost first, cudacache's own frames left out).
 * CPP: the C++ call stack, captured as return addresses and named at export from the dynamic
 * symbol table (dladdr: "filename" is the shared object, "line" 0; a program's own functions
 * are named when it is linked with -rdynamic). PYTHON: Python frames, from the provider that
 * libcudacache_torch registers. Off by default: capturing costs time on every allocation. */
typedef enum cudacache_stacks {
  CUDACACHE_STACKS_NONE = 0,
  CUDACACHE_STACKS_CPP = 1,
  CUDACACHE_STACKS_PYTHON = 2,
  CUDACACHE_STACKS_ALL = 3
} cudacache_stacks;
/* cudacache_record_history with the stacks each entry carries (a cudacache_stacks value: an
 * int parameter, so that any other value is an error rather than undefined behaviour). */
CUDACACHE_API cudacache_status cudacache_record_history_stacks(int device, size_t max_entries,
                                                               int stacks);

/* Python frames: the provider calls emit(sink, name, filename, line) once per frame of the
 * calling thread, innermost first (the strings need to live only during the call). It is called
 * before cudacache takes any lock of its own. NULL unregisters. */
typedef void (*cudacache_frame_sink)(void* sink, const char* name, const char* filename, int line);
typedef void (*cudacache_python_frames_provider)(cudacache_frame_sink emit, void* sink);
CUDACACHE_API void cudacache_set_python_frames_provider(cudacache_python_frames_provider provider);
/* cudacache's own provider: the calling thread's frames through the CPython C API of the process
 * (found at run time; no frames in a process without a running interpreter). The Python package
 * registers it: cudacache_set_python_frames_provider(cudacache_python_frames). */
CUDACACHE_API void cudacache_python_frames(cudacache_frame_sink emit, void* sink);

/* Growth detector: memory a program keeps step after step (`total += loss` in a training
 * loop). cudacache_watch_growth starts watching device (rising_steps 2..1000; 0 stops): each
 * allocation then records its stack and its step. cudacache_mark_step ends a step on every
 * device. When allocated memory at a step's end is higher than at the previous one for
 * rising_steps ends in a row, the blocks those steps left allocated are grouped by allocation
 * stack, and the sites with blocks from at least two of those steps are reported once: on
 * stderr (not with CUDACACHE_GROWTH_QUIET) and in cudacache_growth_report_json. The
 * detect_growth:N option watches every device from its first use. */
#define CUDACACHE_GROWTH_QUIET 1
CUDACACHE_API cudacache_status cudacache_watch_growth(int device, unsigned rising_steps, int stacks,
                                                      int flags);
/* Returns how many devices found growth at this step (0 mostly), or -1 on failure. */
CUDACACHE_API int cudacache_mark_step(void);
/* {"device", "growing", "step", "allocated_at_boundaries": [bytes...], "sites": [{"bytes",
 * "blocks", "steps", "frames"}]} (sites most bytes first), snprintf-style like the JSON
 * functions. */
CUDACACHE_API int cudacache_growth_report_json(int device, char* buf, size_t len);

/* Parses "key:value,key:value" (same syntax as CUDACACHE_CONF, whose keys it overrides).
 * Must be called before first use (see Conventions above); afterwards it fails with
 * CUDACACHE_CONFIG. */
CUDACACHE_API cudacache_status cudacache_configure(const char* config);
/* Text listing every option, its default, its effective value and its documentation (on failure,
 * the message of cudacache_last_error()). Valid until the next call on this thread; not to be
 * called from exit handlers (the text is a thread_local object, destroyed at exit). */
CUDACACHE_API const char* cudacache_config_help(void);

/* Out-of-memory retry hooks. When an allocation still fails after the allocator has released
 * its own cache, the hooks run in registration order, without any cudacache lock held (a hook
 * may free memory through cudacache). A hook returns true to ask for another attempt. At most
 * CUDACACHE_MAX_RETRY_ROUNDS rounds run; then the allocation fails. A hook may also allocate
 * through cudacache; if that allocation fails it does not run the hooks again: it fails with
 * out of memory. */
#define CUDACACHE_MAX_RETRY_ROUNDS 4
typedef struct cudacache_oom_context {
  int device;
  int round;                /* 0 for the first round of hooks */
  size_t requested_bytes;   /* as passed by the caller */
  size_t allocated_bytes;   /* allocated_bytes.all.current */
  size_t reserved_bytes;    /* reserved_bytes.all.current */
  size_t device_free_bytes; /* cudaMemGetInfo */
  size_t device_total_bytes;
  void* user_data; /* as given at registration */
} cudacache_oom_context;

typedef bool (*cudacache_retry_hook)(const cudacache_oom_context* context);

/* Returns a handle > 0, or -1 (hook is NULL). Threads that run out of memory at once may call
   a hook at once. */
CUDACACHE_API int cudacache_register_retry_hook(cudacache_retry_hook hook, void* user_data);
/* Once this returns, the hook is never called again and no call of it is still running (one
   another thread began is waited for), so its user_data may be freed. Called from inside a
   hook, it waits for nothing. */
CUDACACHE_API cudacache_status cudacache_unregister_retry_hook(int handle);

#ifdef __cplusplus
}
#endif

#endif /* CUDACACHE_H */
