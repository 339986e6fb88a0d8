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
  // first unexpected runtime error; an event whose query fails stays pending (its block is
  // not reused on a guess).
  cudaError_t process_ready(const Completion& done);

  // Waits for every event (each one waited for is done) and calls done(block) as above; an
  // event that cannot be waited for stays pending and its error is returned.
  cudaError_t synchronize_all(const Completion& done);

  std::size_t pending() const { return pending_; }

 private:
  using Queue = std::deque<std::pair<cudaEvent_t, Block*>>;
  // Completes events from the front of each queue: waiting for each (wait), or while a query
  // says done.
  cudaError_t drain(const Completion& done, bool wait);
  // Destroys the front event of `queue`; its block is done when it was the block's last.
  void complete_front(Queue& queue, const Completion& done);

  std::map<cudaStream_t, Queue> queues_;
  std::size_t pending_ = 0;
};

}  // namespace cudacache
