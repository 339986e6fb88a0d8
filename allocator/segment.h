// Blocks and segments, and the backend that obtains and returns segment memory.
//
// A Segment is one device range obtained from a SegmentBackend. Its Blocks tile it exactly, in
// address order, linked through prev/next. A Block is allocated, pending (freed by the caller
// but waiting for stream events), or free (then it sits in its pool's free index).
//
// Note [Segment backends]: the pools only ever ask a backend for a whole new segment and hand
// back a whole free segment. A later VMM backend (expandable segments: cuMemAddressReserve +
// cuMemCreate/cuMemMap pages) adds growth and shrinking of a segment's mapped tail behind this
// same interface; the split/merge code already never assumes that a segment is one
// cudaMalloc, only that a range is contiguous.
#pragma once

#include "size_policy.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
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
  int pending_events = 0;                 // stream events still to complete after free
  std::vector<cudaStream_t> stream_uses;  // extra streams from record_stream
  std::uint64_t gc_count_base = 0;        // pool's free-index search count when it became free
  // Order of the segment's creation (1, 2, ... per device); every block of a segment carries
  // its segment's value, inherited through splits. Ranks equal-size free blocks: see BlockOrder.
  std::uint64_t segment_order = 0;

  bool is_split() const { return prev != nullptr || next != nullptr; }
  void* pointer() const { return reinterpret_cast<void*>(address); }
};

struct Segment {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  cudaStream_t stream = nullptr;
  PoolKind pool = PoolKind::kLarge;
  Block* head = nullptr;  // the block at base
};

// Obtains and returns whole segments. Errors are the runtime's cudaError_t;
// cudaErrorMemoryAllocation means "device full" and is not sticky.
class SegmentBackend {
 public:
  virtual ~SegmentBackend() = default;
  virtual cudaError_t allocate(int device, std::size_t bytes, std::uintptr_t* base) = 0;
  virtual cudaError_t release(int device, std::uintptr_t base, std::size_t bytes) = 0;
  virtual bool expandable() const = 0;
};

// One cudaMalloc per segment, one cudaFree per released segment (PyTorch's default).
class MallocSegmentBackend final : public SegmentBackend {
 public:
  cudaError_t allocate(int device, std::size_t bytes, std::uintptr_t* base) override;
  cudaError_t release(int device, std::uintptr_t base, std::size_t bytes) override;
  bool expandable() const override { return false; }
};

}  // namespace cudacache
