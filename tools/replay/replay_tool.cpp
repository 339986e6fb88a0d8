#include "replay_tool.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include "cudacache_allocator.h"
#include "memory_page.h"
#include "memory_viz_writer.h"
#include "pickle_reader.h"
#include "progress_bar.h"
#include "replayer.h"
#include "report.h"
#include "simulated_device.h"
#include "snapshot_converter.h"
#include "synthetic_workload.h"
#include "torch_allocator.h"
#include "trace_csv.h"

namespace cudacache::replay {
namespace {

// The default simulated device: the simulator's own default size, or 8x the workload's floor
// when that is larger, so that no allocator compared here is ever refused for lack of memory.
constexpr std::uint64_t kDefaultCapacityFloor = std::uint64_t{80} << 30;
constexpr std::uint64_t kDefaultCapacityHeadroom = 8;

std::uint64_t default_capacity(const Trace& trace) {
  const std::uint64_t step = kCapacityResolution;
  // At most the largest simulated device (a trace that needs more runs out of memory there).
  if (trace.peak_requested_bytes > kLargestSimulatedDevice / kDefaultCapacityHeadroom) {
    return kLargestSimulatedDevice;
  }
  const std::uint64_t scaled =
      (trace.peak_requested_bytes * kDefaultCapacityHeadroom + step - 1) / step * step;
  return std::max(kDefaultCapacityFloor, scaled);
}

// F x the trace's peak requested bytes, rounded up to whole capacity steps (at least one).
std::uint64_t scaled_capacity(const Trace& trace, double factor) {
  const std::uint64_t step = kCapacityResolution;
  const double bytes = std::ceil(static_cast<double>(trace.peak_requested_bytes) * factor);
  if (bytes > static_cast<double>(kLargestSimulatedDevice)) {
    throw UsageError("--capacity-factor: the device of " + trace.name +
                     " would be above 16 TiB, the largest device the simulator can hold");
  }
  const auto rounded = (static_cast<std::uint64_t>(bytes) + step - 1) / step * step;
  return std::max(step, rounded);
}

bool has_pickle_name(const std::string& path) {
  return path.ends_with(".pickle") || path.ends_with(".pkl");
}

int convert(const CommandLine& line, std::ostream& stdout_stream) {
  SnapshotConversion conversion = convert_snapshot_file(*line.convert_path, line.device);
  if (*line.output_path == kStdioPath) {
    write_trace_csv(conversion.trace, stdout_stream);
    stdout_stream.flush();
    if (!stdout_stream) throw std::runtime_error("<stdout>: write error");
  } else {
    std::ofstream out(*line.output_path, std::ios::binary);
    if (!out) throw std::runtime_error(*line.output_path + ": cannot open for writing");
    write_trace_csv(conversion.trace, out);
    out.close();
    if (!out) throw std::runtime_error(*line.output_path + ": write error");
  }
  std::cerr << "converted " << input_display_name(*line.convert_path) << " -> "
            << (*line.output_path == kStdioPath ? "<stdout>" : *line.output_path) << ": "
            << conversion.trace.events.size() << " rows (" << conversion.prelude_rows
            << " prelude: " << conversion.prelude_freed_in_trace << " freed in the trace, "
            << conversion.prelude_live_at_dump << " live at the dump), frees at "
            << conversion.free_action << ", " << conversion.segment_release_events
            << " segment releases and " << conversion.oom_events
            << " OOM events not carried as rows\n";
  // What the conversion had to repair is said, not only counted: a snapshot that lost events
  // converts to a trace that only approximates the program.
  if (conversion.realloc_without_free > 0) {
    std::cerr << "warning: " << conversion.realloc_without_free
              << " allocation(s) at an address still allocated (the snapshot lost a free): "
                 "the earlier block is taken as freed there\n";
  }
  if (conversion.alloc_free_size_mismatches > 0) {
    std::cerr << "warning: " << conversion.alloc_free_size_mismatches
              << " free(s) of another size than their allocation: the rows repeat the "
                 "allocation's size\n";
  }
  if (conversion.open_at_end_not_in_segments > 0) {
    std::cerr << "warning: " << conversion.open_at_end_not_in_segments
              << " allocation(s) still open at the end that no segment of the snapshot holds\n";
  }
  return 0;
}

void check_simulator_options(const CommandLine& line) {
  if (running_on_simulator()) return;
  if (line.capacity_bytes) {
    throw UsageError(
        "--capacity needs the simulated runtime (cudasim): a real GPU cannot be resized");
  }
  if (line.capacity_factor) {
    throw UsageError(
        "--capacity-factor needs the simulated runtime (cudasim): a real GPU cannot be resized");
  }
  if (line.min_capacity) {
    throw UsageError(
        "--min-capacity needs the simulated runtime (cudasim): a real GPU cannot be shrunk");
  }
  if (line.split_time) {
    throw UsageError(
        "--split-time needs the simulated runtime (cudasim): it tells events apart by the time "
        "cudasim counts in device calls");
  }
}

TraceReport replay_one(const Trace& trace, const CommandLine& line, ProgressBar& bar) {
  TraceReport report = TraceReport::describe(trace);
  report.min_capacity_searched = line.min_capacity;
  std::optional<std::uint64_t> capacity = line.capacity_bytes;
  if (line.capacity_factor) capacity = scaled_capacity(trace, *line.capacity_factor);
  if (!capacity && running_on_simulator()) capacity = default_capacity(trace);
  for (const std::string& allocator : line.allocators) {
    const std::string label = trace.name + ": " + allocator;
    if (is_torch_allocator(allocator)) {  // the whole replay runs in a PyTorch process
      if (!capacity) throw UsageError(allocator + " runs on cudasim only (not with --real-gpu)");
      bar.update(label + " (PyTorch process)", 0, 1);
      report.results.push_back(replay_with_torch(trace, allocator, *capacity, line.min_capacity));
      continue;
    }
    const ReplayRecording recording{line.html_path.has_value(), kTimelinePoints,
                                    line.memory_viz_dir.has_value(), line.split_time,
                                    line.check_contents};
    ReplayResult result = replay_trace(
        trace, allocator, capacity,
        [&](std::size_t done, std::size_t total) { bar.update(label, done, total); }, recording);
    if (result.snapshot) {
      write_snapshot_pickle(memory_viz_path(*line.memory_viz_dir, trace.name, allocator),
                            *result.snapshot);
      result.snapshot.reset();  // written: not kept for the other traces
    }
    if (line.min_capacity) {
      std::size_t round = 0;
      MinCapacity found = find_min_capacity(
          trace, allocator, capacity.value_or(default_capacity(trace)),
          [&](std::size_t done, std::size_t total) {
            if (done == 0) ++round;
            bar.update(label + " min capacity #" + std::to_string(round), done, total);
          },
          line.check_contents);
      result.min_capacity_bytes = found.bytes;
      result.min_capacity_replays = found.replays;
    }
    report.results.push_back(std::move(result));
  }
  bar.clear();
  return report;
}

}  // namespace

Trace load_trace(const std::string& path, int device) {
  std::string bytes = read_trace_bytes(path);
  const std::string source = input_display_name(path);
  Trace trace;
  if (looks_like_pickle(bytes) || has_pickle_name(path)) {  // the reader refuses a non-pickle
    PickleRef snapshot = parse_pickle(bytes, source);
    trace = std::move(convert_snapshot(*snapshot, device, source).trace);
  } else {
    trace = parse_trace_csv(bytes, source);
  }
  trace.name = trace_name_from_path(path);
  return trace;
}

RunContext make_run_context(const CommandLine& line) {
  RunContext context;
  context.version = tool_version();
  fill_host_context(context);
  context.cuda_runtime = running_on_simulator() ? "cudasim" : "cuda";
  // A simulator that charges cudaMalloc whole pages gives other figures: the JSON says so.
  if (const char* page = std::getenv("CUDASIM_MALLOC_PAGE");
      running_on_simulator() && page != nullptr && page[0] != '\0') {
    context.cuda_runtime += std::string(" (CUDASIM_MALLOC_PAGE=") + page + ")";
  }
  if (line.traces.empty() || line.synthetic_spec) {
    context.inputs.push_back("synthetic:" + line.synthetic_spec.value_or(""));
  }
  for (const std::string& path : line.traces) context.inputs.push_back(path);
  for (const std::string& name : line.allocators) {
    context.allocators.push_back({name, allocator_kind(name), allocator_config_string(name)});
  }
  context.capacity_bytes = line.capacity_bytes;
  context.capacity_factor = line.capacity_factor;
  context.min_capacity = line.min_capacity;
  return context;
}

std::string print_config_text() {
#if CUDACACHE_REPLAY_WITH_CUDACACHE
  const char* config = std::getenv("CUDACACHE_CONF");
  return describe_cudacache_config(config != nullptr ? config : "");
#else
  throw UsageError("--print-config: this cudacache-replay was built without cudacache");
#endif
}

int run_replay_tool(const CommandLine& line, std::ostream& out) {
  if (line.convert_path) return convert(line, out);
  check_simulator_options(line);
  if (!running_on_simulator()) {
    std::cerr << "cudacache-replay: not running on cudasim: replaying on the real CUDA runtime, "
                 "without device counters\n";
  }
  // The cudacache allocators take their options from their names, never from the environment:
  // a CUDACACHE_CONF left set would otherwise look as if it had been replayed.
  const char* environment_config = std::getenv("CUDACACHE_CONF");
  if (environment_config != nullptr && *environment_config != '\0' &&
      std::any_of(line.allocators.begin(), line.allocators.end(),
                  [](const std::string& name) { return allocator_kind(name) == "cudacache"; })) {
    std::cerr << "cudacache-replay: CUDACACHE_CONF is set but not used: the cudacache allocators "
                 "replay with the options their names give (cudacache:CONF); only "
                 "--print-config reads it\n";
  }
  // --json - writes the JSON to `out` (stdout), so the tables go to stderr.
  const bool json_to_stdout = line.json_path && *line.json_path == kStdioPath;
  std::ostream& tables = json_to_stdout ? std::cerr : out;
  std::optional<std::ofstream> json;
  if (line.json_path && !json_to_stdout) {
    json.emplace(*line.json_path);
    if (!*json) throw std::runtime_error(*line.json_path + ": cannot open for writing");
  }
  // Output paths are checked before the replays, which can take long.
  if (line.html_path) check_writable_file(*line.html_path);
  if (line.memory_viz_dir) prepare_memory_viz_directory(*line.memory_viz_dir);
  // Taken before the replays: the date is when the run started.
  const RunContext context = make_run_context(line);

  ProgressBar bar;
  std::vector<TraceReport> reports;
  std::vector<std::string> sources;  // what the page names each trace's input
  auto run = [&](const Trace& trace) {
    reports.push_back(replay_one(trace, line, bar));
    print_table(reports.back(), tables);
    tables.flush();
  };
  if (line.traces.empty() || line.synthetic_spec) {
    sources.push_back(line.synthetic_spec ? "synthetic:" + *line.synthetic_spec
                                          : "synthetic workload (default shape)");
    run(make_transformer_training_trace(TransformerShape::parse(line.synthetic_spec.value_or(""))));
  }
  for (const std::string& path : line.traces) {
    sources.push_back(input_display_name(path));
    run(load_trace(path, line.device));
  }
  if (line.memory_viz_dir) {
    std::cerr << "cudacache-replay: wrote the snapshot pickles to " << *line.memory_viz_dir
              << "/ (TRACE.ALLOCATOR.pickle)\n";
  }
  if (line.html_path) {
    write_memory_page(*line.html_path,
                      render_memory_page(memory_page_json(context, reports, sources)));
    std::cerr << "cudacache-replay: wrote " << *line.html_path << "\n";
  }

  if (json) {
    write_json(context, reports, *json);
    json->close();
    if (!*json) throw std::runtime_error(*line.json_path + ": write error");
  } else if (json_to_stdout) {
    write_json(context, reports, out);
    out.flush();
    if (!out) throw std::runtime_error("<stdout>: write error");
  }
  // The tables too: a full disk or a closed pipe is an error, not a run that went well.
  tables.flush();
  if (!tables) {
    throw std::runtime_error(std::string(json_to_stdout ? "<stderr>" : "<stdout>") +
                             ": write error");
  }
  return 0;
}

}  // namespace cudacache::replay
