// ExpandableSegment: the physical pages behind one virtual range (PyTorch's expandable segments).
//
// Note [Expandable segments]: with expandable_segments:True each (stream, pool) gets one
// virtual range of about 1 1/8 x the device's memory, reserved once. Memory grows by mapping
// pages at the low end of the free address space (2 MiB pages for the small pool, 20 MiB for
// the large pool), so a growing workload gets one contiguous range instead of a new segment
// per peak, and free memory at the end of the range can always be extended. Rules, as PyTorch:
// - map() rounds a range outward to whole pages: one cuMemCreate and one cuMemMap per page,
//   then one cuMemSetAccess for the range. A "device full" from cuMemCreate releases the pages
//   this call created and maps nothing.
// - unmap() rounds inward (only pages wholly inside the range go), synchronizes the segment's
//   stream first (the unmap and release calls do not wait for pending work on the pages), then
//   unmaps and releases each page.
// - Pages are unmapped only by empty_cache and the out-of-memory ladder, never by a free.
// Each page is its own handle, mapped whole (offset 0): the only use the driver allows for
// non-multicast handles, and what lets a page be unmapped alone. A page is any multiple of
// the range's page size (cudacache's policy maps one page per growth when the device has
// room, and moves unmapped pages to other ranges: Note [Moving pages] in policy_cudacache.cpp).
#pragma once

#include "page_index.h"
#include "segment_backend.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace cudacache {

struct AddressRange {
  std::uintptr_t address = 0;
  std::size_t size = 0;
};

// Creates pages of `page_size` bytes (the last one smaller when bytes is not a multiple)
// until they hold `bytes`. On an error, nothing created stays: the error is returned.
cudaError_t create_pages(SegmentBackend& backend, std::size_t bytes, std::size_t page_size,
                         std::vector<Page>* pages);
// Releases pages (logging failures).
void release_pages(SegmentBackend& backend, const std::vector<Page>& pages);

class ExpandableSegment {
 public:
  // Reserves `pages` x `page_size` bytes of address space; nullptr and *error on failure.
  static std::unique_ptr<ExpandableSegment> reserve(SegmentBackend& backend, std::size_t page_size,
                                                    std::size_t pages, cudaStream_t stream,
                                                    cudaError_t* error);
  // Unmaps and releases what is still mapped and returns the address range.
  ~ExpandableSegment();
  ExpandableSegment(const ExpandableSegment&) = delete;
  ExpandableSegment& operator=(const ExpandableSegment&) = delete;

  std::uintptr_t base() const { return base_; }
  std::size_t size() const { return size_; }
  std::size_t page_size() const { return page_size_; }

  // Maps new pages of page_size() covering [address, address + size) (PyTorch's growth).
  // *mapped is the page-rounded range mapped now, empty when the device is full
  // (cudaErrorMemoryAllocation). Any other error leaves nothing of this call mapped or created.
  cudaError_t map(std::uintptr_t address, std::size_t size, AddressRange* mapped);
  // Maps `pages` one after another from `address` (page-aligned, unmapped), with one
  // cuMemSetAccess for them all. On an error nothing is mapped and the pages stay the caller's.
  cudaError_t map_pages(std::uintptr_t address, const std::vector<Page>& pages,
                        AddressRange* mapped);
  // Calls fn(page_address, page) for each mapped page wholly inside [address, address + size),
  // in address order.
  template <typename Fn>
  void for_each_page_inside(std::uintptr_t address, std::size_t size, Fn&& fn) const {
    pages_.for_each_from(address, address + size, fn);
  }
  // The mapped page that starts before `point` and ends after it, if any (one lookup, for the
  // allocation path).
  std::optional<std::pair<std::uintptr_t, Page>> page_across(std::uintptr_t point) const;
  // Whether any mapped page is a page of one block (no lookup needed when none is).
  bool has_exclusive_pages() const { return exclusive_pages_ != 0; }
  // The mapped page at `address` is no longer a page of one block: it may hold a block and free
  // memory beside it, as any shared page (nothing when it was not one).
  void share_page(std::uintptr_t address);
  // Unmaps the pages wholly inside [address, address + size), after synchronizing the
  // segment's stream, and releases them, or hands them to *kept when it is not null.
  // *unmapped is the range unmapped (empty when no whole page lies inside, then no device call
  // is made). On an error of a synchronize or an unmap, *unmapped is the part unmapped before
  // it. A page whose release fails is unmapped all the same (the driver keeps it) and the pages
  // after it are still unmapped and released; the first such error is returned.
  // `stream_synchronized`: the caller has just synchronized the segment's stream (one
  // synchronize for several unmaps).
  cudaError_t unmap(std::uintptr_t address, std::size_t size, AddressRange* unmapped,
                    std::vector<Page>* kept = nullptr, bool stream_synchronized = false);
  cudaStream_t stream() const { return stream_; }

 private:
  ExpandableSegment(SegmentBackend& backend, std::uintptr_t base, std::size_t page_size,
                    std::size_t pages, cudaStream_t stream);
  SegmentBackend& backend_;
  const std::uintptr_t base_;
  const std::size_t size_;
  const std::size_t page_size_;
  const cudaStream_t stream_;
  PageIndex pages_;                  // mapped pages by address (Note [Page index] in page_index.h)
  std::size_t exclusive_pages_ = 0;  // how many of them are pages of one block
};

}  // namespace cudacache
