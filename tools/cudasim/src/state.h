// Internal state of the simulated runtime: devices, allocations, streams, events and VMM
// objects, all guarded by one mutex. Every API entry point locks it; the work a stream "runs"
// is executed under it too, so no state is ever touched without it.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "cudasim.h"

namespace cudasim {

// cudaMalloc sizes are counted rounded up to this (CUDA aligns pointers to at least 256 B).
inline constexpr size_t kAllocationAlignment = 256;

// `bytes` rounded up to a multiple of `alignment` (any positive number, not only a power of two).
inline constexpr size_t round_up(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}
// VMM granularity, both minimum and recommended, as on current NVIDIA GPUs.
inline constexpr size_t kVmmGranularity = size_t{2} << 20;
inline constexpr int kRuntimeVersion = 13000;

using Clock = std::chrono::steady_clock;
using StreamId = uint64_t;
using EventId = uint64_t;

// A point in a stream's work: done once the stream has completed op number `seq`.
struct Ticket {
  StreamId stream = 0;
  uint64_t seq = 0;
};

struct Op {
  uint64_t seq = 0;
  std::vector<Ticket> waits;     // other streams' work this op must wait for
  std::function<void()> action;  // the host-side effect (copy, free, event timestamp)
};

enum class StreamKind { Legacy, PerThread, User };

struct Stream {
  int device = 0;
  StreamKind kind = StreamKind::User;
  unsigned flags = cudaStreamDefault;
  int priority = 0;
  bool destroyed = false;  // handle invalid for users; kept until its work drains
  bool held = false;
  // cudasim_set_stream_capturing: reported as capturing (cudaStreamCaptureStatusActive) by the
  // capture queries. cudasim records no graph: this only lets tests see how code that asks
  // behaves during a capture.
  bool capturing = false;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  std::deque<Op> queue;
};

struct Event {
  int device = 0;
  unsigned flags = cudaEventDefault;
  bool recorded = false;
  uint64_t generation = 0;  // bumped by each record so stale markers are ignored
  Ticket ticket;
  std::optional<Clock::time_point> completed_at;
};

struct Allocation {
  int device = 0;
  size_t bytes = 0;           // rounded size, as mapped
  bool free_pending = false;  // cudaFreeAsync enqueued but not yet run
  // What it takes from the device (malloc_pages.cpp): bytes of its own, given back when it is
  // freed, and, with CUDASIM_MALLOC_PAGE, its bytes in a page it shares with small allocations.
  size_t own_bytes = 0;
  uint64_t shared_page = 0;  // 0: none
  size_t shared_bytes = 0;
};

// CUDASIM_MALLOC_PAGE: a page that small allocations share (malloc_pages.cpp).
struct SharedPage {
  size_t free_bytes = 0;
  size_t occupants = 0;
};

struct PhysicalAllocation {  // cuMemCreate
  int device = 0;
  size_t bytes = 0;
  uint64_t offset = 0;  // in the device's memfd
  int mappings = 0;
  bool released = false;  // cuMemRelease called; freed when the last mapping goes
};

struct Mapping {  // cuMemMap
  size_t bytes = 0;
  uint64_t handle = 0;
  int device = 0;
};

struct HostAllocation {  // cudaHostAlloc / cudaMallocHost, or cudaHostRegister (host_memory.cpp)
  size_t bytes = 0;
  bool registered = false;  // cudaHostRegister'ed user memory, not ours to unmap
  int device = 0;           // the device current when it was pinned
};

struct Device {
  size_t capacity = 0;
  cudasim_counters counters{};
  cudasim_call_counts calls{};  // cudasim_get_call_counts
  // Every call since load, never reset (cudasim_reset_counters resets `calls`): what
  // CUDASIM_CALL_REPORT writes at exit.
  cudasim_call_counts lifetime_calls{};
  bool injected = false;  // a call of this device failed by fail-nth-call (CUDASIM_CALL_REPORT)
  bool fail_from_env = false;  // the armed failure is CUDASIM_FAIL_NTH's
  bool env_fault_fired = false;
  // What injected failures of cudaFree (an allocation's address) and of cuMemRelease or
  // cuMemUnmap (the handles whose memory they kept) left alive; the report counts what of it is
  // still alive at exit, so that a fault sweep knows what a failed free left behind.
  std::vector<uintptr_t> kept_allocations;
  std::vector<uint64_t> kept_handles;
  bool vmm_supported = true;  // cudasim_set_vmm_supported, CUDASIM_VMM
  int fail_countdown = 0;     // cudasim_fail_nth_allocation; 0 = none pending
  // cudasim_fail_nth_call: the kind whose call fails when its countdown reaches 0.
  uint64_t cudasim_call_counts::*fail_kind = nullptr;
  int fail_kind_countdown = 0;
  unsigned flags = 0;  // cudaSetDeviceFlags
  StreamId legacy_stream = 0;
  int memfd = -1;           // backing store of cuMemCreate, created on first use
  uint64_t memfd_next = 0;  // the memfd's offsets from here on were never handed out
  // Released ranges below memfd_next (offset -> bytes, coalesced), reused first: a long-running
  // process that creates and releases pages out of order never runs out of offsets.
  std::map<uint64_t, uint64_t> memfd_holes;
  int primary_context_retains = 0;  // cuDevicePrimaryCtxRetain minus Release (driver.cpp)
  uint64_t peer_access = 0;         // bit p: cudaDeviceEnablePeerAccess(p) done (peer.cpp)
  // CUDASIM_MALLOC_PAGE: the pages small allocations share, and the same by free bytes (a best
  // fit); malloc_pages.cpp.
  std::map<uint64_t, SharedPage> shared_pages;
  std::set<std::pair<size_t, uint64_t>> shared_pages_by_free;
  uint64_t next_shared_page = 1;
};

struct State {
  std::mutex mutex;
  std::condition_variable progress;  // notified whenever stream work completes
  std::vector<Device> devices;
  bool report = false;
  bool verbose = false;  // CUDASIM_VERBOSE=1: log lookups of driver functions cudasim lacks
  const char* call_report = nullptr;  // CUDASIM_CALL_REPORT: file written at exit
  size_t malloc_page = 0;             // Config::malloc_page
  uint64_t total_in_use = 0;
  uint64_t total_peak = 0;

