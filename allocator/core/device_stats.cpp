#include "device_stats.h"

#include "json_writer.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>

namespace cudacache {
namespace {

// The counters of <cudacache/memory_stats.inc>, by kind, with their JSON names.
template <typename Member>
using Named = std::pair<std::string_view, Member MemoryStats::*>;

#define CUDACACHE_STAT_ARRAY(name, doc) {#name, &MemoryStats::name},
#define CUDACACHE_STAT_SINGLE(name, doc)
#define CUDACACHE_STAT_EVENTS(name, doc)
#define CUDACACHE_STAT_SETTING(name, doc)
constexpr Named<StatArray> kArrays[] = {
#include <cudacache/memory_stats.inc>
};

#define CUDACACHE_STAT_ARRAY(name, doc)
#define CUDACACHE_STAT_SINGLE(name, doc) {#name, &MemoryStats::name},
#define CUDACACHE_STAT_EVENTS(name, doc)
#define CUDACACHE_STAT_SETTING(name, doc)
constexpr Named<Stat> kSingles[] = {
#include <cudacache/memory_stats.inc>
};

// Event counts (reset with the accumulated stats) and settings (never reset), JSON order.
struct Scalar {
  std::string_view name;
  std::int64_t MemoryStats::*member;
  bool accumulated;
};
#define CUDACACHE_STAT_ARRAY(name, doc)
#define CUDACACHE_STAT_SINGLE(name, doc)
#define CUDACACHE_STAT_EVENTS(name, doc) {#name, &MemoryStats::name, true},
#define CUDACACHE_STAT_SETTING(name, doc) {#name, &MemoryStats::name, false},
constexpr Scalar kScalars[] = {
#include <cudacache/memory_stats.inc>
};

constexpr std::array<std::string_view, kNumStatPools> kPoolNames{"all", "small_pool", "large_pool"};

template <typename Fn>
void for_each_stat(MemoryStats& stats, Fn&& fn) {
  for (const auto& [name, member] : kArrays) {
    for (Stat& stat : stats.*member) fn(stat);
  }
  for (const auto& [name, member] : kSingles) fn(stats.*member);
}

void write_stat(JsonWriter& json, const std::string& prefix, const Stat& stat) {
  json.field(prefix + ".current", stat.current);
  json.field(prefix + ".peak", stat.peak);
  json.field(prefix + ".allocated", stat.allocated);
  json.field(prefix + ".freed", stat.freed);
}

}  // namespace

void DeviceStats::reset_peaks() {
  for_each_stat(stats_, [](Stat& stat) { stat.peak = stat.current; });
}

void DeviceStats::reset_accumulated() {
  for_each_stat(stats_, [](Stat& stat) {
    stat.allocated = 0;
    stat.freed = 0;
  });
  for (const Scalar& scalar : kScalars) {
    if (scalar.accumulated) stats_.*scalar.member = 0;
  }
}

std::string DeviceStats::to_json(const MemoryStats& stats) {
  JsonWriter json;
  json.begin_object();
  for (const auto& [name, member] : kArrays) {
    for (std::size_t pool = 0; pool < kNumStatPools; ++pool) {
      write_stat(json, std::string(name) + "." + std::string(kPoolNames[pool]),
                 (stats.*member)[pool]);
    }
  }
  for (const auto& [name, member] : kSingles) write_stat(json, std::string(name), stats.*member);
  for (const Scalar& scalar : kScalars) json.field(scalar.name, stats.*scalar.member);
  json.end_object();
  return json.str();
}

}  // namespace cudacache
