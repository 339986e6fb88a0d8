// Note [Never pass our memory on]: a free of a pointer inside one of our segments that the
// allocator does not own is a double free or an interior pointer. Forwarding it would be wrong
// in the worst way: when the pointer is a segment's base, the real runtime would free the whole
// segment under the cache. The hooks report it as the runtime reports a pointer it does not
// know (cudaErrorInvalidValue) instead.
#include "segment_table.h"

#include "mutex.h"

#include <cstdint>
#include <map>
#include <new>

namespace cudacache::preload {
namespace {

struct SegmentRange {
  std::size_t bytes;
  int device;
};

struct SegmentTable {
  Mutex mutex;
  std::map<std::uintptr_t, SegmentRange> segments CUDACACHE_GUARDED_BY(mutex);  // by base address
};

// Never destroyed: frees can arrive from other libraries' static destructors.
SegmentTable& segment_table() {
  static SegmentTable* instance = new SegmentTable;
  return *instance;
}

}  // namespace

int segment_device(const void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  SegmentTable& r = segment_table();
  MutexLock lock(r.mutex);
  auto it = r.segments.upper_bound(address);
  if (it == r.segments.begin()) return -1;
  --it;
  return address - it->first < it->second.bytes ? it->second.device : -1;
}

namespace {

// Records [base, base + bytes) on success; a range that cannot be recorded is given back, so
// that nothing of ours is ever unknown to the hooks.
template <typename Obtain, typename GiveBack>
cudaError_t obtain_tracked(int device, std::size_t bytes, std::uintptr_t* base, Obtain obtain,
                           GiveBack give_back) {
  const cudaError_t error = obtain();
  if (error != cudaSuccess) return error;
  try {
    SegmentTable& r = segment_table();
    MutexLock lock(r.mutex);
    r.segments[*base] = {bytes, device};
  } catch (const std::bad_alloc&) {
    give_back();
    *base = 0;
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}

void forget(std::uintptr_t base) {
  SegmentTable& r = segment_table();
  MutexLock lock(r.mutex);
  r.segments.erase(base);
}

}  // namespace

cudaError_t TrackingSegmentBackend::allocate(std::size_t bytes, std::uintptr_t* base) {
  return obtain_tracked(
      device(), bytes, base, [&] { return ForwardingSegmentBackend::allocate(bytes, base); },
      [&] { ForwardingSegmentBackend::release(*base, bytes); });
}

cudaError_t TrackingSegmentBackend::release(std::uintptr_t base, std::size_t bytes) {
  forget(base);
  return ForwardingSegmentBackend::release(base, bytes);
}

cudaError_t TrackingSegmentBackend::reserve(std::size_t bytes, std::uintptr_t* base) {
  return obtain_tracked(
      device(), bytes, base, [&] { return ForwardingSegmentBackend::reserve(bytes, base); },
      [&] { ForwardingSegmentBackend::unreserve(*base, bytes); });
}

cudaError_t TrackingSegmentBackend::unreserve(std::uintptr_t base, std::size_t bytes) {
  forget(base);
  return ForwardingSegmentBackend::unreserve(base, bytes);
}

}  // namespace cudacache::preload
