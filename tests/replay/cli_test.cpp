// cudacache-replay as a user runs it: exit codes, messages, files it writes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "device_call_costs.h"
#include "json_test_reader.h"
#include "pickle_builder.h"
#include "replay_allocator.h"
#include "trace_csv.h"

namespace cudacache::replay {
namespace {

using testing::Json;
using testing::JsonReader;

struct ToolRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

ToolRun run_tool(const std::string& arguments, const std::string& environment = "") {
  const std::string command = environment + " '" CUDACACHE_REPLAY_EXE "' " + arguments + " 2>&1";
  ToolRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) run.output.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// stdout and stderr apart, for the outputs that `-` sends to stdout.
struct SplitRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

SplitRun run_tool_split(const std::string& arguments, const std::string& stderr_path) {
  const std::string command =
      "'" CUDACACHE_REPLAY_EXE "' " + arguments + " 2>'" + stderr_path + "'";
  SplitRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) run.out.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.err = read_file_bytes(stderr_path);
  return run;
}

// A file in a folder of this test's own, removed at the end.
class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("cudacache_replay_cli_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& content) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

const char* const kSmallTrace =
    "op,id,size,stream\nalloc,0,2621440,0\nalloc,1,1048576,0\nfree,0,2621440,0\nfree,1,1048576,0\n";

// The first allocator's result on the first trace of a --json file.
Json first_result(const std::string& json_file) {
  return JsonReader(read_file_bytes(json_file))
      .read()
      .at("traces")
      .array.at(0)
      .at("results")
      .array.at(0);
}

TEST_F(Cli, HelpDescribesTheTool) {
  const ToolRun run = run_tool("--help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.output.find("usage: cudacache-replay"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--min-capacity"), std::string::npos);
}

TEST_F(Cli, HelpListsEveryAllocator) {
  const ToolRun run = run_tool("--help");
  EXPECT_EQ(run.exit_code, 0);
  for (const char* name : {"cudacache:CONF", "pytorch ", "pytorch-expandable", "cub", "nocache",
                           "torch-native", "torch-expandable"}) {
    EXPECT_NE(run.output.find(std::string("\n  ") + name), std::string::npos) << name;
  }
  EXPECT_NE(run.output.find("est. call time"), std::string::npos) << run.output;
}

TEST_F(Cli, BadOptionIsExitTwoWithAMessage) {
  const ToolRun run = run_tool("--bogus");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("unknown option '--bogus'"), std::string::npos) << run.output;
}

TEST_F(Cli, PrintConfigShowsEffectiveOptionsFromTheEnvironment) {
  const ToolRun defaults = run_tool("--print-config", "CUDACACHE_CONF=");
  EXPECT_EQ(defaults.exit_code, 0) << defaults.output;
  EXPECT_NE(defaults.output.find("max_split_size_mb = unlimited"), std::string::npos)
      << defaults.output;
  EXPECT_NE(defaults.output.find("record_history"), std::string::npos);

  const ToolRun configured = run_tool("--print-config", "CUDACACHE_CONF=max_split_size_mb:64");
  EXPECT_EQ(configured.exit_code, 0) << configured.output;
  EXPECT_NE(configured.output.find("max_split_size_mb = 64"), std::string::npos)
      << configured.output;

  const ToolRun bad = run_tool("--print-config", "CUDACACHE_CONF=max_split_mb:64");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("max_split_mb"), std::string::npos) << bad.output;
}

TEST_F(Cli, BadValuesAreExitTwo) {
  EXPECT_EQ(run_tool("--allocators nocache,tcmalloc").exit_code, 2);
  EXPECT_NE(run_tool("--allocators tcmalloc").output.find("unknown allocator 'tcmalloc'"),
            std::string::npos);
  EXPECT_NE(run_tool("--capacity 12XB").output.find("invalid size suffix"), std::string::npos);
  EXPECT_NE(run_tool("--json").output.find("--json needs a value"), std::string::npos);
  EXPECT_NE(run_tool("--convert x.pickle").output.find("--convert needs -o"), std::string::npos);
}

// Tables that cannot be written (a full disk, here /dev/full) fail the run, as --json's and
// --html's write errors do; they exited 0.
TEST_F(Cli, TablesThatCannotBeWrittenFailTheRun) {
  const std::string csv = write("small.csv", kSmallTrace);
  const std::string command = "'" CUDACACHE_REPLAY_EXE "' --allocators nocache '" + csv +
                              "' >/dev/full 2>'" + path("err.txt") + "'";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(read_file_bytes(path("err.txt")).find("<stdout>: write error"), std::string::npos)
      << read_file_bytes(path("err.txt"));
}

// A trace named as the output of --json is refused before anything is written: it used to be
// emptied first, then reported as an empty file.
TEST_F(Cli, AnOutputNamedLikeATraceLeavesTheTraceAlone) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun run = run_tool("--allocators nocache --json " + csv + " " + csv);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("is also a TRACE's input"), std::string::npos) << run.output;
  EXPECT_EQ(read_file_bytes(csv), kSmallTrace);
  const ToolRun empty_value = run_tool("--allocators nocache --json= " + csv);
  EXPECT_EQ(empty_value.exit_code, 2);
  EXPECT_EQ(read_file_bytes(csv), kSmallTrace);
}

