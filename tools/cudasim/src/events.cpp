// Events. Recording enqueues a marker on the stream; the event completes (and takes its
// timestamp) when the stream's work reaches the marker.
#include "api.h"

namespace cudasim {

namespace {

constexpr uintptr_t kEventTag = uintptr_t{0xE7E7} << 48;
constexpr uintptr_t kTagMask = uintptr_t{0xffff} << 48;
constexpr unsigned kEventFlags =
    cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;

cudaEvent_t event_handle(EventId id) {
  return reinterpret_cast<cudaEvent_t>(kEventTag | (id << 4));
}

Event* find_event(State& s, cudaEvent_t handle) {
  const auto value = reinterpret_cast<uintptr_t>(handle);
  if ((value & kTagMask) != kEventTag || (value & 0xf) != 0) return nullptr;
  const auto it = s.events.find((value & ~kTagMask) >> 4);
  return it == s.events.end() ? nullptr : &it->second;
}

bool event_done(const State& s, const Event& e) { return !e.recorded || ticket_done(s, e.ticket); }

}  // namespace

cudaError_t event_record(cudaEvent_t event, cudaStream_t stream, unsigned int flags,
                         DefaultStream mode) {
  if ((flags & ~static_cast<unsigned>(cudaEventRecordExternal)) != 0) {
    return finish(cudaErrorInvalidValue);
  }
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  Event* e = find_event(s, event);
  StreamId id = 0;
  if (count_call(s, e == nullptr ? -1 : e->device, &cudasim_call_counts::event_record)) {
    return finish(injected_error(&cudasim_call_counts::event_record));
  }
  if (e == nullptr) return finish(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = resolve_stream(s, stream, mode, &id); error != cudaSuccess) {
    return finish(error);
  }
  if (s.streams.at(id).device != e->device) return finish(cudaErrorInvalidResourceHandle);
  const uint64_t generation = ++s.generation;
  e->recorded = true;
  e->generation = generation;
  e->completed_at.reset();
  // The marker finds the event again by handle: it may be destroyed or re-recorded first.
  e->ticket = enqueue(s, id, {}, [&s, event, generation] {
    Event* marked = find_event(s, event);
    if (marked != nullptr && marked->generation == generation) marked->completed_at = Clock::now();
  });
  return cudaSuccess;
}

cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned int flags,
                              DefaultStream mode) {
  if ((flags & ~static_cast<unsigned>(cudaEventWaitExternal)) != 0) {
    return finish(cudaErrorInvalidValue);
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  StreamId id = 0;
  if (const cudaError_t error = resolve_stream(s, stream, mode, &id); error != cudaSuccess) {
    return finish(error);
  }
  const Event* e = find_event(s, event);
  if (e == nullptr) return finish(cudaErrorInvalidResourceHandle);
  // Waiting on a never-recorded or completed event is a no-op, as in CUDA.
  if (!event_done(s, *e)) enqueue(s, id, {e->ticket}, nullptr);
  return cudaSuccess;
}

void reset_device_events(State& s, int device) {
  std::erase_if(s.events, [device](const auto& entry) { return entry.second.device == device; });
}

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr || (flags & ~kEventFlags) != 0) return finish(cudaErrorInvalidValue);
  // Interprocess events must not record timing.
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0) {
    return finish(cudaErrorInvalidValue);
  }
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count_call(s, current_device(), &cudasim_call_counts::event_create)) {
    return finish(injected_error(&cudasim_call_counts::event_create));
  }
  const EventId id = s.next_event++;
  Event& e = s.events[id];
  e.device = current_device();
  e.flags = flags;
  *event = event_handle(id);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto value = reinterpret_cast<uintptr_t>(event);
  if (find_event(s, event) == nullptr) return finish(cudaErrorInvalidResourceHandle);
  s.events.erase((value & ~kTagMask) >> 4);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return event_record(event, stream, 0, DefaultStream::Legacy);
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  return event_record(event, stream, flags, DefaultStream::Legacy);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return stream_wait_event(stream, event, flags, DefaultStream::Legacy);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  const Event* e = find_event(s, event);
  if (count_call(s, e == nullptr ? -1 : e->device, &cudasim_call_counts::event_query)) {
    return finish(injected_error(&cudasim_call_counts::event_query));
  }
  if (e == nullptr) return finish(cudaErrorInvalidResourceHandle);
  return event_done(s, *e) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  const CallClock clock;
  State& s = state();
  std::unique_lock lock(s.mutex);
  const Event* e = find_event(s, event);
  if (count_call(s, e == nullptr ? -1 : e->device, &cudasim_call_counts::synchronize)) {
    return finish(injected_error(&cudasim_call_counts::synchronize));
  }
  if (e == nullptr) return finish(cudaErrorInvalidResourceHandle);
  if (!e->recorded) return cudaSuccess;
  wait_for(lock, s, e->ticket);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return finish(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  const Event* a = find_event(s, start);
  const Event* b = find_event(s, end);
  if (a == nullptr || b == nullptr || !a->recorded || !b->recorded ||
      ((a->flags | b->flags) & cudaEventDisableTiming) != 0) {
    return finish(cudaErrorInvalidResourceHandle);
  }
  if (!a->completed_at || !b->completed_at) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(*b->completed_at - *a->completed_at).count();
  return cudaSuccess;
}

}  // extern "C"
