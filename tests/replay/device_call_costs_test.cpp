// The cost table: every kind once, in cudasim_call_counts' order, each with its source; the
// estimate is the weighted sum; tools/replay/README.md restates the same figures.
#include "device_call_costs.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "trace_csv.h"

namespace cudacache::replay {
namespace {

// The fields of cudasim_call_counts (tools/cudasim/include/cudasim.h) but the event calls, in
// order.
const std::vector<std::string> kKinds{"malloc",  "free",         "create",      "release",
                                      "map",     "unmap",        "set_access",  "synchronize",
                                      "reserve", "address_free", "mem_get_info"};

// As the README writes a figure: 230.76, 19, 1.45.
std::string figure(double microseconds) {
  std::ostringstream out;
  out << microseconds;
  return out.str();
}

TEST(DeviceCallCosts, EveryKindOnceInOrderWithASource) {
  const auto& costs = device_call_costs();
  ASSERT_EQ(costs.size(), kKinds.size());
  for (std::size_t i = 0; i < costs.size(); ++i) {
    SCOPED_TRACE(kKinds[i]);
    EXPECT_EQ(costs[i].key, kKinds[i]);
    EXPECT_EQ(static_cast<std::size_t>(costs[i].kind), i);
    EXPECT_EQ(&device_call_cost(costs[i].kind), &costs[i]);
    EXPECT_GT(costs[i].microseconds, 0.0);
    EXPECT_FALSE(costs[i].calls.empty());
    EXPECT_GT(costs[i].source.size(), 20u);  // a source or the reasoning, not a placeholder
  }
  // The published A100 figures (../shared/REFERENCE.md) are the measured ones.
  EXPECT_TRUE(device_call_cost(DeviceCallKind::kCreate).measured);
  EXPECT_DOUBLE_EQ(device_call_cost(DeviceCallKind::kCreate).microseconds, 193.32);
  EXPECT_DOUBLE_EQ(device_call_cost(DeviceCallKind::kMap).microseconds, 1.45);
  EXPECT_FALSE(device_call_cost(DeviceCallKind::kRelease).measured);
  EXPECT_FALSE(device_call_cost(DeviceCallKind::kMalloc).measured);
  EXPECT_TRUE(device_call_cost(DeviceCallKind::kMemGetInfo).measured);
}

TEST(DeviceCallCosts, EstimateIsCallsWeightedByTheTable) {
  DeviceCalls calls;
  EXPECT_EQ(calls.total(), 0u);
  EXPECT_EQ(calls.estimated_seconds(), 0.0);
  double expected_us = 0.0;
  for (const DeviceCallCost& cost : device_call_costs()) {
    const std::uint64_t count = static_cast<std::uint64_t>(cost.kind) * 3 + 1;
    calls[cost.kind] = count;
    expected_us += static_cast<double>(count) * cost.microseconds;
  }
  EXPECT_EQ(calls.total(), 11u + 3u * 55u);
  EXPECT_NEAR(calls.estimated_seconds(), expected_us * 1e-6, 1e-12);

  DeviceCalls mallocs;
  mallocs[DeviceCallKind::kMalloc] = 1000;
  EXPECT_NEAR(mallocs.estimated_seconds(),
              device_call_cost(DeviceCallKind::kMalloc).microseconds * 1e-3, 1e-12);
}

// The README's table has one row per kind: | `key` | calls | microseconds | measured/estimate |
// source |. Its figures must be the table's.
TEST(DeviceCallCosts, ReadmeRestatesTheTable) {
  const std::string readme = read_file_bytes(CUDACACHE_REPLAY_README);
  for (const DeviceCallCost& cost : device_call_costs()) {
    SCOPED_TRACE(std::string(cost.key));
    const std::string start = "| `" + std::string(cost.key) + "` |";
    const std::size_t at = readme.find("\n" + start);
    ASSERT_NE(at, std::string::npos) << "no README row starting " << start;
    const std::string row = readme.substr(at + 1, readme.find('\n', at + 1) - at - 1);
    EXPECT_NE(row.find("| " + figure(cost.microseconds) + " |"), std::string::npos) << row;
    EXPECT_NE(row.find(cost.measured ? "| measured |" : "| estimate |"), std::string::npos) << row;
  }
}

}  // namespace
}  // namespace cudacache::replay