TEST_F(Cli, MissingFileIsAClearError) {
  const ToolRun run = run_tool("--allocators nocache " + path("absent.csv"));
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find(path("absent.csv") + ": cannot open file"), std::string::npos)
      << run.output;
}

TEST_F(Cli, MalformedTraceNamesFileAndLine) {
  const std::string csv = write("bad.csv", "op,id,size,stream\nalloc,0,5,0\nfree,0,6,0\n");
  const ToolRun run = run_tool("--allocators nocache " + csv);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find(csv + ":3: free of id 0 with size 6"), std::string::npos) << run.output;
}

TEST_F(Cli, JsonCarriesEveryFigure) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun run =
      run_tool("--allocators nocache,cub --min-capacity --json " + path("out.json") + " " + csv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("== small"), std::string::npos) << run.output;
  const Json root = JsonReader(read_file_bytes(path("out.json"))).read();
  const Json& trace = root.at("traces").array.at(0);
  EXPECT_EQ(trace.at("name").text, "small");
  EXPECT_EQ(trace.at("events").number, 4);
  EXPECT_EQ(trace.at("peak_requested_bytes").number, 3670016);
  const auto& results = trace.at("results").array;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].at("allocator").text, "nocache");
  EXPECT_EQ(results[0].at("peak_reserved_bytes").number, 3670016);
  EXPECT_EQ(results[0].at("min_capacity_bytes").number, 4 << 20);
  EXPECT_EQ(results[0].at("device_mallocs").number, 2);
  EXPECT_EQ(results[0].at("device_frees").number, 2);
  EXPECT_FALSE(results[0].at("oom").boolean);
  EXPECT_EQ(results[1].at("allocator").text, "cub");
  EXPECT_EQ(results[1].at("min_capacity_bytes").number, 6 << 20);
  for (const Json& result : results) {
    for (const char* key : {"peak_allocated_bytes", "peak_reserved_bytes", "min_capacity_bytes",
                            "device_mallocs", "device_frees", "oom", "seconds"}) {
      EXPECT_TRUE(result.has(key)) << key;
    }
    EXPECT_EQ(result.at("seconds").type, Json::Type::kNumber);
    // The part spent inside cudasim's calls: measured (both allocators make device calls),
    // and a part of the loop's time, not more.
    ASSERT_EQ(result.at("simulator_call_seconds").type, Json::Type::kNumber);
    EXPECT_GT(result.at("simulator_call_seconds").number, 0.0);
    EXPECT_LE(result.at("simulator_call_seconds").number, result.at("seconds").number);
  }
}

// Every key a result had before device calls were counted by kind, the two that came with
// them and the simulator's share of the time: nothing renamed, nothing dropped.
TEST_F(Cli, JsonKeysAreTheOldOnesPlusDeviceCalls) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun run =
      run_tool("--allocators nocache,cub --min-capacity --json " + path("out.json") + " " + csv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Json root = JsonReader(read_file_bytes(path("out.json"))).read();
  const Json& trace = root.at("traces").array.at(0);
  std::set<std::string> trace_keys;
  for (const auto& [key, value] : trace.object) trace_keys.insert(key);
  EXPECT_EQ(trace_keys,
            (std::set<std::string>{"name", "events", "allocs", "frees", "empty_cache_calls",
                                   "streams", "peak_requested_bytes", "results"}));
  const std::set<std::string> expected{"allocator",
                                       "peak_allocated_bytes",
                                       "peak_reserved_bytes",
                                       "reserved_over_requested",
                                       "device_peak_bytes",
                                       "min_capacity_bytes",
                                       "min_capacity_over_requested",
                                       "device_mallocs",
                                       "device_frees",
                                       "device_calls",
                                       "estimated_device_call_seconds",
                                       "capacity_bytes",
                                       "oom",
                                       "oom_event_index",
                                       "oom_message",
                                       "min_capacity_replays",
                                       "events_replayed",
                                       "seconds",
                                       "simulator_call_seconds",
                                       "events_per_second",
                                       "split_time",
                                       "intact_stamps"};
  for (const Json& result : trace.at("results").array) {
    std::set<std::string> keys;
    for (const auto& [key, value] : result.object) keys.insert(key);
    EXPECT_EQ(keys, expected) << result.at("allocator").text;
    // No out of memory here; --min-capacity searched.
    EXPECT_EQ(result.at("oom_message").type, Json::Type::kNull) << result.at("allocator").text;
    EXPECT_GE(result.at("min_capacity_replays").number, 1) << result.at("allocator").text;
  }
}

