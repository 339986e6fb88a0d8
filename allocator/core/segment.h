// Blocks and segments.
//
// A Segment is one device range obtained from a SegmentBackend (segment_backend.h): a cudaMalloc
// allocation, or the virtual range of an expandable segment (expandable_segment.h). Its Blocks
// tile it exactly, in address order, linked through prev/next. A Block is allocated, pending
// (freed by the caller but waiting for stream events), free (then it sits in its pool's free
// index) or, in an expandable segment only, unmapped (no physical pages behind it; it sits in
// its pool's unmapped index). Mapped and unmapped blocks never merge.
#pragma once

#include "expandable_segment.h"
#include "size_policy.h"
#include "stack_table.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace cudacache {

struct Segment;

struct Block {
  std::uintptr_t address = 0;
  std::size_t size = 0;            // rounded size; the block covers [address, address + size)
  std::size_t requested_size = 0;  // caller's size while allocated or pending
  cudaStream_t stream = nullptr;   // allocation stream: the only stream that reuses the block
  Segment* segment = nullptr;
  Block* prev = nullptr;  // neighbours in the segment
  Block* next = nullptr;
  bool allocated = false;
  bool mapped = true;  // false only for the unmapped stretches of an expandable segment
  // cudacache's policy, while free: whether all of it was last held by long-lived blocks (Note
  // [Lifetime classes] in policy_cudacache.cpp).
  bool long_lived_hole = false;
  int pending_events = 0;                 // stream events still to complete after free
  std::vector<cudaStream_t> stream_uses;  // extra streams from record_stream
  std::uint64_t gc_count_base = 0;        // pool's free-index search count when it became free
  // Order of the segment's creation (1, 2, ... per device); every block of a segment carries
  // its segment's value, inherited through splits. Ranks equal-size free blocks: see BlockOrder.
  std::uint64_t segment_order = 0;
  // While allocated: where (0 unless stacks are captured) and in which step of the growth
  // detector (growth_detector.h) it was allocated.
  StackId stack = 0;
  // cudacache's policy, while allocated: its birth and its request's context
  // (lifetime_predictor.h; context 0 outside the large pool and under other policies). 32 bits
  // each, so that a Block stays within two cache lines.
  std::uint32_t born = 0;
  std::uint64_t step = 0;
  std::uint32_t context = 0;

  bool is_split() const { return prev != nullptr || next != nullptr; }
  void* pointer() const { return reinterpret_cast<void*>(address); }
};

// Free for reuse: not allocated and no stream work pending on it.
inline bool allocatable(const Block* block) {
  return block != nullptr && !block->allocated && block->pending_events == 0 &&
         block->stream_uses.empty();
}

// Whether `size` bytes fit from `block` on through allocatable neighbours, mapped or not.
inline bool has_space(const Block* block, std::size_t size) {
  std::size_t bytes = 0;
  for (; bytes < size && allocatable(block); block = block->next) bytes += block->size;
  return bytes >= size;
}

struct Segment {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  cudaStream_t stream = nullptr;
  PoolKind pool = PoolKind::kLarge;
  Block* head = nullptr;                          // the block at base
  std::unique_ptr<ExpandableSegment> expandable;  // the pages of an expandable segment, else null
};

}  // namespace cudacache
