// The device memory cudacache holds: every segment and every reserved address range the
// allocator obtained, recorded by the TrackingSegmentBackend each allocator is built with.
//
// It answers "is this pointer inside cudacache's memory, and on which device" for a free
// before anything is released: a pointer outside every range belongs to the real runtime and
// is passed through; one inside a range must never be (Note [Never pass our memory on]).
#pragma once

#include "segment_backend.h"

#include <memory>

namespace cudacache::preload {

// The device whose segment or address range contains `ptr`, or -1.
int segment_device(const void* ptr);

// Wraps a backend and records the ranges it hands out (cudaMalloc segments and reserved
// virtual ranges) until they are returned.
class TrackingSegmentBackend final : public ForwardingSegmentBackend {
 public:
  using ForwardingSegmentBackend::ForwardingSegmentBackend;
  cudaError_t allocate(std::size_t bytes, std::uintptr_t* base) override;
  cudaError_t release(std::uintptr_t base, std::size_t bytes) override;
  cudaError_t reserve(std::size_t bytes, std::uintptr_t* base) override;
  cudaError_t unreserve(std::uintptr_t base, std::size_t bytes) override;
};

}  // namespace cudacache::preload