// --split-time: nocache calls the device on each of the small trace's 4 events; without the flag
// split_time is null.
TEST_F(Cli, SplitTimeCountsTheEventsThatCalledTheDevice) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun run =
      run_tool("--allocators nocache --split-time --json " + path("split.json") + " " + csv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("nocache: "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(" in 4 events with device calls, - in 0 without"), std::string::npos)
      << run.output;
  // A copy: first_result returns a temporary, and a reference into it would dangle.
  const Json split = first_result(path("split.json")).at("split_time");
  EXPECT_EQ(split.at("calling_events").number, 4);
  EXPECT_EQ(split.at("other_events").number, 0);
  EXPECT_GT(split.at("calling_seconds").number, 0);
  ASSERT_EQ(run_tool("--allocators nocache --json " + path("plain.json") + " " + csv).exit_code, 0);
  EXPECT_EQ(first_result(path("plain.json")).at("split_time").type, Json::Type::kNull);
}

// --check-contents: every allocator's stamps are read back (the line under the table and
// intact_stamps in the JSON); without the flag intact_stamps is null.
TEST_F(Cli, CheckContentsReportsTheStampsReadBack) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun run = run_tool("--allocators nocache,cub --check-contents --json " +
                               path("checked.json") + " " + csv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("   nocache: contents checked, "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("   cub: contents checked, "), std::string::npos) << run.output;
  EXPECT_GE(first_result(path("checked.json")).at("intact_stamps").number,
            4);  // 2 per block at least
  ASSERT_EQ(run_tool("--allocators nocache --json " + path("plain.json") + " " + csv).exit_code, 0);
  EXPECT_EQ(first_result(path("plain.json")).at("intact_stamps").type, Json::Type::kNull);
}

// cudasim counts every call by kind: on the small trace nocache makes one cudaMalloc per alloc
// and one cudaFree per free; CUB caches the 1 MiB block in its 2 MiB bin (not freed) and
// cudaFree's the 2.5 MiB block (above its largest bin) at once. Nothing else is called.
TEST_F(Cli, JsonCountsDeviceCallsByKindAndCostsThem) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun run = run_tool("--allocators nocache,cub --json " + path("out.json") + " " + csv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Json root = JsonReader(read_file_bytes(path("out.json"))).read();
  const auto& results = root.at("traces").array.at(0).at("results").array;
  ASSERT_EQ(results.size(), 2u);
  const std::map<std::string, std::map<std::string, int>> expected{
      {"nocache", {{"malloc", 2}, {"free", 2}}},
      {"cub", {{"malloc", 2}, {"free", 1}}},
  };
  for (const Json& result : results) {
    const std::string& name = result.at("allocator").text;
    SCOPED_TRACE(name);
    const Json& calls = result.at("device_calls");
    ASSERT_EQ(calls.type, Json::Type::kObject);
    ASSERT_EQ(calls.object.size(), kDeviceCallKinds);
    double expected_us = 0.0;
    for (const DeviceCallCost& cost : device_call_costs()) {
      const std::string key(cost.key);
      const auto it = expected.at(name).find(key);
      const int count = it == expected.at(name).end() ? 0 : it->second;
      EXPECT_EQ(calls.at(key).number, count) << key;
      expected_us += count * cost.microseconds;
    }
    // Written with 9 significant digits.
    EXPECT_NEAR(result.at("estimated_device_call_seconds").number, expected_us * 1e-6,
                expected_us * 1e-6 * 1e-8);
    // The successful mallocs and frees agree with the calls here (none failed).
    EXPECT_EQ(result.at("device_mallocs").number, calls.at("malloc").number);
    EXPECT_EQ(result.at("device_frees").number, calls.at("free").number);
  }
}

TEST_F(Cli, TableShowsDeviceCallsAndTheirEstimatedTime) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun run = run_tool("--allocators nocache,cub " + csv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("device calls"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("est. call time"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("device calls by kind"), std::string::npos) << run.output;
  const std::size_t header = run.output.find(
      "malloc  free  create  release  map  unmap  set_access  synchronize  reserve  "
      "address_free  mem_get_info  total  est. time");
  ASSERT_NE(header, std::string::npos) << run.output;
  // nocache: 2 cudaMalloc + 2 cudaFree, costed by the table.
  DeviceCalls nocache;
  nocache[DeviceCallKind::kMalloc] = 2;
  nocache[DeviceCallKind::kFree] = 2;
  char estimate[32];
  std::snprintf(estimate, sizeof estimate, "%.1f us", nocache.estimated_seconds() * 1e6);
  const std::size_t row = run.output.find("   nocache ", header);
  ASSERT_NE(row, std::string::npos) << run.output;
  const std::string line = run.output.substr(row, run.output.find('\n', row) - row);
  std::istringstream cells(line);
  std::vector<std::string> words{std::istream_iterator<std::string>(cells), {}};
  const std::vector<std::string> counts{"nocache", "2", "2", "0", "0", "0", "0",
                                        "0",       "0", "0", "0", "0", "4"};
  ASSERT_GT(words.size(), counts.size()) << line;
  EXPECT_EQ(std::vector<std::string>(words.begin(), words.begin() + 13), counts) << line;
  EXPECT_NE(line.find(estimate), std::string::npos) << line << " / " << estimate;
}

TEST_F(Cli, CapacityCausesAnOomThatIsReportedNotFatal) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun run =
      run_tool("--allocators nocache --capacity 3MiB --json " + path("out.json") + " " + csv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("event 2/4"), std::string::npos) << run.output;
  const Json result = first_result(path("out.json"));
  EXPECT_TRUE(result.at("oom").boolean);
  EXPECT_EQ(result.at("oom_event_index").number, 1);
  EXPECT_EQ(result.at("capacity_bytes").number, 3 << 20);
}

