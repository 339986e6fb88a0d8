#include "page_index.h"

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace cudacache {

PageIndex::PageIndex(std::uintptr_t base, std::size_t size, std::size_t granule)
    : base_(base),
      granule_(granule),
      shift_(static_cast<unsigned>(std::countr_zero(granule))),
      granules_(std::has_single_bit(granule) ? granules_in(size) : 0) {
  if (!std::has_single_bit(granule)) {
    throw std::invalid_argument("PageIndex: a granule that is not a power of two");
  }
  chunks_.resize((granules_ + kChunkGranules - 1) / kChunkGranules);
}

void PageIndex::reserve(std::uintptr_t address, std::size_t bytes) {
  if (bytes == 0) return;
  const std::size_t first = granule_of(address) / kChunkGranules;
  const std::size_t last = granule_of(address + bytes - 1) / kChunkGranules;
  for (std::size_t chunk = first; chunk <= last; ++chunk) {
    // Default-initialised: the slots stay raw until a page is put in one.
    if (chunks_[chunk] == nullptr) chunks_[chunk].reset(new Chunk);
  }
}

void PageIndex::insert(std::uintptr_t address, const Page& page) noexcept {
  const std::size_t granule = granule_of(address);
  Chunk& chunk = *chunks_[granule / kChunkGranules];
  const std::size_t slot = granule % kChunkGranules;
  new (chunk.slots + slot * sizeof(Page)) Page(page);
  chunk.starts[slot / kWordBits] |= std::uint64_t{1} << (slot % kWordBits);
  largest_granules_ = std::max(largest_granules_, granules_in(page.size));
  ++pages_;
}

void PageIndex::erase(std::uintptr_t address) noexcept {
  const std::size_t granule = granule_of(address);
  Chunk& chunk = *chunks_[granule / kChunkGranules];
  const std::size_t slot = granule % kChunkGranules;
  chunk.starts[slot / kWordBits] &= ~(std::uint64_t{1} << (slot % kWordBits));
  --pages_;
}

Page* PageIndex::find(std::uintptr_t address) {
  if (address < base_ || ((address - base_) & (granule_ - 1)) != 0) return nullptr;
  const std::size_t granule = granule_of(address);
  if (granule >= granules_) return nullptr;
  Chunk* chunk = chunks_[granule / kChunkGranules].get();
  const std::size_t slot = granule % kChunkGranules;
  return chunk != nullptr && chunk->starts_at(slot) ? &chunk->page(slot) : nullptr;
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
  const Page& page = chunk_of(found)->page(found % kChunkGranules);
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
  return Entry{address_of(found), chunk_of(found)->page(found % kChunkGranules)};
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
