// The device memory cudacache holds: every segment the allocator obtained from the runtime,
// recorded by the allocator's own (wrapped) cudaMalloc and cudaFree.
//
// It answers "is this pointer inside cudacache's memory, and on which device" for a free
// before anything is released: a pointer outside every segment belongs to the real runtime and
// is passed through; one inside a segment must never be (Note [Never pass our memory on]).
#pragma once

namespace cudacache::preload {

// The device whose segment contains `ptr`, or -1.
int segment_device(const void* ptr);

}  // namespace cudacache::preload
