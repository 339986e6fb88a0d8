#include "command_line.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>
#include <string_view>

#include "replay_allocator.h"
#include "torch_allocator.h"
#include "trace_csv.h"

namespace cudacache::replay {
namespace {

// The options that take a value. CLI11 takes whatever argument comes next as the value, an
// option or the trace itself, and an empty `--json=` takes the next argument as well: a trace
// named there was overwritten with JSON (and the replay then ran the synthetic workload).
constexpr std::string_view kValueOptions[] = {"--allocators", "--capacity",  "--capacity-factor",
                                              "--json",       "--synthetic", "--html",
                                              "--memory-viz", "--convert",   "-o",
                                              "--output",     "--device"};

// Returns the -h/--help or --version that comes before any option without its value, if one
// does: that request is answered whatever follows it (`--help --json` prints the usage, as
// argparse does), while `--json --help` is --json without its value.
std::string_view check_option_values(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (argument == "--") return {};  // traces only from here
    if (argument == "-h" || argument == "--help" || argument == "--version") return argument;
    const std::size_t equals = argument.find('=');
    const std::string_view name = argument.substr(0, equals);
    if (std::find(std::begin(kValueOptions), std::end(kValueOptions), name) ==
        std::end(kValueOptions)) {
      continue;
    }
    if (equals != std::string_view::npos) {
      if (equals + 1 == argument.size()) {
        throw UsageError("option " + std::string(name) + " needs a value");
      }
      continue;
    }
    if (i + 1 == argc) throw UsageError("option " + std::string(name) + " needs a value");
    const std::string_view value = argv[++i];
    // "-" is stdin or stdout, and "-1" a number for the option's own check to refuse; any
    // other word that starts with '-' is an option.
    const bool number =
        value.size() > 1 && ((value[1] >= '0' && value[1] <= '9') || value[1] == '.');
    if (value.size() > 1 && value.front() == '-' && !number) {
      throw UsageError("option " + std::string(name) + " needs a value, not the option '" +
                       std::string(value) + "' (a value that starts with '-' goes as " +
                       std::string(name) + "=" + std::string(value) + ")");
    }
  }
  return {};
}

// Whether two paths name one file: the same file when both exist, else the same absolute path.
bool same_file(const std::string& a, const std::string& b) {
  if (a == kStdioPath || b == kStdioPath) return false;
  std::error_code error;
  if (std::filesystem::exists(a, error) && std::filesystem::exists(b, error)) {
    return std::filesystem::equivalent(a, b, error);
  }
  const auto normal = [&](const std::string& path) {
    return std::filesystem::weakly_canonical(std::filesystem::absolute(path, error), error)
        .lexically_normal();
  };
  return normal(a) == normal(b);
}

void refuse_same_file(const std::string& input_option, const std::string& input,
                      const std::string& output_option, const std::string& output) {
  if (same_file(input, output)) {
    throw UsageError(output_option + " " + output + " is also " + input_option +
                     "'s input: it would be overwritten");
  }
}

// No output overwrites a trace or another output; --memory-viz writes TRACE.ALLOCATOR.pickle,
// so two traces of one file name, or an allocator named twice, would overwrite each other's.
void check_output_paths(const CommandLine& line) {
  const std::pair<const char*, const std::optional<std::string>*> outputs[] = {
      {"--json", &line.json_path}, {"--html", &line.html_path}};
  for (const auto& [option, path] : outputs) {
    if (!*path) continue;
    for (const std::string& trace : line.traces) refuse_same_file("a TRACE", trace, option, **path);
    // "--json t.csv" alone takes the trace as the output (and replays the synthetic workload):
    // a trace's file name as an output, with no TRACE given, is taken for that mistake.
    const std::string& output = **path;
    if (line.traces.empty() && !line.synthetic_spec && !line.convert_path &&
        (output.ends_with(".csv") || output.ends_with(".pickle") || output.ends_with(".pkl"))) {
      throw UsageError(std::string(option) + " " + output +
                       " names a trace, and no TRACE is given: the output file comes first (" +
                       option + " OUT " + output + ")");
    }
  }
  if (line.json_path && line.html_path && same_file(*line.json_path, *line.html_path)) {
    throw UsageError("--json and --html name the same file, " + *line.html_path);
  }
  if (!line.memory_viz_dir) return;
  for (std::size_t i = 0; i < line.allocators.size(); ++i) {
    for (std::size_t j = i + 1; j < line.allocators.size(); ++j) {
      if (line.allocators[i] == line.allocators[j]) {
        throw UsageError("--memory-viz: allocator '" + line.allocators[i] +
                         "' is named twice, and its pickles would overwrite each other");
      }
    }
  }
  for (std::size_t i = 0; i < line.traces.size(); ++i) {
    for (std::size_t j = i + 1; j < line.traces.size(); ++j) {
      if (trace_name_from_path(line.traces[i]) == trace_name_from_path(line.traces[j])) {
        throw UsageError("--memory-viz: traces " + line.traces[i] + " and " + line.traces[j] +
                         " have one file name, and their pickles would overwrite each other");
      }
    }
  }
}

bool starts_allocator_name(const std::string& piece) {
  return piece == "nocache" || piece == "cub" || piece == "pytorch" ||
         piece == "pytorch-expandable" || piece == "torch-native" || piece == "torch-expandable" ||
         piece == "cudacache" || piece.starts_with("cudacache:");
}

// "cudacache:max_split_size_mb:128,roundup_power2_divisions:4,cub": a piece that does not
// start an allocator name continues the previous cudacache config, so configs keep commas.
std::vector<std::string> split_allocator_list(const std::string& text) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = text.find(',', start);
    std::string piece =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!names.empty() && names.back().starts_with("cudacache:") && !starts_allocator_name(piece)) {
      names.back() += "," + piece;
    } else {
      names.push_back(piece);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return names;
}

}  // namespace