TEST_F(Cli, CapacityFactorScalesEachTracesPeakToWholeSteps) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun run =
      run_tool("--allocators nocache --capacity-factor 1.3 --json " + path("out.json") + " " + csv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Json trace = JsonReader(read_file_bytes(path("out.json"))).read().at("traces").array.at(0);
  const double peak = trace.at("peak_requested_bytes").number;
  const double step = 2 << 20;
  const double expected = std::ceil(peak * 1.3 / step) * step;
  EXPECT_EQ(trace.at("results").array.at(0).at("capacity_bytes").number, expected);
  EXPECT_EQ(run_tool("--capacity-factor 0 " + csv).exit_code, 2);
  EXPECT_EQ(run_tool("--capacity-factor nan " + csv).exit_code, 2);
  const ToolRun both = run_tool("--capacity 1GiB --capacity-factor 1.02 " + csv);
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.output.find("exclude each other"), std::string::npos) << both.output;
}

// Issue 12, defect 6: 8 x a huge peak wrapped around to a small default device. The default
// stops at the largest device cudasim can hold, 16 TiB (kLargestSimulatedDevice).
TEST_F(Cli, DefaultCapacitySaturatesForHugePeaks) {
  const std::string csv = write("huge.csv", "op,id,size,stream\nalloc,0,4611686018427387904,0\n");
  const ToolRun run = run_tool("--allocators nocache --json " + path("out.json") + " " + csv);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Json result = first_result(path("out.json"));
  EXPECT_EQ(result.at("capacity_bytes").number, 17592186044416.0);  // 16 TiB
  EXPECT_TRUE(result.at("oom").boolean);                            // 2^62 bytes do not fit
  const std::string sum = write("sum.csv",
                                "op,id,size,stream\nalloc,0,9223372036854775808,0\n"
                                "alloc,1,9223372036854775808,0\n");
  const ToolRun overflow = run_tool("--allocators nocache " + sum);
  EXPECT_EQ(overflow.exit_code, 2) << overflow.output;
  EXPECT_NE(overflow.output.find("sum.csv"), std::string::npos) << overflow.output;
  EXPECT_NE(overflow.output.find("exceed 2^64"), std::string::npos) << overflow.output;
}

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CUDACACHE_TEST_UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define CUDACACHE_TEST_UNDER_TSAN 1
#endif

// Found in review: a trace of 3 MiB and then 16 TiB had a default device of 128 TiB, whose
// expandable segments cudasim could not reserve: cudacache ran out of memory on the 3 MiB.
TEST_F(Cli, TheDefaultDeviceIsOneTheSimulatorCanReserve) {
#ifdef CUDACACHE_TEST_UNDER_TSAN
  GTEST_SKIP() << "ThreadSanitizer leaves a process far less than 18 TiB of address space";
#endif
  const std::string big =
      write("big.csv", "op,id,size,stream\nalloc,0,3145728,0\nalloc,1,17592186044416,0\n");
  const ToolRun both =
      run_tool("--allocators cudacache,pytorch-expandable --json " + path("big.json") + " " + big);
  ASSERT_EQ(both.exit_code, 0) << both.output;
  EXPECT_EQ(both.output.find("Tried to allocate 3.00 MiB"), std::string::npos) << both.output;
  EXPECT_NE(both.output.find("Tried to allocate 16384.00 GiB"), std::string::npos) << both.output;
}

TEST_F(Cli, ConvertsASnapshotAndReplaysPicklesDirectly) {
  const std::string snapshot =
      write("snap.pickle",
            testing::make_snapshot_pickle(
                {{"alloc", 0x1000, 1000}, {"free_completed", 0x1000, 1000}, {"alloc", 0x2000, 300}},
                {{0x2000, 0, {{0x2000, 300}, {0x9000, 77}}}}));
  const ToolRun convert = run_tool("--convert " + snapshot + " -o " + path("snap.csv"));
  ASSERT_EQ(convert.exit_code, 0) << convert.output;
  EXPECT_EQ(read_file_bytes(path("snap.csv")),
            "op,id,size,stream\nalloc,0,77,0\nalloc,1,1000,0\nfree,1,1000,0\nalloc,2,300,0\n");
  // The pickle itself is a trace too, even under another name (told by its first byte).
  const std::string renamed = write("snap.data", read_file_bytes(snapshot));
  const ToolRun replay =
      run_tool("--allocators nocache --json " + path("out.json") + " " + renamed);
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  const Json trace = JsonReader(read_file_bytes(path("out.json"))).read().at("traces").array.at(0);
  EXPECT_EQ(trace.at("name").text, "snap");
  EXPECT_EQ(trace.at("peak_requested_bytes").number, 1077);
}

