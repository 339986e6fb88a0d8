// PageIndex: the mapped pages of one address range, by address (ExpandableSegment's index).
//
// Note [Page index]: every page starts and ends on a granule (the driver's granularity, 2 MiB
// on the GPUs we know), so the index is a table with one slot per granule of the range, holding
// the position of the page that starts there in a dense array of the pages, and a bitmap of the
// slots that hold one. Adding or removing a page is one slot, one bit and one array entry (a
// removal moves the last page into the hole), where a red-black tree (std::map, what this
// replaced) paid a node, a search and a rebalancing per page: on `dit`, whose growths map a page
// every other event, the table executes 4 % fewer instructions per event
// (bench/instructions.sh). Walks skip 64 granules without a page a step; the page across an
// address is the last one that starts before it, looked for no further back than the largest
// page ever indexed. The table is in chunks of kChunkGranules slots (1 GiB of address space at
// 2 MiB granules), each made when a page first spans it and kept until the range goes, so that
// a range reserved for the whole device costs host memory only where pages were mapped.
// Why the pages sit apart from the slots: host memory touched for the first time costs a page
// fault (1.6 us on our 2-core test machine, the time of a few dozen allocations). With the pages in
// the slots (24 bytes a granule, 12 KiB a chunk) pages of 20-80 MiB touched every 4 KiB of a chunk,
// and a fresh allocator replaying `nca3d` (2,087 events) took 30-62 faults, most of its gap in
// time per event to PyTorch's policy in that benchmark. Slots of 4 bytes make a chunk 2 KiB,
// and the pages' array grows with the pages, not with the address space (README, "Traces and
// `cudacache-replay`").
// Not thread-safe: its segment's allocator lock guards it.
#pragma once

#include "segment_backend.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace cudacache {

// A physical page: a handle of `size` bytes, mapped whole wherever it is mapped.
struct Page {
  PageHandle handle = 0;
  std::size_t size = 0;
  // A page of one block: it never holds a block and free memory beside it (cudacache's policy,
  // Note [Pages of one block] in pages_of_one_block.cpp).
  bool exclusive = false;
};

class PageIndex {
 public:
  // The range [base, base + size), in granules of `granule` bytes (every page's address and
  // size are multiples of it). Throws std::invalid_argument for a granule that is not a power
  // of two (the driver's granularity is one).
  PageIndex(std::uintptr_t base, std::size_t size, std::size_t granule);

  using Entry = std::pair<std::uintptr_t, Page>;  // a page and where it is mapped

  std::size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }

  // Makes the room for `pages` pages over [address, address + bytes) (granule multiples inside
  // the range), so that inserting them allocates nothing. Throws std::bad_alloc, then with no
  // change to the pages.
  void reserve(std::uintptr_t address, std::size_t bytes, std::size_t pages);
  // Adds `page` at `address` (a granule inside the range, the page's granules all unmapped and
  // reserved). Never throws. Pointers from find() stay valid until the next erase() or
  // reserve().
  void insert(std::uintptr_t address, const Page& page) noexcept;
  // Removes the page at `address` (one must start there).
  void erase(std::uintptr_t address) noexcept;
  // The page that starts at `address`, or nullptr.
  Page* find(std::uintptr_t address);
  // The page that starts before `point` and ends after it, if any.
  std::optional<Entry> across(std::uintptr_t point) const;
  // The first page that starts at or after `address` and before `end`, if any.
  std::optional<Entry> first_from(std::uintptr_t address, std::uintptr_t end) const;
  // Calls fn(address, page) for each page that starts at or after `address` in address order,
  // while the page ends by `end` (stopping at the first that does not).
  template <typename Fn>
  void for_each_from(std::uintptr_t address, std::uintptr_t end, Fn&& fn) const {
    std::size_t granule = 0;
    std::size_t to = 0;
    if (!walk_bounds(address, end, &granule, &to)) return;
    while ((granule = next_start(granule, to)) < to) {
      const Page& page = page_at(granule);
      const std::uintptr_t at = address_of(granule);
      if (at + page.size > end) return;
      fn(at, page);
      granule += granules_in(page.size);
    }
  }

 private:
  static constexpr std::size_t kChunkGranules = 512;
  static constexpr std::size_t kFirstCapacity = 16;  // pages: a range maps a few to begin with
  static constexpr std::size_t kWordBits = 64;
  struct Chunk {
    // Which slots hold a page (the first granule of one).
    std::array<std::uint64_t, kChunkGranules / kWordBits> starts{};
    // Where in pages_ the page of each slot `starts` marks is; the others are left raw.
    std::uint32_t position[kChunkGranules];
    bool starts_at(std::size_t slot) const {
      return (starts[slot / kWordBits] >> (slot % kWordBits) & 1) != 0;
    }
  };
  struct Indexed {
    Page page;
    std::size_t granule;  // where it starts: a removal that moves it updates that slot
  };
  // The pages' array is raw storage, its entries made by insert(): a new[] of Indexed would
  // initialise every entry of the room (Page's defaults) at each growth.
  struct RawDelete {
    void operator()(Indexed* entries) const { ::operator delete(entries); }
  };
  static_assert(std::is_trivially_copyable_v<Indexed> && std::is_trivially_destructible_v<Indexed>);

  // Shifts, not divisions: a walk or lookup takes a few of them, and a 64-bit division costs
  // tens of cycles.
  std::size_t granule_of(std::uintptr_t address) const { return (address - base_) >> shift_; }
  std::uintptr_t address_of(std::size_t granule) const { return base_ + (granule << shift_); }
  std::size_t granules_in(std::size_t bytes) const { return (bytes + granule_ - 1) >> shift_; }
  const Chunk* chunk_of(std::size_t granule) const {
    return chunks_[granule / kChunkGranules].get();
  }
  // The page that starts at `granule` (one must).
  const Page& page_at(std::size_t granule) const {
    return pages_[chunk_of(granule)->position[granule % kChunkGranules]].page;
  }
  // The granules a walk of pages that start in [address, end) looks at: [*from, *to); false
  // when there are none.
  bool walk_bounds(std::uintptr_t address, std::uintptr_t end, std::size_t* from,
                   std::size_t* to) const;
  // The first granule in [from, to) where a page starts, or `to`.
  std::size_t next_start(std::size_t from, std::size_t to) const;
  // The last granule in [from, to) where a page starts, or `to` if none.
  std::size_t last_start(std::size_t from, std::size_t to) const;

  std::uintptr_t base_;
  std::size_t granule_;
  unsigned shift_;  // log2(granule_)
  std::size_t granules_;
  std::vector<std::unique_ptr<Chunk>> chunks_;  // null until a page spans one
  // The pages, in no order: count_ of them in room for capacity_ (an array, not a std::vector,
  // so that insert() has no growth path: it is a leaf function of a few stores).
  std::unique_ptr<Indexed[], RawDelete> pages_;
  std::size_t count_ = 0;
  std::size_t capacity_ = 0;
  std::size_t largest_granules_ = 0;  // the largest page ever indexed, in granules
};

}  // namespace cudacache