  std::map<uintptr_t, Allocation> allocations;
  std::unordered_map<StreamId, Stream> streams;
  std::unordered_map<EventId, Event> events;
  StreamId next_stream = 1;
  EventId next_event = 1;
  uint64_t generation = 0;
  size_t pending_ops = 0;  // ops queued on any stream

  std::map<uintptr_t, size_t> reservations;  // cuMemAddressReserve: base -> bytes
  std::map<uintptr_t, Mapping> mappings;
  std::unordered_map<uint64_t, PhysicalAllocation> physical;
  uint64_t next_physical = 1;

  std::map<uintptr_t, HostAllocation> host_allocations;  // page-locked host memory

  std::vector<uint64_t> log_callbacks;  // cuLogsRegisterCallback handles (driver.cpp)
  uint64_t log_callbacks_registered = 0;
};

struct Config {
  int devices = 1;
  size_t capacity = size_t{80} << 30;
  bool report = false;
  bool verbose = false;
  bool vmm = true;  // CUDASIM_VMM
  // CUDASIM_MALLOC_PAGE: the page of cudaMalloc's memory (0: off, every allocation takes its
  // size rounded to kAllocationAlignment); malloc_pages.cpp.
  size_t malloc_page = 0;
  // CUDASIM_FAIL_NTH=KIND:N[@DEVICE]: as cudasim_fail_nth_call(DEVICE, KIND, N) at load.
  const char* fail_kind = nullptr;  // a name of kCallKinds
  int fail_n = 0;
  int fail_device = 0;
  const char* call_report = nullptr;  // CUDASIM_CALL_REPORT: file written at exit
};

// Reads CUDASIM_*; prints the problem and _exit(2)s on a bad value.
Config load_config();

// The one State, created on first use and never destroyed, so that calls made from other
// libraries' static destructors (and the exit report) still find it.
State& state();

// Calling thread's current device (cudaSetDevice).
int& current_device();
// cudaSetDevice's effect on the calling thread's contexts (driver.cpp): the primary context of
// its (new) current device becomes current in place of whatever context it had made current.
void follow_runtime_device();
bool valid_device(const State& s, int device);
// cudaDeviceGetAttribute's answer (devices.cpp); nullopt for an attribute it does not know.
std::optional<int> device_attribute(cudaDeviceAttr attr, int device);

// Counts one device call of a kind (cudasim_get_call_counts) on `device`, or on the calling
// thread's current device when `device` is not a valid one (-1: none applies). Needs the lock.
// Returns true when cudasim_fail_nth_call chose this call to fail: the caller then returns
// injected_error(kind) (or injected_driver_error) and does nothing else.
using CallKind = uint64_t cudasim_call_counts::*;
// Every counted kind with its name (cudasim_fail_nth_call, CUDASIM_FAIL_NTH, the call report).
struct NamedCallKind {
  const char* name;
  CallKind kind;
};
extern const NamedCallKind kCallKinds[14];
// The kind called `name`, or nullptr.
CallKind call_kind_named(const char* name);
[[nodiscard]] bool count_call(State& s, int device, CallKind kind);
// Adds the time from its construction to its destruction, and one reading of the clock, to
// the calling thread's total (cudasim_thread_call_ns). Every function that counts a call starts
// with one, before taking the lock, so that waiting for it counts too.
class CallClock {
 public:
  CallClock();
  ~CallClock();
  CallClock(const CallClock&) = delete;
  CallClock& operator=(const CallClock&) = delete;

