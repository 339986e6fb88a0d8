// The driver's virtual memory management API, simulated with real host mappings:
//   cuMemAddressReserve  mmap(PROT_NONE) of the range
//   cuMemCreate          a range of the device's one sparse memfd
//   cuMemMap             mmap(MAP_FIXED | MAP_SHARED) of that memfd range, still PROT_NONE
//   cuMemSetAccess       mprotect
//   cuMemUnmap           mmap(PROT_NONE) over the range again
//   cuMemRelease         fallocate(PUNCH_HOLE), once no mapping uses it
// so touching memory that is not mapped with access faults (SIGSEGV), as an illegal address
// would on a GPU. Driver calls return CUresult and never touch the runtime's last error.
// The rules are CUDA's documented ones, held strictly so that what works here works on a GPU:
// sizes and addresses (hints too) are multiples of the granularity, a handle is mapped whole at
// offset 0, unmapping takes whole mappings, and a new mapping is inaccessible until
// cuMemSetAccess. A device without VMM (cudasim_set_vmm_supported, CUDASIM_VMM=0) refuses
// cuMemCreate and cuMemGetAllocationGranularity with CUDA_ERROR_NOT_SUPPORTED.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "state.h"

namespace cudasim {

namespace {

// Sparse: only touched pages cost memory. Offsets are handed out in order.
constexpr uint64_t kMemfdBytes = uint64_t{1} << 46;

bool granular(uint64_t value) { return value % kVmmGranularity == 0; }

bool restore_reservation(uintptr_t ptr, size_t bytes) {
  return mmap(reinterpret_cast<void*>(ptr), bytes, PROT_NONE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) != MAP_FAILED;
}

// The memfd offset of `bytes` new bytes: the first released range that holds them, else the end
// of what was handed out. False when the memfd is exhausted. Nothing is taken until take_offset.
bool find_offset(const Device& d, uint64_t bytes, uint64_t* offset) {
  for (const auto& [at, size] : d.memfd_holes) {
    if (size >= bytes) {
      *offset = at;
      return true;
    }
  }
  if (bytes > kMemfdBytes - d.memfd_next) return false;
  *offset = d.memfd_next;
  return true;
}

void take_offset(Device& d, uint64_t offset, uint64_t bytes) {
  if (offset == d.memfd_next) {
    d.memfd_next += bytes;
    return;
  }
  const auto hole = d.memfd_holes.find(offset);
  const uint64_t rest = hole->second - bytes;
  d.memfd_holes.erase(hole);
  if (rest > 0) d.memfd_holes.emplace(offset + bytes, rest);
}

// Returns [offset, offset + bytes) to the memfd: coalesced with the released ranges beside it,
// and given back to the end when it reaches it.
void return_offset(Device& d, uint64_t offset, uint64_t bytes) {
  auto next = d.memfd_holes.lower_bound(offset);
  if (next != d.memfd_holes.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = d.memfd_holes.erase(next);
  }
  if (next != d.memfd_holes.begin()) {
    const auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      bytes += prev->second;
      d.memfd_holes.erase(prev);
    }
  }
  if (offset + bytes == d.memfd_next) {
    d.memfd_next = offset;
  } else {
    d.memfd_holes.emplace(offset, bytes);
  }
}

void free_physical(State& s, std::unordered_map<uint64_t, PhysicalAllocation>::iterator it) {
  const PhysicalAllocation& p = it->second;
  Device& d = s.devices[static_cast<size_t>(p.device)];
  fallocate(d.memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(p.offset),
            static_cast<off_t>(p.bytes));
  return_offset(d, p.offset, p.bytes);
  credit(s, p.device, p.bytes);
  s.physical.erase(it);
}

// Drops one mapping of a handle; frees the handle's memory if it was released meanwhile.
void drop_mapping(State& s, std::map<uintptr_t, Mapping>::iterator it) {
  restore_reservation(it->first, it->second.bytes);
  const auto handle = s.physical.find(it->second.handle);
  s.mappings.erase(it);
  if (handle != s.physical.end() && --handle->second.mappings == 0 && handle->second.released) {
    free_physical(s, handle);
  }
}

bool inside_reservation(const State& s, uintptr_t ptr, size_t bytes) {
  auto it = s.reservations.upper_bound(ptr);
  if (it == s.reservations.begin()) return false;
  --it;
  const uintptr_t offset = ptr - it->first;
  return offset < it->second && bytes <= it->second - offset;
}

bool overlaps_mapping(const State& s, uintptr_t ptr, size_t bytes) {
  auto it = s.mappings.lower_bound(ptr);
  if (it != s.mappings.end() && it->first < ptr + bytes) return true;
  if (it == s.mappings.begin()) return false;
  --it;
  return it->first + it->second.bytes > ptr;
}

// True if whole mappings cover [ptr, ptr + bytes) without gaps, starting exactly at ptr.
bool covered_by_mappings(const State& s, uintptr_t ptr, size_t bytes) {
  uintptr_t next = ptr;
  for (auto it = s.mappings.find(ptr); it != s.mappings.end() && it->first == next; ++it) {
    next += it->second.bytes;
    if (next == ptr + bytes) return true;
    if (next > ptr + bytes) return false;
  }
  return false;
}

// The device of the mapping that contains ptr, or -1: where cuMemUnmap and cuMemSetAccess
// are counted.
int mapping_device(const State& s, uintptr_t ptr) {
  auto it = s.mappings.upper_bound(ptr);
  if (it == s.mappings.begin()) return -1;
  --it;
  return ptr - it->first < it->second.bytes ? it->second.device : -1;
}

bool valid_location(const State& s, const CUmemLocation& location) {
  return location.type == CU_MEM_LOCATION_TYPE_DEVICE && valid_device(s, location.id);
}

}  // namespace