std::uint64_t parse_byte_size(const std::string& text) {
  std::uint64_t number = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (error != std::errc() || end == text.data()) {
    throw UsageError("invalid size '" + text +
                     "' (expected e.g. 24GiB, 512MiB, 8GB or a byte count)");
  }
  const std::string_view suffix(end, static_cast<std::size_t>(text.data() + text.size() - end));
  struct Unit {
    std::string_view name;
    std::uint64_t factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},
      {"B", 1},
      {"K", 1ULL << 10},
      {"KiB", 1ULL << 10},
      {"KB", 1000ULL},
      {"M", 1ULL << 20},
      {"MiB", 1ULL << 20},
      {"MB", 1000ULL * 1000},
      {"G", 1ULL << 30},
      {"GiB", 1ULL << 30},
      {"GB", 1000ULL * 1000 * 1000},
      {"T", 1ULL << 40},
      {"TiB", 1ULL << 40},
      {"TB", 1000ULL * 1000 * 1000 * 1000},
  };
  for (const Unit& unit : kUnits) {
    if (unit.name != suffix) continue;
    if (number > std::numeric_limits<std::uint64_t>::max() / unit.factor) {
      throw UsageError("size '" + text + "' is too large");
    }
    return number * unit.factor;
  }
  throw UsageError("invalid size suffix in '" + text +
                   "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
}

