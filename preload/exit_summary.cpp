// CUDACACHE_STATS_AT_EXIT=1 prints a summary table to stderr at exit; any other value except
// 0 is a file path to write it to (written only when there is something to say). One row per
// device that saw a request:
//
//   cudacache preload summary
//   device  requests  cache hits  passed through  device mallocs  device frees  calls avoided  peak
//   allocated  peak reserved
//        0     40000       39985               0              15             0 79985        9.50
//        MiB      40.00 MiB
//
// requests: allocations cudacache served; cache hits: those that needed no device
// allocation; passed through: allocations left to the real function (out of memory, a
// pending error, no cache for the device); device mallocs / frees: the runtime calls cudacache
// made; calls avoided: (requests + frees served) - (device mallocs + device frees), that is
// the allocation and free calls the program would have made to the device without cudacache.
// Peaks are of allocated (rounded) and reserved (segment) bytes.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "device_caches.h"

namespace cudacache::preload {
namespace {

std::string human_bytes(std::int64_t bytes) {
  char text[32];
  if (bytes < 1024) {
    std::snprintf(text, sizeof text, "%" PRId64 " B", bytes);
    return text;
  }
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  return text;
}

// Nothing when no device saw a request and caching is on: a process that inherited
// LD_PRELOAD without using CUDA (a shell, a compiler) prints nothing.
void write_summary(std::FILE* out) {
  const std::string reason = disabled_reason();
  bool header = false;
  auto print_header = [&] {
    if (header) return;
    header = true;
    std::fprintf(out, "cudacache preload summary\n");
    if (!reason.empty()) std::fprintf(out, "caching disabled: %s\n", reason.c_str());
    std::fprintf(out, "%6s %9s %11s %15s %15s %13s %14s %15s %14s\n", "device", "requests",
                 "cache hits", "passed through", "device mallocs", "device frees", "calls avoided",
                 "peak allocated", "peak reserved");
  };
  if (!reason.empty()) print_header();
  for (int device = 0; device < kMaxDevices; ++device) {
    const DeviceSummary s = summarize(device);
    if (!s.used) continue;
    print_header();
    const auto mallocs = static_cast<std::uint64_t>(s.device_mallocs);
    const auto frees = static_cast<std::uint64_t>(s.device_frees);
    const std::uint64_t hits = s.requests > mallocs ? s.requests - mallocs : 0;
    const std::uint64_t served = s.requests + s.frees;
    const std::uint64_t avoided = served > mallocs + frees ? served - mallocs - frees : 0;
    std::fprintf(out,
                 "%6d %9" PRIu64 " %11" PRIu64 " %15" PRIu64 " %15" PRIu64 " %13" PRIu64
                 " %14" PRIu64 " %15s %14s\n",
                 device, s.requests, hits, s.passed_through, mallocs, frees, avoided,
                 human_bytes(s.peak_allocated).c_str(), human_bytes(s.peak_reserved).c_str());
  }
}

// A destructor, not a constructor-registered atexit: nothing runs before main.
__attribute__((destructor)) void summary_at_exit() {
  if (caches_are_inherited()) return;  // a forked child: its parent reports
  const char* target = std::getenv("CUDACACHE_STATS_AT_EXIT");
  if (target == nullptr || target[0] == '\0' || std::strcmp(target, "0") == 0) return;
  if (std::strcmp(target, "1") == 0) {
    write_summary(stderr);
    return;
  }
  std::FILE* out = std::fopen(target, "w");
  if (out == nullptr) {
    std::fprintf(stderr, "cudacache: cannot write the summary to %s\n", target);
    return;
  }
  write_summary(out);
  std::fclose(out);
}

}  // namespace
}  // namespace cudacache::preload