TEST_F(Cli, ConvertsARealSnapshotToItsCsv) {
  const std::string traces = CUDACACHE_TRACES_DIR;
  const std::string pickle = traces + "/raw/dit_text_diffusion_train_oom.pickle";
  if (!std::filesystem::exists(pickle)) GTEST_SKIP() << "traces not found in " << traces;
  const ToolRun run = run_tool("--convert " + pickle + " -o " + path("dit.csv"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("871 rows (0 prelude"), std::string::npos) << run.output;
  EXPECT_TRUE(read_file_bytes(path("dit.csv")) ==
              read_file_bytes(traces + "/dit_text_diffusion_train_oom.csv"));
}

// Every real trace through every in-process allocator under pressure (a device of 1.02 x the
// peak, where pages move and the out-of-memory ladder runs), and through cudacache's policy on
// the default device too (where it moves pages to keep what it holds near what is used), with
// every block stamped and read back (Note [Checked contents]): no allocator may hand out a byte
// twice or lose one under a live block. (The smallest-device searches, checked, take about 15
// minutes: by hand, README "Tests".)
TEST_F(Cli, RealTracesKeepEveryBlockIntactOnEveryAllocator) {
  const std::filesystem::path traces = CUDACACHE_TRACES_DIR;
  std::string csvs;
  std::size_t trace_count = 0;
  if (std::filesystem::is_directory(traces)) {
    for (const auto& entry : std::filesystem::directory_iterator(traces)) {
      if (entry.path().extension() != ".csv") continue;
      csvs += " " + entry.path().string();
      ++trace_count;
    }
  }
  if (trace_count == 0) GTEST_SKIP() << "traces not found in " << traces;
  const bool cudacache = cudacache_adapter_built();
  const std::vector<std::pair<std::string, std::size_t>> runs{
      {cudacache ? "cub,nocache,cudacache,pytorch,pytorch-expandable --capacity-factor 1.02"
                 : "cub,nocache --capacity-factor 1.02",
       cudacache ? 5 : 2},
      {cudacache ? "cudacache" : "", 1}};
  for (const auto& [options, allocators] : runs) {
    if (options.empty()) continue;
    const ToolRun run = run_tool("--check-contents --allocators " + options + csvs);
    ASSERT_EQ(run.exit_code, 0) << options << run.output;
    std::size_t checked = 0;
    for (std::size_t at = run.output.find(": contents checked, "); at != std::string::npos;
         at = run.output.find(": contents checked, ", at + 1)) {
      ++checked;
    }
    EXPECT_EQ(checked, allocators * trace_count) << options << run.output;
  }
}

TEST_F(Cli, APickleNameWithoutAPickleIsAnError) {
  const std::string fake = write("fake.pickle", kSmallTrace);
  const ToolRun run = run_tool("--allocators nocache " + fake);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find(fake + ": byte offset 0: not a snapshot pickle"), std::string::npos)
      << run.output;
}

// A CSV given to --convert is refused for what it is, not for the first of its bytes that
// happens to be a pickle opcode the reader does not take.
TEST_F(Cli, ConvertRefusesAFileThatIsNoPickle) {
  const std::string csv = write("trace.csv", kSmallTrace);
  const ToolRun run = run_tool("--convert " + csv + " -o " + path("out.csv"));
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find(csv + ": byte offset 0: not a snapshot pickle"), std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("opcode"), std::string::npos) << run.output;
  EXPECT_FALSE(std::filesystem::exists(path("out.csv")));
}

// The cudacache allocators replay with the options their names give: a CUDACACHE_CONF left in
// the environment is named as unused rather than silently ignored.
TEST_F(Cli, ACudacacheConfInTheEnvironmentIsNamedAsUnused) {
  const std::string csv = write("small.csv", kSmallTrace);
  if (cudacache_adapter_built()) {
    const ToolRun run = run_tool("--allocators nocache,cudacache " + csv,
                                 "env CUDACACHE_CONF=max_split_size_mb:20");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("CUDACACHE_CONF is set but not used"), std::string::npos)
        << run.output;
  }
  const ToolRun plain =
      run_tool("--allocators nocache,cub " + csv, "env CUDACACHE_CONF=max_split_size_mb:20");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("CUDACACHE_CONF"), std::string::npos) << plain.output;
}

TEST_F(Cli, HostilePickleIsRefusedWithItsOffset) {
  // os.system("id"), as a malicious pickle would spell it.
  constexpr char kEvil[] = "\x80\x04\x63os\nsystem\n\x8c\x02id\x85R.";
  const std::string evil = write("evil.pickle", std::string(kEvil, sizeof kEvil - 1));
  const ToolRun run = run_tool("--convert " + evil + " -o " + path("out.csv"));
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find(evil + ": byte offset 2: unexpected type: opcode GLOBAL"),
            std::string::npos)
      << run.output;
  EXPECT_FALSE(std::filesystem::exists(path("out.csv")));
}

TEST_F(Cli, SyntheticWorkloadWithoutTraces) {
  const ToolRun run =
      run_tool("--allocators nocache,cub --synthetic layers:2,hidden:64,seq:16,batch:2,vocab:100");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("synthetic: transformer training (2 layers, hidden 64"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("nocache"), std::string::npos);
  EXPECT_NE(run.output.find("cub"), std::string::npos);
}

