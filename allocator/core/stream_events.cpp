#include "stream_events.h"

#include "device_api.h"
#include "log.h"

#include <iterator>
#include <vector>

namespace cudacache {

cudaError_t StreamEvents::record(int device, Block* block) {
  std::vector<std::pair<cudaStream_t, cudaEvent_t>> recorded;
  recorded.reserve(block->stream_uses.size());  // before any event exists: a throw loses none
  for (cudaStream_t stream : block->stream_uses) {
    cudaEvent_t event = nullptr;
    cudaError_t error = device_api::create_event(device, &event);
    if (error == cudaSuccess) {
      error = device_api::record_event(device, event, stream);
      if (error != cudaSuccess) device_api::destroy_event(event);
    }
    if (error != cudaSuccess) {
      for (auto& [unused, done] : recorded) device_api::destroy_event(done);
      return error;
    }
    recorded.emplace_back(stream, event);
  }
  // Into the queues, all or none: a queue that cannot grow throws std::bad_alloc, and what was
  // queued comes back out (Note [Host memory runs out] in device_allocator.h).
  std::size_t queued = 0;
  try {
    for (auto& [stream, event] : recorded) {
      queues_[stream].emplace_back(event, block);
      ++queued;
    }
  } catch (...) {
    while (queued > 0) queues_[recorded[--queued].first].pop_back();
    for (auto& [unused, event] : recorded) device_api::destroy_event(event);
    throw;
  }
  block->pending_events += static_cast<int>(recorded.size());
  pending_ += recorded.size();
  block->stream_uses.clear();
  return cudaSuccess;
}

cudaError_t StreamEvents::process_ready(const Completion& done) {
  return drain(done, /*wait=*/false);
}

cudaError_t StreamEvents::synchronize_all(const Completion& done) {
  return drain(done, /*wait=*/true);
}

cudaError_t StreamEvents::drain(const Completion& done, bool wait) {
  cudaError_t first_error = cudaSuccess;
  for (auto it = queues_.begin(); it != queues_.end();) {
    auto& queue = it->second;
    while (!queue.empty()) {
      // Waited for, an event is done whatever a query would say. A failed query says nothing
      // about the stream's work: the block stays pending (asked again at the next allocation,
      // waited for by synchronize_all); freeing it let another stream reuse memory still in
      // use (found by the fault sweep).
      const cudaEvent_t event = queue.front().first;
      const cudaError_t status =
          wait ? device_api::synchronize_event(event) : device_api::query_event(event);
      if (status == cudaErrorNotReady && !wait) break;
      if (status != cudaSuccess) {
        logger().error("{} failed: {}", wait ? "cudaEventSynchronize" : "cudaEventQuery",
                       device_api::error_string(status));
        if (first_error == cudaSuccess) first_error = status;
        break;
      }
      complete_front(queue, done);
    }
    it = queue.empty() ? queues_.erase(it) : std::next(it);
  }
  return first_error;
}

void StreamEvents::complete_front(Queue& queue, const Completion& done) {
  const auto [event, block] = queue.front();
  device_api::destroy_event(event);
  queue.pop_front();
  --pending_;
  if (--block->pending_events == 0) done(block);
}

}  // namespace cudacache
