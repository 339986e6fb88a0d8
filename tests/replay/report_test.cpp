#include "report.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <sstream>

#include "device_call_costs.h"
#include "json_test_reader.h"
#include "trace_csv.h"

namespace cudacache::replay {
namespace {

using testing::Json;
using testing::JsonReader;

TraceReport sample_report() {
  TraceReport report = TraceReport::describe(parse_trace_csv(
      "op,id,size,stream\nalloc,0,1000,0\nalloc,1,24,1\nfree,0,1000,0\nempty_cache,,,\n",
      "a\"b.csv"));
  ReplayResult found;
  found.allocator = "cub";
  found.peak_allocated_bytes = 4608;
  found.peak_reserved_bytes = 4608;
  found.device_peak_bytes = 4608;
  found.device_mallocs = 2;
  found.device_frees = 1;
  found.device_calls = DeviceCalls{};
  (*found.device_calls)[DeviceCallKind::kMalloc] = 3;  // one failed
  (*found.device_calls)[DeviceCallKind::kFree] = 1;
  (*found.device_calls)[DeviceCallKind::kSynchronize] = 2;
  found.events_replayed = 4;
  found.seconds = 0.5;
  found.min_capacity_bytes = 2 << 20;
  ReplayResult failed;
  failed.allocator = "nocache";
  failed.oom = true;
  failed.oom_event = 1;
  failed.oom_message = "cudaMalloc(24) failed";
  failed.events_replayed = 2;
  report.min_capacity_searched = true;
  report.results = {found, failed};
  return report;
}

TEST(Report, JsonHasThePromisedShape) {
  std::ostringstream out;
  write_json({sample_report()}, out);
  const Json root = JsonReader(out.str()).read();
  ASSERT_EQ(root.at("traces").array.size(), 1u);
  const Json& trace = root.at("traces").array[0];
  EXPECT_EQ(trace.at("name").text, "a\"b.csv");
  EXPECT_EQ(trace.at("events").number, 4);
  EXPECT_EQ(trace.at("peak_requested_bytes").number, 1024);
  EXPECT_EQ(trace.at("streams").number, 2);
  EXPECT_EQ(trace.at("empty_cache_calls").number, 1);
  const auto& results = trace.at("results").array;
  ASSERT_EQ(results.size(), 2u);
  const Json& cub = results[0];
  EXPECT_EQ(cub.at("allocator").text, "cub");
  EXPECT_EQ(cub.at("peak_allocated_bytes").number, 4608);
  EXPECT_EQ(cub.at("peak_reserved_bytes").number, 4608);
  EXPECT_EQ(cub.at("min_capacity_bytes").number, 2 << 20);
  EXPECT_EQ(cub.at("device_mallocs").number, 2);
  EXPECT_EQ(cub.at("device_frees").number, 1);
  EXPECT_EQ(cub.at("oom").type, Json::Type::kBool);
  EXPECT_FALSE(cub.at("oom").boolean);
  EXPECT_EQ(cub.at("seconds").number, 0.5);
  EXPECT_EQ(cub.at("events_per_second").number, 8);
  EXPECT_DOUBLE_EQ(cub.at("reserved_over_requested").number, 4.5);
  const Json& nocache = results[1];
  EXPECT_TRUE(nocache.at("oom").boolean);
  EXPECT_EQ(nocache.at("oom_event_index").number, 1);
  // Figures that were not measured are null, never zero.
  EXPECT_EQ(nocache.at("peak_reserved_bytes").type, Json::Type::kNull);
  EXPECT_EQ(nocache.at("min_capacity_bytes").type, Json::Type::kNull);
  EXPECT_EQ(nocache.at("device_mallocs").type, Json::Type::kNull);
  EXPECT_EQ(nocache.at("device_calls").type, Json::Type::kNull);
  EXPECT_EQ(nocache.at("estimated_device_call_seconds").type, Json::Type::kNull);
}

TEST(Report, JsonHasDeviceCallsByKindAndTheirEstimatedTime) {
  std::ostringstream out;
  write_json({sample_report()}, out);
  const Json cub = JsonReader(out.str()).read().at("traces").array[0].at("results").array[0];
  const Json& calls = cub.at("device_calls");
  ASSERT_EQ(calls.type, Json::Type::kObject);
  ASSERT_EQ(calls.object.size(), kDeviceCallKinds);
  for (const DeviceCallCost& cost : device_call_costs()) {
    const std::string key(cost.key);
    const double expected = cost.kind == DeviceCallKind::kMalloc        ? 3
                            : cost.kind == DeviceCallKind::kFree        ? 1
                            : cost.kind == DeviceCallKind::kSynchronize ? 2
                                                                        : 0;
    EXPECT_EQ(calls.at(key).number, expected) << key;
  }
  const double expected_us = 3 * device_call_cost(DeviceCallKind::kMalloc).microseconds +
                             device_call_cost(DeviceCallKind::kFree).microseconds +
                             2 * device_call_cost(DeviceCallKind::kSynchronize).microseconds;
  EXPECT_NEAR(cub.at("estimated_device_call_seconds").number, expected_us * 1e-6, 1e-12);
  // Unchanged beside them: the successful mallocs and frees as cudasim_get_counters has them.
  EXPECT_EQ(cub.at("device_mallocs").number, 2);
}

TEST(Report, TableShowsEveryAllocatorAndTheOom) {
  std::ostringstream out;
  print_table(sample_report(), out);
  const std::string table = out.str();
  EXPECT_NE(table.find("== a\"b"), std::string::npos) << table;
  EXPECT_NE(table.find("peak requested 1.00 KiB (1024 B)"), std::string::npos) << table;
  EXPECT_NE(table.find("min capacity"), std::string::npos) << table;
  EXPECT_NE(table.find("4.500"), std::string::npos) << table;  // reserved/requested of cub
  EXPECT_NE(table.find("event 2/4"), std::string::npos) << table;
  EXPECT_NE(table.find("nocache ran out of memory: cudaMalloc(24) failed"), std::string::npos)
      << table;
}

TEST(Report, TableShowsDeviceCallsWhereCounted) {
  std::ostringstream out;
  print_table(sample_report(), out);
  const std::string table = out.str();
  EXPECT_NE(table.find("device calls"), std::string::npos) << table;
  EXPECT_NE(table.find("est. call time"), std::string::npos) << table;
  // The by-kind table lists cub (counted) and leaves out nocache (not counted).
  const std::size_t by_kind = table.find("device calls by kind");
  ASSERT_NE(by_kind, std::string::npos) << table;
  EXPECT_NE(table.find("   cub ", by_kind), std::string::npos) << table;
  EXPECT_EQ(table.find("   nocache ", by_kind), std::string::npos) << table;
  const double us = (3 * device_call_cost(DeviceCallKind::kMalloc).microseconds +
                     device_call_cost(DeviceCallKind::kFree).microseconds +
                     2 * device_call_cost(DeviceCallKind::kSynchronize).microseconds);
  char estimate[32];
  std::snprintf(estimate, sizeof estimate, "%.1f us", us);
  EXPECT_NE(table.find(estimate), std::string::npos) << table << estimate;

  // Without any counted result there is no by-kind table at all.
  TraceReport uncounted = sample_report();
  uncounted.results.front().device_calls.reset();
  std::ostringstream plain;
  print_table(uncounted, plain);
  EXPECT_EQ(plain.str().find("device calls by kind"), std::string::npos) << plain.str();
}

// Issue 13: a "context" block like Google Benchmark's, beside the unchanged "traces".
TEST(Report, JsonContextComesBesideTheTraces) {
  RunContext context;
  context.version = "9.8.7";
  context.date = "2025-01-31T12:34:56Z";
  context.host_name = "host\"1";
  context.num_cpus = 16;
  context.cuda_runtime = "cudasim";
  context.inputs = {"a.csv", "-"};
  context.allocators = {{"cub", "cub", "bin_growth:8"}, {"nocache", "nocache", ""}};
  context.capacity_factor = 1.02;
  context.min_capacity = true;
  std::ostringstream out;
  write_json(context, {sample_report()}, out);
  const Json root = JsonReader(out.str()).read();
  std::set<std::string> root_keys;
  for (const auto& [key, value] : root.object) root_keys.insert(key);
  EXPECT_EQ(root_keys, (std::set<std::string>{"context", "traces"}));
  const Json& c = root.at("context");
  EXPECT_EQ(c.at("tool").text, "cudacache-replay");
  EXPECT_EQ(c.at("version").text, "9.8.7");
  EXPECT_EQ(c.at("date").text, "2025-01-31T12:34:56Z");
  EXPECT_EQ(c.at("host_name").text, "host\"1");
  EXPECT_EQ(c.at("num_cpus").number, 16);
  EXPECT_EQ(c.at("cuda_runtime").text, "cudasim");
  ASSERT_EQ(c.at("inputs").array.size(), 2u);
  EXPECT_EQ(c.at("inputs").array[1].text, "-");
  const auto& allocators = c.at("allocators").array;
  ASSERT_EQ(allocators.size(), 2u);
  EXPECT_EQ(allocators[0].at("name").text, "cub");
  EXPECT_EQ(allocators[0].at("kind").text, "cub");
  EXPECT_EQ(allocators[0].at("config").text, "bin_growth:8");
  EXPECT_EQ(allocators[1].at("config").text, "");
  EXPECT_EQ(c.at("capacity_bytes").type, Json::Type::kNull);
  EXPECT_DOUBLE_EQ(c.at("capacity_factor").number, 1.02);
  EXPECT_TRUE(c.at("min_capacity").boolean);
  // The traces are what write_json without a context writes.
  std::ostringstream plain;
  write_json({sample_report()}, plain);
  const Json without = JsonReader(plain.str()).read();
  EXPECT_FALSE(without.has("context"));
  EXPECT_EQ(root.at("traces").array[0].at("results").array.size(),
            without.at("traces").array[0].at("results").array.size());
  EXPECT_NE(out.str().find(plain.str().substr(plain.str().find("\"traces\": ["))),
            std::string::npos)
      << out.str();
}

TEST(Report, HostContextIsFilledIn) {
  RunContext context;
  fill_host_context(context);
  EXPECT_GE(context.num_cpus, 1u);
  EXPECT_FALSE(context.host_name.empty());
  ASSERT_EQ(context.date.size(), 20u) << context.date;  // 2025-01-31T12:34:56Z
  for (std::size_t i : {4u, 7u}) EXPECT_EQ(context.date[i], '-') << context.date;
  EXPECT_EQ(context.date[10], 'T');
  EXPECT_EQ(context.date[19], 'Z');
}

TEST(Report, FormatsBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(23374118352ull), "21.77 GiB");
}

}  // namespace
}  // namespace cudacache::replay
