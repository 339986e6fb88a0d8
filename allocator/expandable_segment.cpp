#include "expandable_segment.h"

#include "device_api.h"
#include "log.h"

#include <algorithm>

namespace cudacache {

std::unique_ptr<ExpandableSegment> ExpandableSegment::reserve(SegmentBackend& backend,
                                                              std::size_t page_size,
                                                              std::size_t pages,
                                                              cudaStream_t stream,
                                                              cudaError_t* error) {
  std::uintptr_t base = 0;
  *error = backend.reserve(page_size * pages, &base);
  if (*error != cudaSuccess) return nullptr;
  return std::unique_ptr<ExpandableSegment>(
      new ExpandableSegment(backend, base, page_size, pages, stream));
}

ExpandableSegment::ExpandableSegment(SegmentBackend& backend, std::uintptr_t base,
                                     std::size_t page_size, std::size_t pages,
                                     cudaStream_t stream)
    : backend_(backend), base_(base), page_size_(page_size), stream_(stream), pages_(pages) {}

ExpandableSegment::~ExpandableSegment() {
  std::size_t first = 0;
  while (first < pages_.size()) {  // one unmap per mapped run, as PyTorch
    if (!pages_[first]) {
      ++first;
      continue;
    }
    std::size_t last = first;
    while (last < pages_.size() && pages_[last]) ++last;
    std::size_t done = 0;
    if (const cudaError_t error = unmap_pages(first, last, &done); error != cudaSuccess) {
      logger().error("device {}: unmapping expandable segment pages failed: {}", backend_.device(),
                     device_api::error_string(error));
    }
    first = last;
  }
  if (const cudaError_t error = backend_.unreserve(base_, size()); error != cudaSuccess) {
    logger().error("device {}: freeing the address range at {:#x} failed: {}", backend_.device(),
                   base_, device_api::error_string(error));
  }
}

cudaError_t ExpandableSegment::map(std::uintptr_t address, std::size_t size,
                                   AddressRange* mapped) {
  *mapped = {};
  const std::size_t first = (address - base_) / page_size_;
  const std::size_t last = std::min(pages_.size(), (address + size - base_ + page_size_ - 1) / page_size_);
  if (first >= last) return cudaSuccess;
  std::vector<PageHandle> created;
  created.reserve(last - first);
  auto undo = [&](std::size_t mapped_pages) {
    for (std::size_t i = 0; i < mapped_pages; ++i) backend_.unmap(page_address(first + i), page_size_);
    for (PageHandle handle : created) backend_.release_page(handle);
  };
  for (std::size_t i = first; i < last; ++i) {
    PageHandle handle = 0;
    if (const cudaError_t error = backend_.create_page(page_size_, &handle); error != cudaSuccess) {
      undo(0);
      return error;
    }
    created.push_back(handle);
  }
  for (std::size_t i = first; i < last; ++i) {
    const cudaError_t error = backend_.map(page_address(i), page_size_, created[i - first]);
    if (error != cudaSuccess) {
      undo(i - first);
      return error;
    }
  }
  const std::size_t bytes = (last - first) * page_size_;
  if (const cudaError_t error = backend_.set_access(page_address(first), bytes);
      error != cudaSuccess) {
    undo(last - first);
    return error;
  }
  for (std::size_t i = first; i < last; ++i) pages_[i] = created[i - first];
  *mapped = {page_address(first), bytes};
  return cudaSuccess;
}

cudaError_t ExpandableSegment::unmap(std::uintptr_t address, std::size_t size,
                                     AddressRange* unmapped) {
  *unmapped = {};
  const std::size_t first = (address - base_ + page_size_ - 1) / page_size_;
  const std::size_t last = (address + size - base_) / page_size_;
  if (first >= last) return cudaSuccess;
  std::size_t done = 0;
  const cudaError_t error = unmap_pages(first, last, &done);
  if (done > 0) *unmapped = {page_address(first), done * page_size_};
  return error;
}

cudaError_t ExpandableSegment::unmap_pages(std::size_t first, std::size_t last,
                                           std::size_t* done) {
  *done = 0;
  // The stream's last kernels may still use these pages: unmap only after they are done.
  if (const cudaError_t error = device_api::synchronize_stream(backend_.device(), stream_);
      error != cudaSuccess) {
    return error;
  }
  for (std::size_t i = first; i < last; ++i, ++*done) {
    if (const cudaError_t error = backend_.unmap(page_address(i), page_size_);
        error != cudaSuccess) {
      return error;
    }
    const PageHandle handle = *pages_[i];
    pages_[i].reset();
    if (const cudaError_t error = backend_.release_page(handle); error != cudaSuccess) {
      ++*done;  // unmapped, so no longer reserved, though the driver kept the page
      return error;
    }
  }
  return cudaSuccess;
}

}  // namespace cudacache
