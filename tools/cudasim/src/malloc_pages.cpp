// What a cudaMalloc takes from the device's memory (what cudaMemGetInfo shows).
//
// By default its size rounded up to 256 bytes, so that an allocator that calls cudaMalloc for
// every request loses nothing at its blocks' edges. With CUDASIM_MALLOC_PAGE=BYTES, as PyTorch's
// pull request 17120 (github.com/pytorch/pytorch) describes the driver since Pascal: a block
// over 1 MB starts a fresh 2 MiB page, and only small blocks go into the unused end of its last:
// - an allocation of more than half a page starts a page of its own and takes whole pages;
//   small allocations may use the unused end of its last page;
// - an allocation of at most half a page goes into the page with the least free memory that
//   holds it (the rest of a large allocation's last page or a page of small allocations), or
//   else takes a new page;
// - a page goes back to the device when nothing in it is left;
// - a large allocation's address is a multiple of the page (memory.cpp's map_aligned), as on
//   the driver described.
// Where in a page a small allocation lies is not modelled: a page holds small allocations as
// long as their bytes fit, as if packed without a gap.
#include "api.h"

namespace cudasim {

namespace {

void index_page(Device& d, uint64_t id, const SharedPage& page) {
  d.shared_pages_by_free.emplace(page.free_bytes, id);
}

void unindex_page(Device& d, uint64_t id, const SharedPage& page) {
  d.shared_pages_by_free.erase({page.free_bytes, id});
}

// A new page shared from now on, `used` bytes of it taken by its first occupant.
uint64_t open_page(Device& d, size_t page_bytes, size_t used) {
  const uint64_t id = d.next_shared_page++;
  const SharedPage page{page_bytes - used, 1};
  d.shared_pages.emplace(id, page);
  index_page(d, id, page);
  return id;
}

}  // namespace

cudaError_t take_malloc_memory(State& s, int device, size_t size, Allocation* a) {
  Device& d = s.devices[static_cast<size_t>(device)];
  const size_t page = s.malloc_page;
  if (page == 0) {
    a->own_bytes = round_up(size, kAllocationAlignment);
    return charge(s, device, a->own_bytes);
  }
  if (size > page / 2) {
    const size_t taken = round_up(size, page);
    if (const cudaError_t e = charge(s, device, taken); e != cudaSuccess) return e;
    const size_t tail = round_up(size % page, kAllocationAlignment);
    if (tail == 0 || tail == page) {
      a->own_bytes = taken;
    } else {
      a->own_bytes = taken - page;
      a->shared_page = open_page(d, page, tail);
      a->shared_bytes = tail;
    }
    return cudaSuccess;
  }
  const size_t bytes = round_up(size, kAllocationAlignment);
  a->shared_bytes = bytes;
  const auto fit = d.shared_pages_by_free.lower_bound({bytes, 0});
  if (fit == d.shared_pages_by_free.end()) {
    if (const cudaError_t e = charge(s, device, page); e != cudaSuccess) return e;
    a->shared_page = open_page(d, page, bytes);
    return cudaSuccess;
  }
  // Nothing new is taken, but fail-nth still counts the allocation (and a capacity lowered
  // below what is in use refuses it, as it refuses every allocation).
  if (const cudaError_t e = charge(s, device, 0); e != cudaSuccess) return e;
  const uint64_t id = fit->second;
  SharedPage& shared = d.shared_pages.at(id);
  unindex_page(d, id, shared);
  shared.free_bytes -= bytes;
  ++shared.occupants;
  index_page(d, id, shared);
  a->shared_page = id;
  return cudaSuccess;
}

void give_back_malloc_memory(State& s, const Allocation& a) {
  credit(s, a.device, a.own_bytes);
  if (a.shared_page == 0) return;
  Device& d = s.devices[static_cast<size_t>(a.device)];
  const auto it = d.shared_pages.find(a.shared_page);
  if (it == d.shared_pages.end()) return;  // never: a page lives while anything is in it
  unindex_page(d, it->first, it->second);
  if (--it->second.occupants == 0) {
    credit(s, a.device, s.malloc_page);
    d.shared_pages.erase(it);
    return;
  }
  it->second.free_bytes += a.shared_bytes;
  index_page(d, it->first, it->second);
}

}  // namespace cudasim