std::string usage_text() {
  std::string text =
      "usage: cudacache-replay [options] [TRACE...]\n"
      "       cudacache-replay --convert SNAPSHOT.pickle -o OUT.csv [--device N]\n"
      "\n"
      "Replays allocation traces through several allocators on the simulated CUDA runtime\n"
      "(cudasim) and prints, per trace, one table comparing them. A TRACE is a replay CSV\n"
      "(op,id,size,stream) or a PyTorch snapshot pickle (torch.cuda.memory._dump_snapshot),\n"
      "recognised by its first byte; a TRACE of - is read from stdin. Without a TRACE it\n"
      "replays a synthetic transformer training workload.\n"
      "\n"
      "Options take their value as --opt VALUE or --opt=VALUE; -- ends the options. FILE\n"
      "outputs take - for stdout.\n"
      "\n"
      "options:\n"
      "  --allocators LIST   comma-separated allocators to compare (default: ";
  std::string defaults;
  for (const std::string& name : default_allocator_names())
    defaults += (defaults.empty() ? "" : ",") + name;
  text +=
      defaults +
      ")\n"
      "  --capacity SIZE     simulated device size, e.g. 24GiB, at most 16 TiB (default:\n"
      "                      max(80 GiB, 8 x the trace's peak requested bytes), up to 16 TiB)\n"
      "  --capacity-factor F each trace's device is F x its peak requested bytes, rounded up\n"
      "                      to 2 MiB, e.g. 1.02 to compare allocators under pressure\n"
      "  --min-capacity      also find, per allocator, the smallest device (2 MiB steps) on\n"
      "                      which the whole trace completes, and so does every device up\n"
      "                      to 0.5 % (at least 16 MiB) larger: bisection, then checked\n"
      "                      upward\n"
      "  --json FILE         write every figure as JSON, with a \"context\" block (tool,\n"
      "                      version, date, host, inputs, each allocator's configuration);\n"
      "                      with --json - the JSON goes to stdout and the tables to stderr\n"
      "  --split-time        time each event alone and print each allocator's own time per\n"
      "                      event (device calls taken out) for the events that called the\n"
      "                      device and for the rest (cudasim only, refused with --real-gpu;\n"
      "                      adds two clock readings per event inside the timed loop)\n"
      "  --check-contents    stamp every block the allocator returns through cudaMemcpy\n"
      "                      (its first and last 8 bytes and the first 8 bytes of each\n"
      "                      2 MiB granule it reaches into), check that it overlaps no live\n"
      "                      block, and read the stamps back when it is freed: a block that\n"
      "                      lost one is a runtime failure naming the event (in-process\n"
      "                      allocators only; times then include the copies)\n"
      "  --html FILE         write one self-contained HTML page: per trace, memory over\n"
      "                      time of every allocator (requested, allocated, reserved), its\n"
      "                      device calls by kind and, with --min-capacity, its smallest\n"
      "                      device (torch-* allocators are listed, not drawn)\n"
      "  --memory-viz DIR    write DIR/TRACE.ALLOCATOR.pickle per trace and allocator: the\n"
      "                      replay as a torch.cuda.memory._snapshot() pickle for PyTorch's\n"
      "                      memory_viz (DIR is created when missing)\n"
      "  --synthetic SPEC    add the synthetic workload, shaped by SPEC, e.g.\n"
      "                      layers:12,hidden:768,heads:12,seq:512,batch:8,vocab:32000,steps:3\n"
      "  --convert SNAPSHOT  convert a snapshot pickle (- for stdin) to a replay CSV (with -o)\n"
      "  -o, --output FILE   output of --convert (- for stdout)\n"
      "  --device N          which device of a snapshot to read (default 0)\n"
      "  --real-gpu          do not switch to cudasim; replay on the CUDA runtime found by the\n"
      "                      loader (--capacity and --min-capacity then refuse)\n"
      "  --print-config      print cudacache's options (effective value under\n"
      "                      $CUDACACHE_CONF, default, documentation) and exit\n"
      "  --version           print \"cudacache-replay VERSION\" and exit\n"
      "  -h, --help          this text\n"
      "\n"
      "allocators:\n";
  for (const AllocatorSpec& spec : known_allocators()) {
    text += "  " + spec.name + std::string(spec.name.size() < 20 ? 20 - spec.name.size() : 1, ' ') +
            spec.description + "\n";
  }
  text +=
      "\n"
      "Columns: peak alloc/reserved as the allocator counts them; reserved/req = peak reserved\n"
      "over the trace's peak requested bytes (the floor no allocator can go below); device peak\n"
      "and device calls (every CUDA memory call, by kind in a second table) as cudasim counts\n"
      "them; est. call time = those calls weighted by an estimated cost per call on a GPU\n"
      "(the table in tools/replay/README.md), not a measurement; time and events/s of the\n"
      "replay loop.\n"
      "Exit status: 0 done (an out-of-memory is a result, not a failure), 1 runtime failure,\n"
      "2 bad command line or malformed input.\n";
  return text;
}

std::string tool_version() { return CUDACACHE_REPLAY_VERSION; }

std::string version_text() { return "cudacache-replay " + tool_version() + "\n"; }

