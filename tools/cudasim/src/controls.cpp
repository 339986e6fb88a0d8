// The test controls declared in cudasim.h.
#include "api.h"

namespace cudasim {

namespace {

Device* find_device(State& s, int device) {
  return valid_device(s, device) ? &s.devices[static_cast<size_t>(device)] : nullptr;
}

// Like resolve_stream, but a destroyed stream with queued work can still be held or released.
Stream* find_stream(State& s, cudaStream_t handle) {
  StreamId id = stream_from_handle(handle);
  if (id == 0 && resolve_stream(s, handle, DefaultStream::Legacy, &id) != cudaSuccess) {
    return nullptr;
  }
  const auto it = s.streams.find(id);
  return it == s.streams.end() ? nullptr : &it->second;
}

}  // namespace

}  // namespace cudasim

using namespace cudasim;

extern "C" {

int cudasim_get_counters(int device, cudasim_counters* out) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const Device* d = find_device(s, device);
  if (d == nullptr || out == nullptr) return -1;
  *out = d->counters;
  return 0;
}

int cudasim_reset_counters(int device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Device* d = find_device(s, device);
  if (d == nullptr) return -1;
  d->counters = cudasim_counters{0, 0, 0, 0, d->counters.in_use_bytes, d->counters.in_use_bytes};
  d->calls = cudasim_call_counts{};
  return 0;
}

int cudasim_get_call_counts(int device, cudasim_call_counts* out) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const Device* d = find_device(s, device);
  if (d == nullptr || out == nullptr) return -1;
  *out = d->calls;
  return 0;
}

uint64_t cudasim_thread_call_ns(void) { return thread_call_ns_total(); }

int cudasim_set_capacity(int device, size_t bytes) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Device* d = find_device(s, device);
  if (d == nullptr) return -1;
  d->capacity = bytes;
  return 0;
}

size_t cudasim_get_capacity(int device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const Device* d = find_device(s, device);
  return d == nullptr ? 0 : d->capacity;
}

int cudasim_fail_nth_allocation(int device, int n) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Device* d = find_device(s, device);
  if (d == nullptr || n < 0) return -1;
  d->fail_countdown = n;
  return 0;
}

int cudasim_fail_nth_call(int device, const char* kind, int n) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Device* d = find_device(s, device);
  if (d == nullptr || kind == nullptr || n < 0) return -1;
  const CallKind member = call_kind_named(kind);
  if (member == nullptr) return -1;
  d->fail_kind = n == 0 ? nullptr : member;
  d->fail_kind_countdown = n;
  d->fail_from_env = false;  // a test's own failure replaces CUDASIM_FAIL_NTH's
  return 0;
}

int cudasim_set_vmm_supported(int device, int supported) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Device* d = find_device(s, device);
  if (d == nullptr || (supported != 0 && supported != 1)) return -1;
  d->vmm_supported = supported == 1;
  return 0;
}

int cudasim_hold_stream(cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Stream* st = find_stream(s, stream);
  if (st == nullptr) return -1;
  st->held = true;
  return 0;
}

int cudasim_release_stream(cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Stream* st = find_stream(s, stream);
  if (st == nullptr) return -1;
  st->held = false;
  make_progress(s);
  return 0;
}

int cudasim_set_stream_capturing(cudaStream_t stream, int capturing) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Stream* st = find_stream(s, stream);
  if (st == nullptr || (capturing != 0 && capturing != 1)) return -1;
  st->capturing = capturing == 1;
  return 0;
}

}  // extern "C"