void release_device_vmm(State& s, int device) {
  for (auto it = s.mappings.begin(); it != s.mappings.end();) {
    const auto next = std::next(it);
    if (it->second.device == device) drop_mapping(s, it);
    it = next;
  }
  for (auto it = s.physical.begin(); it != s.physical.end();) {
    const auto next = std::next(it);
    if (it->second.device == device) free_physical(s, it);
    it = next;
  }
}

}  // namespace cudasim

using namespace cudasim;

extern "C" {

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (granularity == nullptr || prop == nullptr ||
      (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
       option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) ||
      !valid_location(s, prop->location)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!s.devices[static_cast<size_t>(prop->location.id)].vmm_supported) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

// Reservations belong to no device: counted on the calling thread's current device. The hint
// must be granular like the size (CUDA asks only for the host page size: stricter is safe).
CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count_call(s, -1, &cudasim_call_counts::reserve)) {
    return injected_driver_error(&cudasim_call_counts::reserve);
  }
  if (ptr == nullptr || size == 0 || !granular(size) || !granular(addr) || flags != 0 ||
      (alignment & (alignment - 1)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The address hint is only a hint, as in CUDA.
  void* raw = map_aligned(size, std::max(alignment, kVmmGranularity), PROT_NONE,
                          reinterpret_cast<void*>(addr));
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  s.reservations[base] = size;
  *ptr = base;
  return CUDA_SUCCESS;
}

// Only a whole reservation, as reserved. Stricter than the documentation asks: freeing a range
// that still has mappings is reported (CUDA_ERROR_INVALID_VALUE), since it is always a leak in
// the caller.
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count_call(s, -1, &cudasim_call_counts::address_free)) {
    return injected_driver_error(&cudasim_call_counts::address_free);
  }
  const auto it = s.reservations.find(ptr);
  if (!granular(ptr) || !granular(size) || it == s.reservations.end() || it->second != size ||
      overlaps_mapping(s, ptr, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  munmap(reinterpret_cast<void*>(ptr), size);
  s.reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count_call(s, prop == nullptr ? -1 : prop->location.id, &cudasim_call_counts::create)) {
    return injected_driver_error(&cudasim_call_counts::create);
  }
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 || !granular(size) ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int device = prop->location.id;
  if (!valid_device(s, device)) return CUDA_ERROR_INVALID_DEVICE;
  Device& d = s.devices[static_cast<size_t>(device)];
  if (!d.vmm_supported) return CUDA_ERROR_NOT_SUPPORTED;
  if (d.memfd < 0) {
    const int fd = memfd_create("cudasim-device", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, static_cast<off_t>(kMemfdBytes)) != 0) {
      close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d.memfd = fd;
  }
  uint64_t offset = 0;
  if (!find_offset(d, size, &offset)) return CUDA_ERROR_OUT_OF_MEMORY;
  if (charge(s, device, size) != cudaSuccess) return CUDA_ERROR_OUT_OF_MEMORY;
  take_offset(d, offset, size);
  const uint64_t id = s.next_physical++;
  s.physical[id] = PhysicalAllocation{device, size, offset, 0, false};
  ++d.counters.mallocs;
  *handle = id;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto it = s.physical.find(handle);
  if (count_call(s, it == s.physical.end() ? -1 : it->second.device,
                 &cudasim_call_counts::release)) {
    if (it != s.physical.end()) {
      s.devices[static_cast<size_t>(it->second.device)].kept_handles.push_back(handle);
    }
    return injected_driver_error(&cudasim_call_counts::release);
  }
  if (it == s.physical.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  ++s.devices[static_cast<size_t>(it->second.device)].counters.frees;
  // Like CUDA, the memory stays alive while mapped and goes with the last cuMemUnmap.
  it->second.released = true;
  if (it->second.mappings == 0) free_physical(s, it);
  return CUDA_SUCCESS;
}

// A handle is mapped whole: offset 0 ("currently must be zero", cuda.h) and size equal to the
// handle's size, at a granular address inside a reservation, over no other mapping.
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto it = s.physical.find(handle);
  if (count_call(s, it == s.physical.end() ? -1 : it->second.device, &cudasim_call_counts::map)) {
    return injected_driver_error(&cudasim_call_counts::map);
  }
  if (flags != 0 || size == 0 || !granular(ptr) || !granular(size) || offset != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (it == s.physical.end() || it->second.released || size != it->second.bytes ||
      !inside_reservation(s, ptr, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (overlaps_mapping(s, ptr, size)) return CUDA_ERROR_ALREADY_MAPPED;
  PhysicalAllocation& p = it->second;
  const int fd = s.devices[static_cast<size_t>(p.device)].memfd;
  if (mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, fd,
           static_cast<off_t>(p.offset)) == MAP_FAILED) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s.mappings[ptr] = Mapping{size, handle, p.device};
  ++p.mappings;
  ++s.devices[static_cast<size_t>(p.device)].counters.maps;
  return CUDA_SUCCESS;
}

// Only whole mappings, one or several adjacent ones, starting at a mapping (cuda.h: "cannot
// unmap a sub-range of an address range mapped by cuMemCreate / cuMemMap").
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count_call(s, mapping_device(s, ptr), &cudasim_call_counts::unmap)) {
    // Every mapping the call would have dropped stays, and with it its handle's memory.
    for (auto it = s.mappings.lower_bound(ptr); it != s.mappings.end() && it->first < ptr + size;
         ++it) {
      s.devices[static_cast<size_t>(it->second.device)].kept_handles.push_back(it->second.handle);
    }
    return injected_driver_error(&cudasim_call_counts::unmap);
  }
  if (size == 0 || !granular(ptr) || !granular(size) || !covered_by_mappings(s, ptr, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int device = s.mappings.at(ptr).device;
  for (auto it = s.mappings.find(ptr); it != s.mappings.end() && it->first < ptr + size;) {
    const auto next = std::next(it);
    drop_mapping(s, it);
    it = next;
  }
  ++s.devices[static_cast<size_t>(device)].counters.unmaps;
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count_call(s, mapping_device(s, ptr), &cudasim_call_counts::set_access)) {
    return injected_driver_error(&cudasim_call_counts::set_access);
  }
  if (desc == nullptr || count == 0 || size == 0 || !granular(ptr) || !granular(size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // One host process stands for every device: the range gets the widest access granted.
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (!valid_location(s, desc[i].location)) return CUDA_ERROR_INVALID_VALUE;
    switch (desc[i].flags) {
      case CU_MEM_ACCESS_FLAGS_PROT_NONE: break;
      case CU_MEM_ACCESS_FLAGS_PROT_READ: prot |= PROT_READ; break;
      case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: prot |= PROT_READ | PROT_WRITE; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  // The range must be mapped throughout (it may cover parts of mappings).
  auto it = s.mappings.upper_bound(ptr);
  if (it == s.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  uintptr_t covered = ptr;
  for (; it != s.mappings.end() && it->first <= covered && covered < ptr + size; ++it) {
    covered = std::max<uintptr_t>(covered, it->first + it->second.bytes);
  }
  if (covered < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  if (mprotect(reinterpret_cast<void*>(ptr), size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

}  // extern "C"