CommandLine parse_command_line(int argc, const char* const* argv) {
  // Every value is taken as text and checked below, so that the messages stay the tool's own
  // ("invalid size suffix ...") whatever CLI11 would say.
  std::optional<std::string> allocators;
  std::optional<std::string> capacity;
  std::optional<std::string> capacity_factor;
  std::optional<std::string> device;
  CommandLine line;

  CLI::App app("cudacache-replay", "cudacache-replay");
  app.set_help_flag();  // -h/--help sets line.help; main prints usage_text()
  app.allow_extras();   // unknown options are reported below, in the tool's words
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_flag("-h,--help", line.help);
  app.add_flag("--version", line.version);
  app.add_option("--allocators", allocators);
  app.add_option("--capacity", capacity);
  app.add_option("--capacity-factor", capacity_factor);
  app.add_flag("--min-capacity", line.min_capacity);
  app.add_flag("--split-time", line.split_time);
  app.add_flag("--check-contents", line.check_contents);
  app.add_option("--json", line.json_path);
  app.add_option("--synthetic", line.synthetic_spec);
  app.add_option("--html", line.html_path);
  app.add_option("--memory-viz", line.memory_viz_dir);
  app.add_option("--convert", line.convert_path);
  app.add_option("-o,--output", line.output_path);
  app.add_option("--device", device);
  app.add_flag("--real-gpu", line.real_gpu);
  app.add_flag("--print-config", line.print_config);
  app.add_option("traces", line.traces);

  if (const std::string_view request = check_option_values(argc, argv); !request.empty()) {
    (request == "--version" ? line.version : line.help) = true;
    line.allocators = default_allocator_names();
    return line;
  }
  // CLI11's parse(vector) takes the arguments without the program name, last one first.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) args.emplace_back(argv[i]);
  try {
    app.parse(args);
  } catch (const CLI::ArgumentMismatch& error) {
    // "--json: 1 required TEXT missing": an option given last, or as --json=, without a value.
    const std::string what = error.what();
    const std::size_t colon = what.find(':');
    if (colon != std::string::npos && what.starts_with("-") &&
        what.find("missing") != std::string::npos) {
      throw UsageError("option " + what.substr(0, colon) + " needs a value");
    }
    throw UsageError(what);
  } catch (const CLI::ParseError& error) {
    throw UsageError(error.what());
  }
  for (const std::string& extra : app.remaining()) {
    if (extra == "--") continue;  // CLI11 leaves the end-of-options mark among the extras
    throw UsageError("unknown option '" + extra.substr(0, extra.find('=')) + "'");
  }
  if (line.help || line.version) {
    line.allocators = default_allocator_names();
    return line;
  }

  if (allocators) {
    line.allocators = split_allocator_list(*allocators);
    for (const std::string& name : line.allocators) {
      // Refused whether or not PyTorch is installed (its check below runs python3).
      if (line.check_contents && is_torch_allocator(name)) {
        throw UsageError("--check-contents checks the in-process allocators; " + name +
                         " replays in a PyTorch process");
      }
      try {
        validate_allocator_name(name);
      } catch (const std::invalid_argument& error) {
        throw UsageError(error.what());
      }
    }
  }
  if (capacity) {
    line.capacity_bytes = parse_byte_size(*capacity);
    if (*line.capacity_bytes == 0) throw UsageError("--capacity must be above 0");
    if (*line.capacity_bytes > kLargestSimulatedDevice) {
      throw UsageError("--capacity " + *capacity +
                       " is above 16 TiB, the largest device the simulator can hold");
    }
  }
  if (capacity_factor) {
    const std::string& text = *capacity_factor;
    double factor = 0.0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), factor);
    if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(factor) ||
        factor <= 0.0 || factor > 1e6) {
      throw UsageError(
          "--capacity-factor needs a number above 0 and at most 1000000 (e.g. "
          "1.02), got '" +
          text + "'");
    }
    line.capacity_factor = factor;
  }
  if (device) {
    const std::string& text = *device;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), line.device);
    if (error != std::errc() || end != text.data() + text.size() || line.device < 0) {
      throw UsageError("--device needs a device number, got '" + text + "'");
    }
  }
  if (std::count(line.traces.begin(), line.traces.end(), kStdioPath) > 1) {
    throw UsageError("'-' (stdin) can be given only once as a TRACE");
  }
  if (line.allocators.empty()) line.allocators = default_allocator_names();
  if (line.capacity_bytes && line.capacity_factor) {
    throw UsageError("--capacity and --capacity-factor exclude each other");
  }
  if (line.output_path && !line.convert_path) throw UsageError("-o is the output of --convert");
  if (line.html_path && (line.html_path->empty() || *line.html_path == kStdioPath)) {
    throw UsageError("--html needs a file name (the page is not written to stdout)");
  }
  if (line.memory_viz_dir && (line.memory_viz_dir->empty() || *line.memory_viz_dir == kStdioPath)) {
    throw UsageError("--memory-viz needs a directory");
  }
  if (line.convert_path) {
    if (!line.output_path) throw UsageError("--convert needs -o OUT.csv");
    if (!line.traces.empty() || line.min_capacity || line.json_path || line.html_path ||
        line.memory_viz_dir || line.synthetic_spec || allocators || line.capacity_bytes ||
        line.capacity_factor || line.split_time || line.check_contents || line.real_gpu) {
      throw UsageError("--convert takes no traces and no replay options");
    }
    refuse_same_file("--convert", *line.convert_path, "-o", *line.output_path);
  }
  check_output_paths(line);
  return line;
}

}  // namespace cudacache::replay
