#include "device_stats.h"

#include "json_writer.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>

namespace cudacache {
namespace {

constexpr std::array<std::pair<std::string_view, StatArray MemoryStats::*>, 9> kArrays{{
    {"allocation", &MemoryStats::allocation},
    {"segment", &MemoryStats::segment},
    {"active", &MemoryStats::active},
    {"inactive_split", &MemoryStats::inactive_split},
    {"allocated_bytes", &MemoryStats::allocated_bytes},
    {"reserved_bytes", &MemoryStats::reserved_bytes},
    {"active_bytes", &MemoryStats::active_bytes},
    {"inactive_split_bytes", &MemoryStats::inactive_split_bytes},
    {"requested_bytes", &MemoryStats::requested_bytes},
}};

constexpr std::array<std::pair<std::string_view, Stat MemoryStats::*>, 2> kSingles{{
    {"oversize_allocations", &MemoryStats::oversize_allocations},
    {"oversize_segments", &MemoryStats::oversize_segments},
}};

constexpr std::array<std::pair<std::string_view, std::int64_t MemoryStats::*>, 6> kScalars{{
    {"num_alloc_retries", &MemoryStats::num_alloc_retries},
    {"num_ooms", &MemoryStats::num_ooms},
    {"num_sync_all_streams", &MemoryStats::num_sync_all_streams},
    {"num_device_alloc", &MemoryStats::num_device_alloc},
    {"num_device_free", &MemoryStats::num_device_free},
    {"max_split_size", &MemoryStats::max_split_size},
}};

constexpr std::array<std::string_view, kNumStatPools> kPoolNames{"all", "small_pool", "large_pool"};

std::size_t pool_index(PoolKind pool) { return pool == PoolKind::kSmall ? kSmallPool : kLargePool; }

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

void DeviceStats::increase(Stat& stat, std::int64_t amount) {
  stat.current += amount;
  stat.peak = std::max(stat.peak, stat.current);
  stat.allocated += amount;
}

void DeviceStats::decrease(Stat& stat, std::int64_t amount) {
  stat.current -= amount;
  stat.freed += amount;
}

void DeviceStats::increase(StatArray& array, PoolKind pool, std::int64_t amount) {
  increase(array[kAllPools], amount);
  increase(array[pool_index(pool)], amount);
}

void DeviceStats::decrease(StatArray& array, PoolKind pool, std::int64_t amount) {
  decrease(array[kAllPools], amount);
  decrease(array[pool_index(pool)], amount);
}

void DeviceStats::reset_peaks() {
  for_each_stat(stats_, [](Stat& stat) { stat.peak = stat.current; });
}

void DeviceStats::reset_accumulated() {
  for_each_stat(stats_, [](Stat& stat) {
    stat.allocated = 0;
    stat.freed = 0;
  });
  stats_.num_alloc_retries = 0;
  stats_.num_ooms = 0;
  stats_.num_sync_all_streams = 0;
  stats_.num_device_alloc = 0;
  stats_.num_device_free = 0;
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
  for (const auto& [name, member] : kScalars) json.field(name, stats.*member);
  json.end_object();
  return json.str();
}

}  // namespace cudacache
