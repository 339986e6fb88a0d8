// Whether a request will be long-lived, predicted from where it comes in the program's sequence
// of requests: cudacache's policy keeps long-lived blocks out of the memory that short-lived
// ones churn through (Note [Lifetime classes] in policy_cudacache.cpp).
//
// A request's context is its size, its stream and the sizes of the two requests before it. A
// program that repeats (a training or inference loop) makes the same requests in the same order
// each iteration, so the context stands in for the call site that the allocator cannot see: in
// one real inference loop, blocks of one size (1,242 MiB) live either 1 to 3 allocations or a
// whole iteration, and only the sizes before them tell which. What a context's last block lived
// is its prediction; a context not seen yet has none. A lifetime counts allocations: those from
// the block's own to its free, itself included.
#pragma once

#include <cuda_runtime_api.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cudacache {

enum class Lifetime : std::uint8_t {
  kUnknown,  // no block of the request's context was freed yet
  kShort,
  kLong,  // its context's last block lived kLongLivedAllocations allocations or more
};

class LifetimePredictor {
 public:
  // A block is long-lived when it lived at least this many allocations: the workspaces and
  // temporaries of one step of a layer live a few, what a layer keeps for later (activations,
  // caches, outputs) lives longer. Measured on the real traces: 8 did about as well (a little
  // worse on `cs336_medium` and `gcn`), 32 misses the blocks one inference loop keeps for an
  // iteration (18 allocations), and 4 counts temporaries of `qwen7b` as long-lived.
  static constexpr std::uint32_t kLongLivedAllocations = 16;

  // The context of a request of `size` bytes on `stream` that comes now (never 0): the parts
  // rotated apart, then one multiply whose high half is the context. Inline, as all of this
  // class: it is on every large-pool allocation's path.
  std::uint32_t context(std::size_t size, cudaStream_t stream) const {
    const std::uint64_t parts = size ^ std::rotl(std::uint64_t{previous_sizes_[0]}, 21) ^
                                std::rotl(std::uint64_t{previous_sizes_[1]}, 42) ^
                                reinterpret_cast<std::uintptr_t>(stream);
    return static_cast<std::uint32_t>((parts * 0x9e3779b97f4a7c15ULL) >> 32) | 1;  // 0: none
  }
  Lifetime predict(std::uint32_t context) const {
    const Slot& slot = slots_[slot_of(context)];
    if (slot.context != context) return Lifetime::kUnknown;
    return slot.lifetime >= kLongLivedAllocations ? Lifetime::kLong : Lifetime::kShort;
  }
  // Counts an allocation of `size` bytes; returns its birth (the allocations before it, modulo
  // 2^32: a lifetime is their difference, exact below 2^32 allocations).
  std::uint32_t allocated(std::size_t size) {
    previous_sizes_[1] = previous_sizes_[0];
    previous_sizes_[0] = size;
    return allocations_++;
  }
  // Learns what a block of `context` born at `born` lived; true when it was long-lived.
  bool freed(std::uint32_t context, std::uint32_t born) {
    const std::uint32_t lifetime = allocations_ - born;  // modulo 2^32
    slots_[slot_of(context)] = {context, lifetime};
    return lifetime >= kLongLivedAllocations;
  }

 private:
  // A direct-mapped table: a collision replaces the older context (a prediction is a hint), and
  // a lookup costs one probe and no host allocation. On the heap, so that the allocator's own
  // members stay close together.
  static constexpr std::size_t kSlots = 4096;
  struct Slot {
    std::uint32_t context = 0;
    std::uint32_t lifetime = 0;
  };
  static std::size_t slot_of(std::uint32_t context) { return (context >> 1) % kSlots; }

  std::vector<Slot> slots_ = std::vector<Slot>(kSlots);
  std::uint32_t allocations_ = 0;
  std::size_t previous_sizes_[2] = {0, 0};
};

}  // namespace cudacache
