// Streams. Work "runs" the moment it is enqueued unless something holds it back: the stream is
// held (cudasim_hold_stream), earlier work on it is still queued, or it waits for another
// stream's work (cudaStreamWaitEvent, or the legacy default stream's implicit synchronization
// with blocking streams). Held-back work runs, in order, as soon as nothing holds it back.
#include <algorithm>

#include "api.h"

namespace cudasim {

namespace {

// Created-stream handles are tagged ids, never pointers, so a destroyed handle stays invalid
// forever instead of aliasing a newer stream at the same address.
constexpr uintptr_t kStreamTag = uintptr_t{0x5151} << 48;
constexpr uintptr_t kTagMask = uintptr_t{0xffff} << 48;
constexpr int kGreatestPriority = -5;
constexpr int kLeastPriority = 0;

StreamId per_thread_stream(State& s, int device) {
  thread_local std::vector<StreamId> ids;
  const auto index = static_cast<size_t>(device);
  if (ids.size() <= index) ids.resize(index + 1, 0);
  // A cudaDeviceReset destroys it; make a fresh one then.
  if (ids[index] == 0 || s.streams.find(ids[index]) == s.streams.end()) {
    ids[index] = create_stream(s, device, StreamKind::PerThread, cudaStreamDefault, 0);
  }
  return ids[index];
}

bool blocking(const Stream& st) { return (st.flags & cudaStreamNonBlocking) == 0; }

bool all_done(const State& s, const std::vector<Ticket>& waits) {
  return std::all_of(waits.begin(), waits.end(), [&](Ticket t) { return ticket_done(s, t); });
}

}  // namespace

cudaStream_t stream_handle(StreamId id) {
  return reinterpret_cast<cudaStream_t>(kStreamTag | (id << 4));
}

StreamId stream_from_handle(cudaStream_t handle) {
  const auto value = reinterpret_cast<uintptr_t>(handle);
  if ((value & kTagMask) != kStreamTag || (value & 0xf) != 0) return 0;
  return (value & ~kTagMask) >> 4;
}

StreamId create_stream(State& s, int device, StreamKind kind, unsigned flags, int priority) {
  const StreamId id = s.next_stream++;
  Stream& st = s.streams[id];
  st.device = device;
  st.kind = kind;
  st.flags = flags;
  st.priority = priority;
  return id;
}

cudaError_t resolve_stream(State& s, cudaStream_t handle, DefaultStream mode, StreamId* out) {
  const int device = current_device();
  if (handle == cudaStreamLegacy || (handle == nullptr && mode == DefaultStream::Legacy)) {
    *out = s.devices[static_cast<size_t>(device)].legacy_stream;
    return cudaSuccess;
  }
  if (handle == cudaStreamPerThread || handle == nullptr) {
    *out = per_thread_stream(s, device);
    return cudaSuccess;
  }
  const StreamId id = stream_from_handle(handle);
  const auto it = s.streams.find(id);
  if (id == 0 || it == s.streams.end() || it->second.destroyed) {
    return cudaErrorInvalidResourceHandle;
  }
  *out = id;
  return cudaSuccess;
}

bool ticket_done(const State& s, Ticket t) {
  const auto it = s.streams.find(t.stream);
  return it == s.streams.end() || it->second.completed >= t.seq;
}

Ticket enqueue(State& s, StreamId id, std::vector<Ticket> waits, std::function<void()> action) {
  Stream& st = s.streams.at(id);
  // The legacy default stream waits for all blocking streams of its device, and they wait
  // for it.
  if (st.kind == StreamKind::Legacy) {
    for (const auto& [other_id, other] : s.streams) {
      if (other_id != id && other.device == st.device && blocking(other) &&
          other.completed < other.enqueued) {
        waits.push_back({other_id, other.enqueued});
      }
    }
  } else if (blocking(st)) {
    const StreamId legacy = s.devices[static_cast<size_t>(st.device)].legacy_stream;
    const Stream& l = s.streams.at(legacy);
    if (l.completed < l.enqueued) waits.push_back({legacy, l.enqueued});
  }
  std::erase_if(waits, [&](Ticket t) { return ticket_done(s, t); });
  const uint64_t seq = ++st.enqueued;
  if (!st.held && st.queue.empty() && waits.empty()) {
    if (action) action();
    st.completed = seq;
  } else {
    st.queue.push_back(Op{seq, std::move(waits), std::move(action)});
    ++s.pending_ops;
  }
  return {id, seq};
}

void make_progress(State& s) {
  bool any = false;
  for (bool changed = true; changed && s.pending_ops > 0;) {
    changed = false;
    for (auto it = s.streams.begin(); it != s.streams.end();) {
      Stream& st = it->second;
      while (!st.held && !st.queue.empty() && all_done(s, st.queue.front().waits)) {
        Op op = std::move(st.queue.front());
        st.queue.pop_front();
        --s.pending_ops;
        if (op.action) op.action();
        st.completed = op.seq;
        changed = any = true;
      }
      if (st.destroyed && st.queue.empty()) {
        it = s.streams.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (any) s.progress.notify_all();
}

void wait_for(std::unique_lock<std::mutex>& lock, State& s, Ticket t) {
  s.progress.wait(lock, [&] { return ticket_done(s, t); });
}

void reset_device_streams(State& s, int device) {
  for (auto it = s.streams.begin(); it != s.streams.end();) {
    Stream& st = it->second;
    if (st.device != device) {
      ++it;
      continue;
    }
    s.pending_ops -= st.queue.size();
    if (st.kind == StreamKind::Legacy) {
      st.queue.clear();
      st.held = false;
      st.completed = st.enqueued;
      ++it;
    } else {
      it = s.streams.erase(it);
    }
  }
  // Other devices' streams may have been waiting for the work just dropped.
  make_progress(s);
  s.progress.notify_all();
}

cudaError_t stream_query(cudaStream_t stream, DefaultStream mode) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  StreamId id = 0;
  if (const cudaError_t e = resolve_stream(s, stream, mode, &id); e != cudaSuccess) {
    return finish(e);
  }
  // Not ready is a status, not an error: it does not become the last error.
  return s.streams.at(id).queue.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t stream_synchronize(cudaStream_t stream, DefaultStream mode) {
  const CallClock clock;
  State& s = state();
  std::unique_lock lock(s.mutex);
  StreamId id = 0;
  const cudaError_t e = resolve_stream(s, stream, mode, &id);
  if (count_call(s, e == cudaSuccess ? s.streams.at(id).device : -1,
                 &cudasim_call_counts::synchronize)) {
    return finish(injected_error(&cudasim_call_counts::synchronize));
  }
  if (e != cudaSuccess) return finish(e);
  wait_for(lock, s, Ticket{id, s.streams.at(id).enqueued});
  return cudaSuccess;
}

namespace {

template <typename Read>
cudaError_t read_stream(cudaStream_t stream, DefaultStream mode, bool out_null, Read read) {
  if (out_null) return finish(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  StreamId id = 0;
  if (const cudaError_t e = resolve_stream(s, stream, mode, &id); e != cudaSuccess) {
    return finish(e);
  }
  read(s.streams.at(id));
  return cudaSuccess;
}

}  // namespace

cudaError_t stream_get_flags(cudaStream_t stream, unsigned int* flags, DefaultStream mode) {
  return read_stream(stream, mode, flags == nullptr, [&](const Stream& st) { *flags = st.flags; });
}

cudaError_t stream_get_priority(cudaStream_t stream, int* priority, DefaultStream mode) {
  return read_stream(stream, mode, priority == nullptr,
                     [&](const Stream& st) { *priority = st.priority; });
}

cudaError_t stream_get_device(cudaStream_t stream, int* device, DefaultStream mode) {
  return read_stream(stream, mode, device == nullptr,
                     [&](const Stream& st) { *device = st.device; });
}

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  if (stream == nullptr || (flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) {
    return finish(cudaErrorInvalidValue);
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  // CUDA clamps out-of-range priorities instead of failing.
  const int clamped = std::clamp(priority, kGreatestPriority, kLeastPriority);
  *stream = stream_handle(create_stream(s, current_device(), StreamKind::User, flags, clamped));
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return cudaStreamCreateWithPriority(stream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithPriority(stream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto it = s.streams.find(stream_from_handle(stream));
  if (it == s.streams.end() || it->second.destroyed || it->second.kind != StreamKind::User) {
    return finish(cudaErrorInvalidResourceHandle);
  }
  // Like CUDA, destroying a stream with queued work returns at once; the work still runs.
  if (it->second.queue.empty()) {
    s.streams.erase(it);
  } else {
    it->second.destroyed = true;
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority != nullptr) *leastPriority = kLeastPriority;
  if (greatestPriority != nullptr) *greatestPriority = kGreatestPriority;
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return stream_query(stream, DefaultStream::Legacy);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return stream_synchronize(stream, DefaultStream::Legacy);
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  return stream_get_flags(stream, flags, DefaultStream::Legacy);
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  return stream_get_priority(stream, priority, DefaultStream::Legacy);
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  return stream_get_device(stream, device, DefaultStream::Legacy);
}

}  // extern "C"
