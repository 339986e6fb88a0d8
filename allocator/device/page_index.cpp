#include "page_index.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <utility>

namespace cudacache {

PageIndex::PageIndex(std::uintptr_t base, std::size_t size, std::size_t granule)
    : base_(base),
      granule_(granule),
      shift_(static_cast<unsigned>(std::countr_zero(granule))),
      granules_(std::has_single_bit(granule) ? granules_in(size) : 0) {
  if (!std::has_single_bit(granule)) {
    throw std::invalid_argument("PageIndex: a granule that is not a power of two");
  }
  if (granules_ > std::numeric_limits<std::uint32_t>::max()) {
    throw std::invalid_argument("PageIndex: a range of more than 2^32 granules");
  }
  chunks_.resize((granules_ + kChunkGranules - 1) / kChunkGranules);
}

void PageIndex::reserve(std::uintptr_t address, std::size_t bytes, std::size_t pages) {
  if (bytes == 0) return;
  const std::size_t first = granule_of(address) / kChunkGranules;
  const std::size_t last = granule_of(address + bytes - 1) / kChunkGranules;
  for (std::size_t chunk = first; chunk <= last; ++chunk) {
    // Default-initialised: the slots stay raw until a page is put in one.
    if (chunks_[chunk] == nullptr) chunks_[chunk].reset(new Chunk);
  }
  // Doubling, not exactly what is asked: growths map a few pages at a time.
  const std::size_t needed = count_ + pages;
  if (needed <= capacity_) return;
  const std::size_t capacity = std::max({needed, 2 * capacity_, kFirstCapacity});
  std::unique_ptr<Indexed[], RawDelete> grown(
      static_cast<Indexed*>(::operator new(capacity * sizeof(Indexed))));
  // Trivially copyable (page_index.h): a copy of the bytes makes the entries.
  if (count_ > 0) std::memcpy(grown.get(), pages_.get(), count_ * sizeof(Indexed));
  pages_ = std::move(grown);
  capacity_ = capacity;
}

void PageIndex::insert(std::uintptr_t address, const Page& page) noexcept {
  const std::size_t granule = granule_of(address);
  Chunk& chunk = *chunks_[granule / kChunkGranules];
  const std::size_t slot = granule % kChunkGranules;
  chunk.position[slot] = static_cast<std::uint32_t>(count_);
  new (pages_.get() + count_) Indexed{page, granule};  // in the room reserve() made
  ++count_;
  chunk.starts[slot / kWordBits] |= std::uint64_t{1} << (slot % kWordBits);
  largest_granules_ = std::max(largest_granules_, granules_in(page.size));
}

void PageIndex::erase(std::uintptr_t address) noexcept {
  const std::size_t granule = granule_of(address);
  Chunk& chunk = *chunks_[granule / kChunkGranules];
  const std::size_t slot = granule % kChunkGranules;
  chunk.starts[slot / kWordBits] &= ~(std::uint64_t{1} << (slot % kWordBits));
  // The last page fills the hole, so that the array holds the pages and nothing else.
  const std::uint32_t hole = chunk.position[slot];
  --count_;
  if (hole != count_) {
    const Indexed& last = pages_[count_];
    chunks_[last.granule / kChunkGranules]->position[last.granule % kChunkGranules] = hole;
    pages_[hole] = last;
  }
}

Page* PageIndex::find(std::uintptr_t address) {
  if (address < base_ || ((address - base_) & (granule_ - 1)) != 0) return nullptr;
  const std::size_t granule = granule_of(address);
  if (granule >= granules_) return nullptr;
  Chunk* chunk = chunks_[granule / kChunkGranules].get();
  const std::size_t slot = granule % kChunkGranules;
  return chunk != nullptr && chunk->starts_at(slot) ? &pages_[chunk->position[slot]].page : nullptr;
}

std::optional<PageIndex::Entry> PageIndex::across(std::uintptr_t point) const {
  if (point <= base_) return std::nullopt;
  // The last page that starts before `point`: at the granule of point - 1 or before, no further
  // back than the largest page (one that starts further back ends before `point`).
  const std::size_t last = granule_of(point - 1);
  if (last >= granules_) return std::nullopt;
  const std::size_t from = last + 1 - std::min(last + 1, largest_granules_);
  const std::size_t found = last_start(from, last + 1);
  if (found > last) return std::nullopt;
  const Page& page = page_at(found);
  const std::uintptr_t address = address_of(found);
  if (address + page.size <= point) return std::nullopt;
  return Entry{address, page};
}

bool PageIndex::walk_bounds(std::uintptr_t address, std::uintptr_t end, std::size_t* from,
                            std::size_t* to) const {
  if (end <= base_ || address >= end) return false;
  *from = address <= base_ ? 0 : granules_in(address - base_);  // at or after
  *to = std::min(granules_, granules_in(end - base_));
  return *from < *to;
}

std::optional<PageIndex::Entry> PageIndex::first_from(std::uintptr_t address,
                                                      std::uintptr_t end) const {
  std::size_t from = 0;
  std::size_t to = 0;
  if (!walk_bounds(address, end, &from, &to)) return std::nullopt;
  const std::size_t found = next_start(from, to);
  if (found >= to) return std::nullopt;
  return Entry{address_of(found), page_at(found)};
}

std::size_t PageIndex::next_start(std::size_t from, std::size_t to) const {
  std::size_t granule = from;
  while (granule < to) {
    const Chunk* chunk = chunk_of(granule);
    if (chunk == nullptr) {  // no page here: on to the next chunk
      granule = (granule / kChunkGranules + 1) * kChunkGranules;
      continue;
    }
    const std::size_t slot = granule % kChunkGranules;
    // This word's bits from `granule` on.
    const std::uint64_t word = chunk->starts[slot / kWordBits] >> (slot % kWordBits);
    if (word != 0) return std::min(to, granule + static_cast<std::size_t>(std::countr_zero(word)));
    granule += kWordBits - slot % kWordBits;  // on to the next word
  }
  return to;
}

std::size_t PageIndex::last_start(std::size_t from, std::size_t to) const {
  std::size_t end = to;  // looking in [from, end)
  while (end > from) {
    const std::size_t granule = end - 1;
    const Chunk* chunk = chunk_of(granule);
    if (chunk == nullptr) {  // no page here: back to the chunk before
      end = granule / kChunkGranules * kChunkGranules;
      continue;
    }
    const std::size_t slot = granule % kChunkGranules;
    // This word's bits up to `granule`, then the highest.
    const std::size_t shift = kWordBits - 1 - slot % kWordBits;
    const std::uint64_t word = chunk->starts[slot / kWordBits] << shift;
    if (word != 0) {
      const std::size_t found = granule - static_cast<std::size_t>(std::countl_zero(word));
      return found >= from ? found : to;
    }
    end = granule - slot % kWordBits;  // back to the word before
  }
  return to;
}

}  // namespace cudacache
