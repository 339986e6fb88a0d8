// bench_replay: time per event of every replay allocator on every real trace.
//
//   bench_replay --traces=DIR [--allocators=LIST] [benchmark flags]
//   (or CUDACACHE_TRACES_DIR=DIR bench_replay ...)
//
// One benchmark per (trace, allocator), for every DIR/*.csv and the in-process allocators that
// bench/results.sh compares (default: cudacache, pytorch, pytorch-expandable, cub, nocache;
// --allocators=LIST, comma-separated, picks others). Each iteration replays the whole
// trace through a fresh allocator with replay_trace(), which times the event loop alone; that
// time is fed to UseManualTime, so allocator construction, teardown and the release of blocks
// left live stay out of the figure without the cost of PauseTiming/ResumeTiming.
//
// Like cudacache-replay it re-executes itself on cudasim (the simulated runtime): it
// measures CPU work (the allocators' and cudasim's), not a GPU. Run it on a Release build:
// cmake --build <dir> --target run_bench_replay.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "replay_allocator.h"
#include "replayer.h"
#include "simulated_device.h"
#include "torch_allocator.h"
#include "trace.h"
#include "trace_csv.h"

namespace {

using namespace cudacache::replay;
namespace fs = std::filesystem;

constexpr std::string_view kTracesFlag = "--traces=";
constexpr std::string_view kAllocatorsFlag = "--allocators=";
constexpr const char* kTracesVariable = "CUDACACHE_TRACES_DIR";

// The device cudacache-replay gives a trace by default: 80 GiB, or 8x the peak requested
// bytes when that is larger, so that no allocator is ever refused and an OOM cannot cut a
// replay short.
std::uint64_t never_refusing_capacity(const Trace& trace) {
  constexpr std::uint64_t kFloor = std::uint64_t{80} << 30;
  constexpr std::uint64_t kHeadroom = 8;
  const std::uint64_t scaled = (trace.peak_requested_bytes * kHeadroom + kCapacityResolution - 1) /
                               kCapacityResolution * kCapacityResolution;
  return std::max(kFloor, scaled);
}

void replay_benchmark(benchmark::State& state, const Trace& trace, const std::string& allocator) {
  // A real GPU cannot be resized: there the replay runs on whatever the device has.
  std::optional<std::uint64_t> capacity;
  if (running_on_simulator()) capacity = never_refusing_capacity(trace);

  double replay_seconds = 0.0;
  double allocator_seconds = 0.0;
  ReplayResult last;
  for (auto _ : state) {
    try {
      last = replay_trace(trace, allocator, capacity);
    } catch (const std::exception& error) {
      // A runtime failure (say, memory left allocated) fails this benchmark, not the others.
      state.SkipWithError(error.what());
      break;
    }
    if (last.oom) {
      state.SkipWithError(("out of memory: " + last.oom_message).c_str());
      break;
    }
    state.SetIterationTime(last.seconds);
    replay_seconds += last.seconds;
    allocator_seconds += last.allocator_seconds();
  }
  if (state.error_occurred()) return;

  const auto events = static_cast<double>(trace.events.size());
  const auto iterations = static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(trace.events.size()));
  state.counters["events"] = events;
  state.counters["ns_per_event"] = replay_seconds * 1e9 / (iterations * events);
  // The same loop without the time inside cudasim's device calls (cudasim_thread_call_ns):
  // the allocator's own work. cudasim's cost per call (an mmap per VMM call) is not a GPU's;
  // what the calls would cost on a GPU is the replay's estimated device-call time.
  if (last.simulator_call_seconds) {
    state.counters["allocator_ns_per_event"] = allocator_seconds * 1e9 / (iterations * events);
  }
  // Same for every iteration (the replay is deterministic); lets a reader check that the
  // benchmark replayed what cudacache-replay reports: device_calls is the total of every kind
  // (the sum of cudacache-replay's "device_calls" object), device_mallocs_frees its
  // device_mallocs + device_frees.
  if (last.device_calls) {
    state.counters["device_calls"] = static_cast<double>(last.device_calls->total());
  }
  if (last.device_mallocs && last.device_frees) {
    state.counters["device_mallocs_frees"] =
        static_cast<double>(*last.device_mallocs + *last.device_frees);
  }
}

