#include "expandable_segment.h"

#include "device_api.h"
#include "log.h"

#include <algorithm>
#include <iterator>

namespace cudacache {

namespace {

// Releases pages (logging failures).
void release_page_range(SegmentBackend& backend, std::vector<Page>::const_iterator first,
                        std::vector<Page>::const_iterator last) {
  for (; first != last; ++first) {
    if (const cudaError_t error = backend.release_page(first->handle); error != cudaSuccess) {
      logger().error("device {}: cuMemRelease failed: {}", backend.device(),
                     device_api::error_string(error));
    }
  }
}

}  // namespace

cudaError_t create_pages(SegmentBackend& backend, std::size_t bytes, std::size_t page_size,
                         std::vector<Page>* pages) {
  // Appended in place (a growth's path makes no allocation for them); on an error, what this
  // call appended is released and removed.
  const std::size_t first = pages->size();
  if (page_size > 0) pages->reserve(first + (bytes + page_size - 1) / page_size);
  for (std::size_t done = 0; done < bytes;) {
    Page page{0, std::min(page_size, bytes - done)};
    if (const cudaError_t error = backend.create_page(page.size, &page.handle);
        error != cudaSuccess) {
      release_page_range(backend, pages->begin() + static_cast<std::ptrdiff_t>(first),
                         pages->end());
      pages->resize(first);
      return error;
    }
    pages->push_back(page);
    done += page.size;
  }
  return cudaSuccess;
}

void release_pages(SegmentBackend& backend, const std::vector<Page>& pages) {
  release_page_range(backend, pages.begin(), pages.end());
}

std::unique_ptr<ExpandableSegment> ExpandableSegment::reserve(SegmentBackend& backend,
                                                              std::size_t page_size,
                                                              std::size_t pages,
                                                              cudaStream_t stream,
                                                              cudaError_t* error) {
  std::uintptr_t base = 0;
  *error = backend.reserve(page_size * pages, &base);
  if (*error != cudaSuccess) return nullptr;
  try {
    return std::unique_ptr<ExpandableSegment>(
        new ExpandableSegment(backend, base, page_size, pages, stream));
  } catch (...) {  // std::bad_alloc: the addresses go back
    backend.unreserve(base, page_size * pages);
    throw;
  }
}

ExpandableSegment::ExpandableSegment(SegmentBackend& backend, std::uintptr_t base,
                                     std::size_t page_size, std::size_t pages, cudaStream_t stream)
    : backend_(backend),
      base_(base),
      size_(page_size * pages),
      page_size_(page_size),
      stream_(stream),
      pages_(base, page_size * pages, backend.page_granularity()) {}

ExpandableSegment::~ExpandableSegment() {
  // Teardown gives back every page it can: one failed call keeps at most the page it was for
  // (the driver still has it), never the pages after it. If even the device synchronize that
  // stands in for a failed stream synchronize fails (a broken context), the pages go anyway:
  // nothing can wait for that stream any more, and keeping them would only leak them.
  if (!pages_.empty()) {
    if (const cudaError_t error = device_api::synchronize_stream(backend_.device(), stream_);
        error != cudaSuccess) {
      logger().error("device {}: synchronizing before unmapping pages failed: {}",
                     backend_.device(), device_api::error_string(error));
    }
  }
  pages_.for_each_from(base_, base_ + size_, [&](std::uintptr_t address, const Page& page) {
    if (const cudaError_t error = backend_.unmap(address, page.size); error != cudaSuccess) {
      logger().error("device {}: unmapping the page at {:#x} failed: {}", backend_.device(),
                     address, device_api::error_string(error));
      return;
    }
    if (const cudaError_t error = backend_.release_page(page.handle); error != cudaSuccess) {
      logger().error("device {}: cuMemRelease failed: {}", backend_.device(),
                     device_api::error_string(error));
    }
  });
  if (const cudaError_t error = backend_.unreserve(base_, size_); error != cudaSuccess) {
    logger().error("device {}: freeing the address range at {:#x} failed: {}", backend_.device(),
                   base_, device_api::error_string(error));
  }
}

cudaError_t ExpandableSegment::map(std::uintptr_t address, std::size_t size, AddressRange* mapped) {
  *mapped = {};
  const std::uintptr_t first = base_ + (address - base_) / page_size_ * page_size_;
  const std::uintptr_t last = std::min(
      base_ + size_, base_ + (address + size - base_ + page_size_ - 1) / page_size_ * page_size_);
  if (first >= last) return cudaSuccess;
  std::vector<Page> created;
  if (const cudaError_t error = create_pages(backend_, last - first, page_size_, &created);
      error != cudaSuccess) {
    return error;
  }
  cudaError_t error = cudaSuccess;
  try {
    error = map_pages(first, created, mapped);
  } catch (...) {  // std::bad_alloc, with nothing mapped (map_pages): the pages go back
    release_pages(backend_, created);
    throw;
  }
  if (error != cudaSuccess) release_pages(backend_, created);
  return error;
}

cudaError_t ExpandableSegment::map_pages(std::uintptr_t address, const std::vector<Page>& pages,
                                         AddressRange* mapped) {
  *mapped = {};
  std::size_t bytes = 0;
  for (const Page& page : pages) bytes += page.size;
  if (bytes == 0) return cudaSuccess;
  // The index's room first: without host memory for it (std::bad_alloc) nothing is mapped and
  // the caller still holds the pages (Note [Host memory runs out]).
  pages_.reserve(address, bytes, pages.size());
  auto undo = [&](std::size_t count) {
    std::uintptr_t at = address;
    for (std::size_t i = 0; i < count; ++i) {
      // A second failure: the caller still releases the page's handle, and its memory stays
      // mapped at `at`, outside the index, until the process ends. Said, not hidden.
      if (const cudaError_t error = backend_.unmap(at, pages[i].size); error != cudaSuccess) {
        logger().error(
            "device {}: unmapping the page at {:#x} after a failed map failed: {}; its "
            "{} bytes stay mapped",
            backend_.device(), at, device_api::error_string(error), pages[i].size);
      }
      at += pages[i].size;
    }
  };
  std::uintptr_t at = address;
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (const cudaError_t error = backend_.map(at, pages[i].size, pages[i].handle);
        error != cudaSuccess) {
      undo(i);
      return error;
    }
    at += pages[i].size;
  }
  if (const cudaError_t error = backend_.set_access(address, bytes); error != cudaSuccess) {
    undo(pages.size());
    return error;
  }
  at = address;
  for (const Page& page : pages) {
    pages_.insert(at, page);  // in the room reserved above
    if (page.exclusive) ++exclusive_pages_;
    at += page.size;
  }
  *mapped = {address, bytes};
  return cudaSuccess;
}

