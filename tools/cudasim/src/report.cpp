// CUDASIM_REPORT=1: one summary line on stderr at exit, summed over devices; peak is the
// high-water mark of the total in use. A library destructor runs after the program's static
// destructors, so frees made by those are counted; the State is never destroyed, so reading
// it here is safe.
#include <cinttypes>
#include <cstdio>

#include "state.h"

namespace cudasim {

namespace {

__attribute__((destructor)) void report_at_exit() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.report) return;
  cudasim_counters total{};
  for (const Device& d : s.devices) {
    total.mallocs += d.counters.mallocs;
    total.frees += d.counters.frees;
    total.maps += d.counters.maps;
    total.unmaps += d.counters.unmaps;
  }
  std::fprintf(stderr,
               "cudasim: mallocs=%" PRIu64 " frees=%" PRIu64 " maps=%" PRIu64 " unmaps=%" PRIu64
               " in_use=%" PRIu64 " peak=%" PRIu64 "\n",
               total.mallocs, total.frees, total.maps, total.unmaps, s.total_in_use, s.total_peak);
}

}  // namespace

}  // namespace cudasim