 private:
  uint64_t start_ns_;
};
// Nanoseconds the calling thread has spent in CallClock-timed calls (cudasim_thread_call_ns).
uint64_t thread_call_ns_total();
// What an injected failure returns: out of memory for the calls that allocate (cudaMalloc,
// cuMemCreate, cuMemMap, cuMemSetAccess, cuMemAddressReserve), an unknown error otherwise.
cudaError_t injected_error(CallKind kind);
CUresult injected_driver_error(CallKind kind);
// The bytes of a device's kept memory (Device::kept_allocations, kept_handles) still alive.
uint64_t kept_bytes_alive(const State& s, int device);

// Records a failure as the thread's last error and returns it; success passes through.
cudaError_t finish(cudaError_t error);

// Memory accounting. charge() applies fail-nth and capacity; both require the lock.
cudaError_t charge(State& s, int device, size_t bytes);
void credit(State& s, int device, size_t bytes);

// `bytes` of new private anonymous host mapping (MAP_NORESERVE) with `protection`, starting at
// a multiple of `alignment` (over-mapped, then trimmed: memory.cpp), near `hint` if it may be;
// MAP_FAILED when the host refuses. An alignment that is not a multiple of the host's page
// cannot be cut out of a mapping and gets the host's.
void* map_aligned(size_t bytes, size_t alignment, int protection, void* hint = nullptr);

// What a cudaMalloc of `size` bytes takes from the device (malloc_pages.cpp): fills `a`'s
// own_bytes and shared page, charging them; and gives it back. Both require the lock.
cudaError_t take_malloc_memory(State& s, int device, size_t size, Allocation* a);
void give_back_malloc_memory(State& s, const Allocation& a);

// Streams (streams.cpp); all require the lock.
enum class DefaultStream { Legacy, PerThread };
// Maps a user handle (NULL, cudaStreamLegacy, cudaStreamPerThread or created) to a live stream.
cudaError_t resolve_stream(State& s, cudaStream_t handle, DefaultStream mode, StreamId* out);
Ticket enqueue(State& s, StreamId stream, std::vector<Ticket> waits, std::function<void()> action);
bool ticket_done(const State& s, Ticket t);
void make_progress(State& s);
void wait_for(std::unique_lock<std::mutex>& lock, State& s, Ticket t);
StreamId create_stream(State& s, int device, StreamKind kind, unsigned flags, int priority);
void reset_device_streams(State& s, int device);
void reset_device_events(State& s, int device);  // events.cpp
cudaStream_t stream_handle(StreamId id);
StreamId stream_from_handle(cudaStream_t handle);  // 0 when not a created-stream handle

// Memory (memory.cpp); require the lock.
bool is_device_range(const State& s, const void* ptr, size_t bytes);
void free_device_allocations(State& s, int device);
void release_device_vmm(State& s, int device);  // vmm.cpp
// The page-locked host allocation containing ptr, or nullptr (host_memory.cpp); needs the lock.
const HostAllocation* find_host_allocation(const State& s, const void* ptr);

}  // namespace cudasim
