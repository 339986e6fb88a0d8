// CUDASIM_REPORT=1: one summary line on stderr at exit, summed over devices; peak is the
// high-water mark of the total in use. After "calls:" come the device calls by kind
// (cudasim_call_counts), failed ones included. A library destructor runs after the program's
// static destructors, so frees made by those are counted; the State is never destroyed, so
// reading it here is safe.
#include <cinttypes>
#include <cstdio>

#include "state.h"

namespace cudasim {

namespace {

// CUDASIM_CALL_REPORT=PATH: one line per device and kind called at least once since load,
// "device D KIND COUNT", then "injected D KEPT" for each device where a CUDASIM_FAIL_NTH (or
// cudasim_fail_nth_call) failure happened, KEPT the bytes that failed cudaFree, cuMemRelease
// or cuMemUnmap calls kept and that are still alive now, and "fired D" where the failure
// CUDASIM_FAIL_NTH asked for happened. Tools that sweep faults read it.
void write_call_report(const State& s) {
  std::FILE* file = std::fopen(s.call_report, "w");
  if (file == nullptr) {
    std::fprintf(stderr, "cudasim: cannot write CUDASIM_CALL_REPORT='%s'\n", s.call_report);
    return;
  }
  for (size_t device = 0; device < s.devices.size(); ++device) {
    const Device& d = s.devices[device];
    for (const NamedCallKind& named : kCallKinds) {
      const uint64_t count = d.lifetime_calls.*named.kind;
      if (count > 0) std::fprintf(file, "device %zu %s %" PRIu64 "\n", device, named.name, count);
    }
    if (d.injected) {
      std::fprintf(file, "injected %zu %" PRIu64 "\n", device,
                   kept_bytes_alive(s, static_cast<int>(device)));
    }
    if (d.env_fault_fired) std::fprintf(file, "fired %zu\n", device);
  }
  std::fclose(file);
}

__attribute__((destructor)) void report_at_exit() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.call_report != nullptr) write_call_report(s);
  if (!s.report) return;
  cudasim_counters total{};
  cudasim_call_counts calls{};
  for (const Device& d : s.devices) {
    total.mallocs += d.counters.mallocs;
    total.frees += d.counters.frees;
    total.maps += d.counters.maps;
    total.unmaps += d.counters.unmaps;
    calls.malloc += d.calls.malloc;
    calls.free += d.calls.free;
    calls.create += d.calls.create;
    calls.release += d.calls.release;
    calls.map += d.calls.map;
    calls.unmap += d.calls.unmap;
    calls.set_access += d.calls.set_access;
    calls.synchronize += d.calls.synchronize;
    calls.reserve += d.calls.reserve;
    calls.address_free += d.calls.address_free;
    calls.mem_get_info += d.calls.mem_get_info;
  }
  std::fprintf(stderr,
               "cudasim: mallocs=%" PRIu64 " frees=%" PRIu64 " maps=%" PRIu64 " unmaps=%" PRIu64
               " in_use=%" PRIu64 " peak=%" PRIu64 " calls: malloc=%" PRIu64 " free=%" PRIu64
               " create=%" PRIu64 " release=%" PRIu64 " map=%" PRIu64 " unmap=%" PRIu64
               " set_access=%" PRIu64 " synchronize=%" PRIu64 " reserve=%" PRIu64
               " address_free=%" PRIu64 " mem_get_info=%" PRIu64 "\n",
               total.mallocs, total.frees, total.maps, total.unmaps, s.total_in_use, s.total_peak,
               calls.malloc, calls.free, calls.create, calls.release, calls.map, calls.unmap,
               calls.set_access, calls.synchronize, calls.reserve, calls.address_free,
               calls.mem_get_info);
}

}  // namespace

}  // namespace cudasim
