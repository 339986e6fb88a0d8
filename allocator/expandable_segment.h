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
// non-multicast handles, and what lets a page be unmapped alone.
#pragma once

#include "segment_backend.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace cudacache {

struct AddressRange {
  std::uintptr_t address = 0;
  std::size_t size = 0;
};

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
  std::size_t size() const { return page_size_ * pages_.size(); }
  std::size_t page_size() const { return page_size_; }

  // Maps the pages covering [address, address + size). *mapped is the page-rounded range
  // mapped now, empty when the device is full (cudaErrorMemoryAllocation). Any other error
  // leaves nothing of this call mapped or created.
  cudaError_t map(std::uintptr_t address, std::size_t size, AddressRange* mapped);
  // Unmaps and releases the pages wholly inside [address, address + size), which must all be
  // mapped; *unmapped is the range unmapped (empty when no whole page lies inside, then no
  // device call is made). On an error, *unmapped is the part unmapped before it.
  cudaError_t unmap(std::uintptr_t address, std::size_t size, AddressRange* unmapped);

 private:
  ExpandableSegment(SegmentBackend& backend, std::uintptr_t base, std::size_t page_size,
                    std::size_t pages, cudaStream_t stream);
  // Synchronizes the stream, then unmaps and releases pages [first, last) in order, stopping at
  // the first error; *done counts the pages no longer mapped.
  cudaError_t unmap_pages(std::size_t first, std::size_t last, std::size_t* done);
  std::uintptr_t page_address(std::size_t index) const { return base_ + index * page_size_; }

  SegmentBackend& backend_;
  const std::uintptr_t base_;
  const std::size_t page_size_;
  const cudaStream_t stream_;
  std::vector<std::optional<PageHandle>> pages_;  // one slot per page of the range
};

}  // namespace cudacache
