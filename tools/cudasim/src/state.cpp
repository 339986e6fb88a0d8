// The global State and the memory accounting shared by cudaMalloc and cuMemCreate.
#include "state.h"

#include <algorithm>

namespace cudasim {

namespace {

State* make_state() {
  const Config config = load_config();
  auto* s = new State();
  s->report = config.report;
  s->verbose = config.verbose;
  s->devices.resize(static_cast<size_t>(config.devices));
  for (size_t i = 0; i < s->devices.size(); ++i) {
    s->devices[i].capacity = config.capacity;
    s->devices[i].vmm_supported = config.vmm;
    s->devices[i].legacy_stream =
        create_stream(*s, static_cast<int>(i), StreamKind::Legacy, cudaStreamDefault, 0);
  }
  return s;
}

}  // namespace

State& state() {
  // Deliberately leaked: see the declaration.
  static State* const instance = make_state();
  return *instance;
}

int& current_device() {
  thread_local int device = 0;
  return device;
}

bool valid_device(const State& s, int device) {
  return device >= 0 && static_cast<size_t>(device) < s.devices.size();
}

bool count_call(State& s, int device, CallKind kind) {
  if (!valid_device(s, device)) device = current_device();
  if (!valid_device(s, device)) return false;
  Device& d = s.devices[static_cast<size_t>(device)];
  ++(d.calls.*kind);
  if (d.fail_kind != kind || --d.fail_kind_countdown > 0) return false;
  d.fail_kind = nullptr;
  return true;
}

CUresult injected_driver_error(CallKind kind) {
  const bool allocates =
      kind == &cudasim_call_counts::malloc || kind == &cudasim_call_counts::create ||
      kind == &cudasim_call_counts::map || kind == &cudasim_call_counts::set_access ||
      kind == &cudasim_call_counts::reserve;
  return allocates ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
}

cudaError_t injected_error(CallKind kind) {
  return injected_driver_error(kind) == CUDA_ERROR_OUT_OF_MEMORY ? cudaErrorMemoryAllocation
                                                                 : cudaErrorUnknown;
}

cudaError_t charge(State& s, int device, size_t bytes) {
  Device& d = s.devices[static_cast<size_t>(device)];
  if (d.fail_countdown > 0 && --d.fail_countdown == 0) return cudaErrorMemoryAllocation;
  if (d.counters.in_use_bytes > d.capacity || bytes > d.capacity - d.counters.in_use_bytes) {
    return cudaErrorMemoryAllocation;
  }
  d.counters.in_use_bytes += bytes;
  d.counters.peak_bytes = std::max(d.counters.peak_bytes, d.counters.in_use_bytes);
  s.total_in_use += bytes;
  s.total_peak = std::max(s.total_peak, s.total_in_use);
  return cudaSuccess;
}

void credit(State& s, int device, size_t bytes) {
  s.devices[static_cast<size_t>(device)].counters.in_use_bytes -= bytes;
  s.total_in_use -= bytes;
}

}  // namespace cudasim
