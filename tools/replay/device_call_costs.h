// Device calls by kind, as cudasim counts them (cudasim_get_call_counts), and what each kind is
// estimated to cost on a real GPU. The cost table in device_call_costs.cpp is the only place
// the figures are written; tools/replay/README.md restates it (a test checks that it matches).
//
// The estimate is a weighted count, not a timing: calls x published (or estimated) cost per
// call. cudasim's own cost per call is a few hundred nanoseconds of CPU and says nothing about
// a driver.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

namespace cudacache::replay {

enum class DeviceCallKind : std::size_t {
  kMalloc,       // cudaMalloc, cudaMallocAsync, ...
  kFree,         // cudaFree (non-NULL), cudaFreeAsync
  kCreate,       // cuMemCreate
  kRelease,      // cuMemRelease
  kMap,          // cuMemMap
  kUnmap,        // cuMemUnmap
  kSetAccess,    // cuMemSetAccess
  kSynchronize,  // cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, ...
  kReserve,      // cuMemAddressReserve
  kAddressFree,  // cuMemAddressFree
  kMemGetInfo,   // cudaMemGetInfo
};
inline constexpr std::size_t kDeviceCallKinds = 11;

struct DeviceCallCost {
  DeviceCallKind kind;
  std::string_view key;     // JSON key and cudasim_call_counts field: "set_access"
  std::string_view calls;   // the functions counted: "cuMemSetAccess"
  double microseconds;      // estimated cost of one call on a GPU
  bool measured;            // true: a published measurement; false: an estimate
  std::string_view source;  // where the measurement was published, or the estimate's reasoning
};

// One row per kind, in DeviceCallKind order.
const std::array<DeviceCallCost, kDeviceCallKinds>& device_call_costs();
const DeviceCallCost& device_call_cost(DeviceCallKind kind);

// Calls by kind during one replay.
struct DeviceCalls {
  std::array<std::uint64_t, kDeviceCallKinds> counts{};

  std::uint64_t& operator[](DeviceCallKind kind) { return counts[static_cast<std::size_t>(kind)]; }
  std::uint64_t operator[](DeviceCallKind kind) const {
    return counts[static_cast<std::size_t>(kind)];
  }
  std::uint64_t total() const;
  // Sum over kinds of calls x the table's cost per call, in seconds.
  double estimated_seconds() const;

  bool operator==(const DeviceCalls&) const = default;
};

// "malloc 12, free 3, map 40": the kinds that were called, in table order ("none" if none).
std::ostream& operator<<(std::ostream& out, const DeviceCalls& calls);

}  // namespace cudacache::replay