std::optional<std::pair<std::uintptr_t, Page>> ExpandableSegment::page_across(
    std::uintptr_t point) const {
  return pages_.across(point);
}

void ExpandableSegment::share_page(std::uintptr_t address) {
  Page* page = pages_.find(address);
  if (page == nullptr || !page->exclusive) return;
  page->exclusive = false;
  --exclusive_pages_;
}

cudaError_t ExpandableSegment::unmap(std::uintptr_t address, std::size_t size,
                                     AddressRange* unmapped, std::vector<Page>* kept,
                                     bool stream_synchronized) {
  *unmapped = {};
  const std::uintptr_t end = address + size;
  const auto first = pages_.first_from(address, end);
  if (!first || first->first + first->second.size > end) return cudaSuccess;  // no whole page
  // The stream's last kernels may still use these pages: unmap only after they are done.
  if (!stream_synchronized) {
    if (const cudaError_t error = device_api::synchronize_stream(backend_.device(), stream_);
        error != cudaSuccess) {
      return error;
    }
  }
  unmapped->address = first->first;
  // Room for the kept pages before any is unmapped: a page unmapped and not kept would be lost.
  if (kept != nullptr) {
    std::size_t count = 0;
    pages_.for_each_from(address, end, [&](std::uintptr_t, const Page&) { ++count; });
    kept->reserve(kept->size() + count);
  }
  // A failed release loses only its page: stopping there would leave the free pages after it
  // mapped, and empty_cache would not give back what it can (found by the suite-wide fault sweep).
  cudaError_t release_error = cudaSuccess;
  for (auto entry = first; entry && entry->first + entry->second.size <= end;
       entry = pages_.first_from(entry->first + entry->second.size, end)) {
    const auto [at, page] = *entry;
    if (const cudaError_t error = backend_.unmap(at, page.size); error != cudaSuccess) {
      return error;
    }
    pages_.erase(at);
    if (page.exclusive) --exclusive_pages_;
    unmapped->size += page.size;
    if (kept != nullptr) {
      kept->push_back(page);
    } else if (const cudaError_t error = backend_.release_page(page.handle);
               error != cudaSuccess && release_error == cudaSuccess) {
      release_error = error;  // unmapped, so no longer reserved, though the driver kept the page
    }
  }
  return release_error;
}

}  // namespace cudacache
