// The global State and the memory accounting shared by cudaMalloc and cuMemCreate.
#include "state.h"

#include <algorithm>
#include <cstring>
#include <ctime>

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
  if (config.fail_kind != nullptr) {
    Device& d = s->devices[static_cast<size_t>(config.fail_device)];
    d.fail_kind = call_kind_named(config.fail_kind);
    d.fail_kind_countdown = config.fail_n;
    d.fail_from_env = true;
  }
  s->call_report = config.call_report;
  s->malloc_page = config.malloc_page;
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

const NamedCallKind kCallKinds[14] = {
    {"malloc", &cudasim_call_counts::malloc},
    {"free", &cudasim_call_counts::free},
    {"create", &cudasim_call_counts::create},
    {"release", &cudasim_call_counts::release},
    {"map", &cudasim_call_counts::map},
    {"unmap", &cudasim_call_counts::unmap},
    {"set_access", &cudasim_call_counts::set_access},
    {"synchronize", &cudasim_call_counts::synchronize},
    {"reserve", &cudasim_call_counts::reserve},
    {"address_free", &cudasim_call_counts::address_free},
    {"event_create", &cudasim_call_counts::event_create},
    {"event_record", &cudasim_call_counts::event_record},
    {"event_query", &cudasim_call_counts::event_query},
    {"mem_get_info", &cudasim_call_counts::mem_get_info},
};

CallKind call_kind_named(const char* name) {
  for (const NamedCallKind& named : kCallKinds) {
    if (std::strcmp(named.name, name) == 0) return named.kind;
  }
  return nullptr;
}

namespace {

thread_local uint64_t thread_call_ns = 0;

uint64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec);
}

// What one reading of the clock takes, the least of a few back-to-back pairs, measured once.
// A call's interval runs from the middle of its first reading to the middle of its last: the
// halves outside it, one reading in all, are still the call's time, not its caller's.
uint64_t clock_reading_ns() {
  static const uint64_t cost = [] {
    uint64_t least = UINT64_MAX;
    for (int i = 0; i < 64; ++i) {
      const uint64_t first = monotonic_ns();
      least = std::min(least, monotonic_ns() - first);
    }
    return least;
  }();
  return cost;
}

}  // namespace

CallClock::CallClock() : start_ns_(monotonic_ns()) {}
CallClock::~CallClock() {
  // The thread-local's address first (a __tls_get_addr call in a shared library, tens of ns),
  // then the clock: the lookup counts as the call's time, not as its caller's.
  uint64_t* total = &thread_call_ns;
  asm volatile("" : "+r"(total)::"memory");
  const uint64_t reading = clock_reading_ns();
  *total += monotonic_ns() - start_ns_ + reading;
}

uint64_t thread_call_ns_total() { return thread_call_ns; }

bool count_call(State& s, int device, CallKind kind) {
  if (!valid_device(s, device)) device = current_device();
  if (!valid_device(s, device)) return false;
  Device& d = s.devices[static_cast<size_t>(device)];
  ++(d.calls.*kind);
  ++(d.lifetime_calls.*kind);
  if (d.fail_kind != kind || --d.fail_kind_countdown > 0) return false;
  d.fail_kind = nullptr;
  d.injected = true;
  if (d.fail_from_env) d.env_fault_fired = true;
  return true;
}

uint64_t kept_bytes_alive(const State& s, int device) {
  const Device& d = s.devices[static_cast<size_t>(device)];
  uint64_t bytes = 0;
  for (const uintptr_t address : d.kept_allocations) {
    const auto it = s.allocations.find(address);
    // What it takes from the device: its own bytes and, with CUDASIM_MALLOC_PAGE, its part of
    // a page it shares (malloc_pages.cpp).
    if (it != s.allocations.end()) bytes += it->second.own_bytes + it->second.shared_bytes;
  }
  // A handle's memory lives while it is unreleased or still mapped (then it stays in
  // s.physical); a handle kept twice counts once.
  std::vector<uint64_t> counted;
  for (const uint64_t handle : d.kept_handles) {
    const auto it = s.physical.find(handle);
    if (it == s.physical.end() ||
        std::find(counted.begin(), counted.end(), handle) != counted.end()) {
      continue;
    }
    counted.push_back(handle);
    bytes += it->second.bytes;
  }
  return bytes;
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