// Without cudasim on LD_LIBRARY_PATH the tool re-executes itself onto it...
TEST_F(Cli, FindsCudasimByItself) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun run = run_tool("--allocators nocache --json " + path("out.json") + " " + csv,
                               "env -u LD_LIBRARY_PATH");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find("not running on cudasim"), std::string::npos) << run.output;
  const Json result = first_result(path("out.json"));
  EXPECT_EQ(result.at("device_mallocs").number, 2);
}

// ...and with --real-gpu it stays on NVIDIA's runtime, where a device cannot be resized.
TEST_F(Cli, RealGpuRefusesCapacityOptions) {
  const std::string csv = write("small.csv", kSmallTrace);
  ToolRun run = run_tool("--real-gpu --capacity 1GiB " + csv, "env -u LD_LIBRARY_PATH");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("--capacity needs the simulated runtime (cudasim)"), std::string::npos)
      << run.output;
  run = run_tool("--real-gpu --capacity-factor 1.02 " + csv, "env -u LD_LIBRARY_PATH");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--capacity-factor needs the simulated runtime"), std::string::npos)
      << run.output;
  run = run_tool("--real-gpu --min-capacity " + csv, "env -u LD_LIBRARY_PATH");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("--min-capacity needs the simulated runtime"), std::string::npos)
      << run.output;
  run = run_tool("--real-gpu --split-time " + csv, "env -u LD_LIBRARY_PATH");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("--split-time needs the simulated runtime"), std::string::npos)
      << run.output;
}

// Issue 13: --version, and --help saying how values, stdin and stdout are given.
TEST_F(Cli, VersionPrintsTheProjectVersion) {
  const ToolRun run = run_tool("--version");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.output, "cudacache-replay " CUDACACHE_PROJECT_VERSION "\n");
  const ToolRun help = run_tool("--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* text : {"--version", "--opt=VALUE", "a TRACE of - is read from stdin",
                           "--json - the JSON goes to stdout", "- for stdout"}) {
    EXPECT_NE(help.output.find(text), std::string::npos) << text << "\n" << help.output;
  }
}

// The same run spelt --opt value and --opt=value gives the same figures.
TEST_F(Cli, EqualsFormGivesTheSameReplay) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun separate =
      run_tool("--allocators nocache,cub --capacity 3MiB --min-capacity --json " +
               path("separate.json") + " " + csv);
  ASSERT_EQ(separate.exit_code, 0) << separate.output;
  const ToolRun joined = run_tool(
      "--allocators=nocache,cub --capacity=3MiB --min-capacity --json=" + path("joined.json") +
      " " + csv);
  ASSERT_EQ(joined.exit_code, 0) << joined.output;
  const Json a = JsonReader(read_file_bytes(path("separate.json"))).read();
  const Json b = JsonReader(read_file_bytes(path("joined.json"))).read();
  const auto& results_a = a.at("traces").array.at(0).at("results").array;
  const auto& results_b = b.at("traces").array.at(0).at("results").array;
  ASSERT_EQ(results_a.size(), 2u);
  ASSERT_EQ(results_b.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    for (const char* key : {"allocator", "capacity_bytes", "min_capacity_bytes", "oom_event_index",
                            "peak_reserved_bytes"}) {
      const Json& x = results_a[i].at(key);
      const Json& y = results_b[i].at(key);
      EXPECT_EQ(x.type, y.type) << key;
      EXPECT_EQ(x.number, y.number) << key;
      EXPECT_EQ(x.text, y.text) << key;
    }
  }
  EXPECT_EQ(results_b[0].at("capacity_bytes").number, 3 << 20);
  EXPECT_TRUE(results_b[0].at("oom").boolean);  // nocache needs 3.5 MiB
  EXPECT_EQ(results_b[1].at("allocator").text, "cub");
}

TEST_F(Cli, DashReadsTheTraceFromStdin) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun run =
      run_tool("--allocators nocache --json " + path("out.json") + " - < '" + csv + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("== stdin"), std::string::npos) << run.output;
  const Json trace = JsonReader(read_file_bytes(path("out.json"))).read().at("traces").array.at(0);
  EXPECT_EQ(trace.at("name").text, "stdin");
  EXPECT_EQ(trace.at("events").number, 4);
  EXPECT_EQ(trace.at("peak_requested_bytes").number, 3670016);
  // Errors in it name <stdin> and the line.
  const std::string bad = write("bad.csv", "op,id,size,stream\nalloc,0,5,0\nfree,0,6,0\n");
  const ToolRun malformed = run_tool("--allocators nocache - < '" + bad + "'");
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_NE(malformed.output.find("<stdin>:3: free of id 0 with size 6"), std::string::npos)
      << malformed.output;
  // A pickle on stdin is told by its first byte too.
  const std::string snapshot =
      write("snap.pickle", testing::make_snapshot_pickle({{"alloc", 0x1000, 1000}}, {}));
  const ToolRun pickle =
      run_tool("--allocators nocache --json " + path("p.json") + " - < '" + snapshot + "'");
  ASSERT_EQ(pickle.exit_code, 0) << pickle.output;
  EXPECT_EQ(first_result(path("p.json")).at("peak_allocated_bytes").number, 1000);
}

