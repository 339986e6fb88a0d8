#include "device_call_costs.h"

namespace cudacache::replay {
namespace {

// Published measurements. The VMM figures are the averages of kvcached's
// benchmarks/bench_vmm on an A100 (one thread, 2 MiB pages; its README's sample output). No
// published H100/H200 figures were found (../shared/REFERENCE.md, "Virtual memory (VMM) costs").
constexpr double kCreateUs = 193.32;
constexpr double kMapUs = 1.45;
constexpr double kSetAccessUs = 35.99;
constexpr double kUnmapUs = 25.63;
constexpr double kReserveUs = 19.0;
constexpr double kFreeUs = 14.0;
constexpr double kMemGetInfoUs = 10.1;

// Estimates, built from the measurements above where the work is the same.
constexpr double kMallocUs = kCreateUs + kMapUs + kSetAccessUs;
constexpr double kReleaseUs = kFreeUs;
constexpr double kAddressFreeUs = kReserveUs;
constexpr double kSynchronizeUs = 5.0;

constexpr std::array<DeviceCallCost, kDeviceCallKinds> kCosts{{
    {DeviceCallKind::kMalloc, "malloc", "cudaMalloc, cudaMallocAsync", kMallocUs, false,
     "no published per-call figure for 2-20 MiB allocations on a datacenter GPU was found; a "
     "cudaMalloc of a segment does the work of one cuMemCreate, one cuMemMap and one "
     "cuMemSetAccess, so it is costed as their sum"},
    {DeviceCallKind::kFree, "free", "cudaFree (non-NULL), cudaFreeAsync", kFreeUs, true,
     "cudaFree with no pending work, about 14 us (GTX 1660 SUPER / RTX 2080 Ti; Cytnx pull "
     "request 850, github.com/Cytnx-dev/Cytnx/pull/850)"},
    {DeviceCallKind::kCreate, "create", "cuMemCreate", kCreateUs, true,
     "kvcached benchmarks/bench_vmm, A100, 2 MiB pages, average (p99 381 us)"},
    {DeviceCallKind::kRelease, "release", "cuMemRelease", kReleaseUs, false,
     "not measured anywhere we found; it returns physical memory to the driver, as a cudaFree "
     "with no pending work does, so it is costed as that cudaFree"},
    {DeviceCallKind::kMap, "map", "cuMemMap", kMapUs, true,
     "kvcached benchmarks/bench_vmm, A100, 2 MiB pages, average"},
    {DeviceCallKind::kUnmap, "unmap", "cuMemUnmap", kUnmapUs, true,
     "kvcached benchmarks/bench_vmm, A100, 2 MiB pages, average"},
    {DeviceCallKind::kSetAccess, "set_access", "cuMemSetAccess", kSetAccessUs, true,
     "kvcached benchmarks/bench_vmm, A100, 2 MiB pages, average"},
    {DeviceCallKind::kSynchronize, "synchronize",
     "cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize (+ driver equivalents)",
     kSynchronizeUs, false,
     "the call alone with nothing pending (a replay runs no kernels), taken as one driver round "
     "trip, like the 5-7 us measured to submit one cudaMemcpyAsync (DualPath, arXiv "
     "2602.21548); on a busy GPU it also waits for the work queued before it"},
    {DeviceCallKind::kReserve, "reserve", "cuMemAddressReserve", kReserveUs, true,
     "kvcached benchmarks/bench_vmm, A100, one 8 GB reservation"},
    {DeviceCallKind::kAddressFree, "address_free", "cuMemAddressFree", kAddressFreeUs, false,
     "not measured anywhere we found; the inverse of cuMemAddressReserve, costed as it"},
    {DeviceCallKind::kMemGetInfo, "mem_get_info", "cudaMemGetInfo", kMemGetInfoUs, true,
     "torch.cuda.mem_get_info() (one cudaMemGetInfo), averages of 1000 calls on B300, SM100 "
     "and SM103 GPUs: 7.5, 10.2 and 12.5 us (sglang issue 25225, "
     "github.com/sgl-project/sglang/issues/25225); their mean"},
}};

constexpr bool in_kind_order() {
  for (std::size_t i = 0; i < kCosts.size(); ++i) {
    if (static_cast<std::size_t>(kCosts[i].kind) != i) return false;
  }
  return true;
}
static_assert(in_kind_order(), "kCosts must list the kinds in DeviceCallKind order");

}  // namespace

const std::array<DeviceCallCost, kDeviceCallKinds>& device_call_costs() { return kCosts; }

const DeviceCallCost& device_call_cost(DeviceCallKind kind) {
  return kCosts[static_cast<std::size_t>(kind)];
}

std::uint64_t DeviceCalls::total() const {
  std::uint64_t sum = 0;
  for (std::uint64_t count : counts) sum += count;
  return sum;
}

double DeviceCalls::estimated_seconds() const {
  double microseconds = 0.0;
  for (std::size_t i = 0; i < kDeviceCallKinds; ++i) {
    microseconds += static_cast<double>(counts[i]) * kCosts[i].microseconds;
  }
  return microseconds * 1e-6;
}

std::ostream& operator<<(std::ostream& out, const DeviceCalls& calls) {
  bool any = false;
  for (const DeviceCallCost& cost : kCosts) {
    if (calls[cost.kind] == 0) continue;
    out << (any ? ", " : "") << cost.key << ' ' << calls[cost.kind];
    any = true;
  }
  if (!any) out << "none";
  return out;
}

}  // namespace cudacache::replay