// Removes every `flag`VALUE from argv (Google Benchmark rejects flags it does not know) and
// returns the last VALUE, or nothing.
std::optional<std::string> take_flag(int& argc, char** argv, std::string_view flag) {
  std::optional<std::string> value;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with(flag)) {
      value = std::string(arg.substr(flag.size()));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  return value;
}

// --traces=DIR, or the environment variable's value, or nothing.
std::optional<std::string> take_traces_dir(int& argc, char** argv) {
  std::optional<std::string> dir = take_flag(argc, argv, kTracesFlag);
  if (!dir) {
    if (const char* value = std::getenv(kTracesVariable); value != nullptr && *value != '\0') {
      dir = value;
    }
  }
  return dir;
}

// The allocators bench/results.sh replays in-process: the default comparison plus
// pytorch-expandable (when the cudacache adapter is built).
std::vector<std::string> benchmarked_allocators() {
  std::vector<std::string> names = default_allocator_names();
  if (cudacache_adapter_built()) {
    const auto pytorch = std::find(names.begin(), names.end(), "pytorch");
    names.insert(pytorch == names.end() ? names.end() : pytorch + 1, "pytorch-expandable");
  }
  return names;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) names.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return names;
}

void print_help() {
  std::cout << "bench_replay --traces=DIR [--allocators=LIST] [benchmark flags]\n"
               "  Times every replay allocator on every DIR/*.csv (the real traces are in\n"
               "  ../shared/traces); "
            << kTracesVariable
            << " stands in for --traces. LIST: comma-separated in-process\n"
               "  allocators of cudacache-replay (cudacache:CONF configs without commas);\n"
               "  default: ";
  const std::vector<std::string> names = benchmarked_allocators();
  for (std::size_t i = 0; i < names.size(); ++i) std::cout << (i == 0 ? "" : ",") << names[i];
  std::cout << ".\n\n";
  benchmark::PrintDefaultHelp();
}

std::vector<fs::path> trace_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".csv")
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  // Before argv is edited: the re-executed process must see the same command line.
  reexec_on_simulator(BENCH_REPLAY_CUDASIM_DIR, argv);
  const std::optional<std::string> traces_dir = take_traces_dir(argc, argv);
  const std::optional<std::string> allocator_list = take_flag(argc, argv, kAllocatorsFlag);
  benchmark::Initialize(&argc, argv, print_help);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;

  std::error_code error;
  if (!traces_dir || !fs::is_directory(*traces_dir, error)) {
    std::cerr << "bench_replay: "
              << (traces_dir ? "traces folder '" + *traces_dir + "' not found"
                             : std::string("no traces folder given"))
              << ": pass --traces=DIR (the real traces are in ../shared/traces) or set "
              << kTracesVariable << "\n";
    return 2;
  }
  const std::vector<fs::path> files = trace_files(*traces_dir);
  if (files.empty()) {
    std::cerr << "bench_replay: no *.csv trace in '" << *traces_dir << "'\n";
    return 2;
  }

  const std::vector<std::string> allocators =
      allocator_list ? split_list(*allocator_list) : benchmarked_allocators();
  for (const std::string& allocator : allocators) {
    if (is_torch_allocator(allocator)) {
      std::cerr << "bench_replay: " << allocator
                << " runs in a Python process (tools/torch_replay); bench_replay times only "
                   "in-process allocators\n";
      return 2;
    }
    try {
      validate_allocator_name(allocator);
    } catch (const std::invalid_argument& bad_name) {
      std::cerr << "bench_replay: " << bad_name.what() << "\n";
      return 2;
    }
  }

  // Loaded once, before any benchmark runs; the benchmarks hold references to them.
  std::vector<std::unique_ptr<Trace>> traces;
  try {
    for (const fs::path& file : files) {
      traces.push_back(std::make_unique<Trace>(read_trace_csv(file.string())));
    }
  } catch (const TraceError& bad_trace) {
    std::cerr << "bench_replay: " << bad_trace.what() << "\n";
    return 2;
  }

  benchmark::AddCustomContext("cuda_runtime", running_on_simulator() ? "cudasim" : "real");
  benchmark::AddCustomContext("traces_dir", fs::absolute(*traces_dir).string());
  for (const std::unique_ptr<Trace>& trace : traces) {
    for (const std::string& allocator : allocators) {
      const std::string name = "replay/" + trace->name + "/" + allocator;
      benchmark::RegisterBenchmark(name.c_str(),
                                   [trace = trace.get(), allocator](benchmark::State& state) {
                                     replay_benchmark(state, *trace, allocator);
                                   })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
