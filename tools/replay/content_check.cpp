#include "content_check.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <iterator>

namespace cudacache::replay {
namespace {

constexpr std::uint64_t kWord = 8;
constexpr std::uint64_t kGranule = std::uint64_t{2} << 20;

std::string hex(std::uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string describe_block(std::size_t slot, std::uintptr_t address, std::uint64_t size) {
  return "block " + std::to_string(slot) + " (" + std::to_string(size) + " bytes at " +
         hex(address) + ")";
}

}  // namespace

ContentCheck::ContentCheck(std::size_t slots) : slots_(slots) {}

std::vector<std::uint64_t> ContentCheck::stamp_offsets(std::uintptr_t address, std::uint64_t size) {
  // Stamps never overlap (a later one would overwrite an earlier one's bytes): each starts at or
  // after the end of the one before it, the last one ending with the block.
  std::vector<std::uint64_t> offsets{0};
  std::uint64_t stamped = std::min(kWord, size);  // the end of the last stamp
  // The first byte of every granule after the block's first, where a whole word fits.
  const std::uint64_t first_granule = (address / kGranule + 1) * kGranule;
  for (std::uint64_t at = first_granule; at + kWord <= address + size; at += kGranule) {
    if (at - address < stamped) continue;  // inside the first word
    offsets.push_back(at - address);
    stamped = at - address + kWord;
  }
  const std::uint64_t last = std::max(size >= kWord ? size - kWord : 0, stamped);
  if (last < size) offsets.push_back(last);
  return offsets;
}

std::uint64_t ContentCheck::word(std::size_t slot, std::uint64_t offset) {
  // splitmix64 of the two: neighbouring slots and offsets give unrelated words.
  std::uint64_t x = (static_cast<std::uint64_t>(slot) << 32) ^ offset ^ 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void ContentCheck::stamp(std::size_t event, std::size_t slot, void* ptr, std::uint64_t size) {
  if (slot >= slots_.size()) {
    throw ContentError("event " + std::to_string(event) + ": slot " + std::to_string(slot) +
                       " is outside the trace's " + std::to_string(slots_.size()) + " slots");
  }
  if (size == 0) return;  // no byte to own or check
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  // Named only in an error: a checked replay stamps every block it allocates.
  const auto block = [&] { return describe_block(slot, address, size); };
  if (ptr == nullptr) {
    throw ContentError("event " + std::to_string(event) + ": the allocator returned null for " +
                       block());
  }
  // The live block that starts at or before the new one, and the one after it.
  auto after = by_address_.upper_bound(address);
  if (after != by_address_.begin()) {
    const Live& before = slots_[std::prev(after)->second];
    if (before.address + before.size > address) {
      throw ContentError("event " + std::to_string(event) + ": " + block() + " overlaps the live " +
                         describe_block(std::prev(after)->second, before.address, before.size) +
                         " (allocated at event " + std::to_string(before.event) + ")");
    }
  }
  if (after != by_address_.end() && after->first < address + size) {
    const Live& next = slots_[after->second];
    throw ContentError("event " + std::to_string(event) + ": " + block() + " overlaps the live " +
                       describe_block(after->second, next.address, next.size) +
                       " (allocated at event " + std::to_string(next.event) + ")");
  }
  for (const std::uint64_t offset : stamp_offsets(address, size)) {
    const std::uint64_t value = word(slot, offset);
    const std::size_t bytes = static_cast<std::size_t>(std::min(kWord, size - offset));
    const cudaError_t error =
        cudaMemcpy(static_cast<char*>(ptr) + offset, &value, bytes, cudaMemcpyHostToDevice);
    if (error != cudaSuccess) {
      throw ContentError("event " + std::to_string(event) + ": writing byte offset " +
                         std::to_string(offset) + " of " + block() +
                         " failed: " + cudaGetErrorString(error));
    }
  }
  slots_[slot] = Live{address, size, event, true};
  by_address_.emplace(address, slot);
}

void ContentCheck::verify(std::size_t event, std::size_t slot, const char* when) {
  const Live& block = slots_[slot];
  const auto name = [&] { return describe_block(slot, block.address, block.size); };
  for (const std::uint64_t offset : stamp_offsets(block.address, block.size)) {
    const std::uint64_t expected = word(slot, offset);
    std::uint64_t found = 0;
    const std::size_t bytes = static_cast<std::size_t>(std::min(kWord, block.size - offset));
    const cudaError_t error =
        cudaMemcpy(&found, reinterpret_cast<const void*>(block.address + offset), bytes,
                   cudaMemcpyDeviceToHost);
    if (error != cudaSuccess) {
      throw ContentError("event " + std::to_string(event) + " (" + when +
                         "): reading byte offset " + std::to_string(offset) + " of " + name() +
                         ", allocated at event " + std::to_string(block.event) +
                         ", failed: " + cudaGetErrorString(error));
    }
    std::uint64_t wanted = 0;
    std::copy_n(reinterpret_cast<const unsigned char*>(&expected), bytes,
                reinterpret_cast<unsigned char*>(&wanted));
    if (found != wanted) {
      throw ContentError("event " + std::to_string(event) + " (" + when + "): byte offset " +
                         std::to_string(offset) + " of " + name() + ", allocated at event " +
                         std::to_string(block.event) + ", holds " + hex(found) + " where " +
                         hex(wanted) + " was written");
    }
    ++intact_stamps_;
  }
}

void ContentCheck::verify_and_forget(std::size_t event, std::size_t slot) {
  if (slot >= slots_.size() || !slots_[slot].live) return;  // never stamped (0 bytes)
  verify(event, slot, "free");
  by_address_.erase(slots_[slot].address);
  slots_[slot].live = false;
}

void ContentCheck::verify_live(std::size_t event, const char* when) {
  for (const auto& [address, slot] : by_address_) verify(event, slot, when);
}

}  // namespace cudacache::replay