TEST_F(Cli, JsonDashGoesToStdoutAndTheTablesToStderr) {
  const std::string csv = write("small.csv", kSmallTrace);
  const SplitRun run = run_tool_split("--allocators nocache --json - " + csv, path("err.txt"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Json root = JsonReader(run.out).read();  // stdout is the JSON and nothing else
  EXPECT_EQ(root.at("traces").array.at(0).at("name").text, "small");
  EXPECT_NE(run.err.find("== small"), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists("-"));
}

TEST_F(Cli, ConvertReadsStdinAndWritesStdout) {
  const std::string snapshot =
      write("snap.pickle",
            testing::make_snapshot_pickle(
                {{"alloc", 0x1000, 1000}, {"free_completed", 0x1000, 1000}, {"alloc", 0x2000, 300}},
                {{0x2000, 0, {{0x2000, 300}, {0x9000, 77}}}}));
  const SplitRun run = run_tool_split("--convert - -o - < '" + snapshot + "'", path("err.txt"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out,
            "op,id,size,stream\nalloc,0,77,0\nalloc,1,1000,0\nfree,1,1000,0\nalloc,2,300,0\n");
  EXPECT_NE(run.err.find("converted <stdin> -> <stdout>: 4 rows"), std::string::npos) << run.err;
}

// What a conversion repairs is said on stderr, not only counted: a free of another size than
// its allocation, an allocation at an address still allocated.
TEST_F(Cli, ConvertSaysWhatItRepaired) {
  const std::string snapshot = write(
      "repaired.pickle",
      testing::make_snapshot_pickle({{"alloc", 0x1000, 100}, {"free_completed", 0x1000, 200}}, {}));
  const SplitRun run =
      run_tool_split("--convert '" + snapshot + "' -o " + path("out.csv"), path("err.txt"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("warning: 1 free(s) of another size than their allocation"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("still allocated"), std::string::npos) << run.err;
  const std::string clean = write(
      "clean.pickle",
      testing::make_snapshot_pickle({{"alloc", 0x1000, 100}, {"free_completed", 0x1000, 100}}, {}));
  const SplitRun quiet =
      run_tool_split("--convert '" + clean + "' -o " + path("clean.csv"), path("err2.txt"));
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("warning"), std::string::npos) << quiet.err;
}

// A trace whose file name is not UTF-8 (Latin-1 here) still gives valid JSON: the byte is
// escaped as \u00e9, and the name reads "café".
TEST_F(Cli, JsonOfATraceNamedInAnotherEncodingIsValid) {
  const std::string csv = write("caf\xe9.csv", kSmallTrace);
  const ToolRun run =
      run_tool("--allocators nocache --json " + path("out.json") + " '" + csv + "'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string json = read_file_bytes(path("out.json"));
  EXPECT_EQ(json.find('\xe9'), std::string::npos);
  EXPECT_NE(json.find("\"name\": \"caf\\u00e9\""), std::string::npos) << json.substr(0, 600);
}

TEST_F(Cli, DirectoryIsAClearError) {
  std::filesystem::create_directories(path("traces.d"));
  const ToolRun run = run_tool("--allocators nocache " + path("traces.d"));
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find(path("traces.d") + ": is a directory"), std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("empty file"), std::string::npos) << run.output;
  const ToolRun convert = run_tool("--convert " + path("traces.d") + " -o " + path("out.csv"));
  EXPECT_EQ(convert.exit_code, 2);
  EXPECT_NE(convert.output.find(path("traces.d") + ": is a directory"), std::string::npos)
      << convert.output;
}

TEST_F(Cli, GzipIsAClearError) {
  // printf 'op,id,size,stream\n' | gzip -n: a CSV header, compressed.
  const std::string gz = write(
      "small.csv.gz",
      std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xcb\x2f\xd0\xc9\x4c\xd1\x29\xce\xac"
                  "\x4a\xd5\x29\x2e\x29\x4a\x4d\xcc\xe5\x02\x00\x05\x54\xbe\xb0\x12\x00\x00\x00",
                  38));
  const ToolRun run = run_tool("--allocators nocache " + gz);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find(gz + ": gzip-compressed"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("gunzip -k " + gz), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("bad header"), std::string::npos) << run.output;
  const ToolRun piped = run_tool("--allocators nocache - < '" + gz + "'");
  EXPECT_EQ(piped.exit_code, 2);
  EXPECT_NE(piped.output.find("<stdin>: gzip-compressed"), std::string::npos) << piped.output;
}

// CUDASIM_MALLOC_PAGE (cudaMalloc's memory in pages: a large allocation whole pages, small ones
// sharing the rest) changes what nocache's blocks take on the device, and the JSON says so.
TEST_F(Cli, AMallocPageIsNamedInTheContextAndTakesWholePages) {
  const std::string csv = write("small.csv", kSmallTrace);
  const ToolRun plain = run_tool("--allocators nocache --json " + path("plain.json") + " " + csv,
                                 "env -u CUDASIM_MALLOC_PAGE");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const ToolRun paged = run_tool("--allocators nocache --json " + path("paged.json") + " " + csv,
                                 "CUDASIM_MALLOC_PAGE=2MiB");
  ASSERT_EQ(paged.exit_code, 0) << paged.output;
  // 2.5 MiB and 1 MiB live at once: 3.5 MiB in 256-byte units; in pages, two whole pages for
  // the first (more than half a page), the second in the rest of its last page.
  EXPECT_EQ(first_result(path("plain.json")).at("device_peak_bytes").number, 3670016);
  EXPECT_EQ(first_result(path("paged.json")).at("device_peak_bytes").number, 4194304);
  const auto runtime = [&](const std::string& file) {
    return JsonReader(read_file_bytes(path(file))).read().at("context").at("cuda_runtime").text;
  };
  EXPECT_EQ(runtime("plain.json"), "cudasim");
  EXPECT_EQ(runtime("paged.json"), "cudasim (CUDASIM_MALLOC_PAGE=2MiB)");
}

// The "context" block: what produced the figures, as in Google Benchmark's JSON.
TEST_F(Cli, JsonContextDescribesTheRun) {
  const std::string csv = write("small.csv", kSmallTrace);
  std::string allocators = "nocache,cub";
  if (cudacache_adapter_built()) allocators += ",cudacache:max_split_size_mb:128,pytorch";
  const std::time_t before = std::time(nullptr);
  const ToolRun run = run_tool("--allocators " + allocators + " --capacity-factor 2 --json " +
                               path("out.json") + " " + csv);
  const std::time_t after = std::time(nullptr);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Json root = JsonReader(read_file_bytes(path("out.json"))).read();
  std::set<std::string> root_keys;
  for (const auto& [key, value] : root.object) root_keys.insert(key);
  EXPECT_EQ(root_keys, (std::set<std::string>{"context", "traces"}));
  const Json& context = root.at("context");
  std::set<std::string> keys;
  for (const auto& [key, value] : context.object) keys.insert(key);
  EXPECT_EQ(keys, (std::set<std::string>{"tool", "version", "date", "host_name", "num_cpus",
                                         "cuda_runtime", "inputs", "allocators", "capacity_bytes",
                                         "capacity_factor", "min_capacity"}));
  EXPECT_EQ(context.at("tool").text, "cudacache-replay");
  EXPECT_EQ(context.at("version").text, CUDACACHE_PROJECT_VERSION);
  // ISO 8601 in UTC, between the start and the end of the run.
  const std::string& date = context.at("date").text;
  std::tm parsed{};
  ASSERT_NE(strptime(date.c_str(), "%Y-%m-%dT%H:%M:%SZ", &parsed), nullptr) << date;
  EXPECT_EQ(date.size(), 20u) << date;
  const std::time_t when = timegm(&parsed);
  EXPECT_GE(when, before - 1) << date;
  EXPECT_LE(when, after + 1) << date;
  char host[256] = "";
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(context.at("host_name").text, host);
  EXPECT_GE(context.at("num_cpus").number, 1);
  EXPECT_EQ(context.at("num_cpus").number, std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(context.at("cuda_runtime").text, "cudasim");
  ASSERT_EQ(context.at("inputs").array.size(), 1u);
  EXPECT_EQ(context.at("inputs").array[0].text, csv);
  EXPECT_EQ(context.at("capacity_bytes").type, Json::Type::kNull);
  EXPECT_EQ(context.at("capacity_factor").number, 2);
  EXPECT_FALSE(context.at("min_capacity").boolean);
  const auto& configs = context.at("allocators").array;
  ASSERT_EQ(configs.size(), cudacache_adapter_built() ? 4u : 2u);
  EXPECT_EQ(configs[0].at("name").text, "nocache");
  EXPECT_EQ(configs[0].at("kind").text, "nocache");
  EXPECT_EQ(configs[0].at("config").text, "");
  EXPECT_EQ(configs[1].at("name").text, "cub");
  EXPECT_EQ(configs[1].at("config").text,
            "bin_growth:8,min_bin:3,max_bin:7,max_cached_bytes:unlimited");
  if (cudacache_adapter_built()) {
    // cudacache's effective options, every one of them, as a CUDACACHE_CONF string.
    const std::string& custom = configs[2].at("config").text;
    EXPECT_EQ(configs[2].at("name").text, "cudacache:max_split_size_mb:128");
    EXPECT_EQ(configs[2].at("kind").text, "cudacache");
    EXPECT_TRUE(custom.starts_with("policy:cudacache,")) << custom;
    EXPECT_NE(custom.find("max_split_size_mb:128,"), std::string::npos) << custom;
    EXPECT_NE(custom.find("expandable_segments:False"), std::string::npos) << custom;
    const std::string& pytorch = configs[3].at("config").text;
    EXPECT_EQ(configs[3].at("kind").text, "cudacache");
    EXPECT_TRUE(pytorch.starts_with("policy:pytorch,max_split_size_mb:unlimited")) << pytorch;
  }
  // The traces beside it are unchanged.
  EXPECT_EQ(root.at("traces").array.at(0).at("name").text, "small");
}

}  // namespace
}  // namespace cudacache::replay
