// Events that keep freed blocks out of reuse until work on other streams is done.
//
// When a block used on extra streams (record_stream) is freed, one event is recorded on each
// extra stream. The block becomes reusable when all of them have completed. Events complete in
// order per stream, so each stream's queue is polled from its front.
#pragma once

#include "segment.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <utility>

namespace cudacache {

class StreamEvents {
 public:
  using Completion = std::function<void(Block*)>;

  // Records an event on each of block->stream_uses, clears them and counts the events in
  // block->pending_events. On failure nothing stays recorded and the error is returned.
  cudaError_t record(int device, Block* block);

  // Calls done(block) for each block whose last event completed. Never blocks. Returns the
  // first unexpected runtime error (events that fail are treated as completed).
  cudaError_t process_ready(const Completion& done);

  // Waits for every event, then behaves like process_ready.
  cudaError_t synchronize_all(const Completion& done);

  std::size_t pending() const { return pending_; }

 private:
  std::map<cudaStream_t, std::deque<std::pair<cudaEvent_t, Block*>>> queues_;
  std::size_t pending_ = 0;
};

}  // namespace cudacache
