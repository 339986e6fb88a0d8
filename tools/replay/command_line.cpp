#include "command_line.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>

#include "replay_allocator.h"

namespace cudacache::replay {
namespace {

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
      "recognised by its first byte. Without a TRACE it replays a synthetic transformer\n"
      "training workload.\n"
      "\n"
      "options:\n"
      "  --allocators LIST   comma-separated allocators to compare (default: ";
  std::string defaults;
  for (const std::string& name : default_allocator_names())
    defaults += (defaults.empty() ? "" : ",") + name;
  text +=
      defaults +
      ")\n"
      "  --capacity SIZE     simulated device size, e.g. 24GiB (default: max(80 GiB, 8 x the\n"
      "                      trace's peak requested bytes), large enough never to refuse)\n"
      "  --capacity-factor F each trace's device is F x its peak requested bytes, rounded up\n"
      "                      to 2 MiB, e.g. 1.02 to compare allocators under pressure\n"
      "  --min-capacity      also find, per allocator, the smallest device (2 MiB steps) on\n"
      "                      which the whole trace completes, by bisection\n"
      "  --json FILE         write every figure as JSON\n"
      "  --synthetic SPEC    add the synthetic workload, shaped by SPEC, e.g.\n"
      "                      layers:12,hidden:768,heads:12,seq:512,batch:8,vocab:32000,steps:3\n"
      "  --convert SNAPSHOT  convert a snapshot pickle to a replay CSV (with -o OUT.csv)\n"
      "  -o, --output FILE   output of --convert\n"
      "  --device N          which device of a snapshot to read (default 0)\n"
      "  --real-gpu          do not switch to cudasim; replay on the CUDA runtime found by the\n"
      "                      loader (--capacity and --min-capacity then refuse)\n"
      "  --print-config      print cudacache's options (effective value under\n"
      "                      $CUDACACHE_CONF, default, documentation) and exit\n"
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

CommandLine parse_command_line(int argc, const char* const* argv) {
  CommandLine line;
  auto value_of = [&](int& i, const std::string& option) -> std::string {
    if (i + 1 >= argc) throw UsageError("option " + option + " needs a value");
    return argv[++i];
  };
  bool options_done = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (options_done || arg.empty() || arg[0] != '-' || arg == "-") {
      line.traces.push_back(arg);
    } else if (arg == "--") {
      options_done = true;
    } else if (arg == "-h" || arg == "--help") {
      line.help = true;
    } else if (arg == "--allocators") {
      line.allocators = split_allocator_list(value_of(i, arg));
      for (const std::string& name : line.allocators) {
        try {
          validate_allocator_name(name);
        } catch (const std::invalid_argument& error) {
          throw UsageError(error.what());
        }
      }
    } else if (arg == "--capacity") {
      line.capacity_bytes = parse_byte_size(value_of(i, arg));
      if (*line.capacity_bytes == 0) throw UsageError("--capacity must be above 0");
    } else if (arg == "--capacity-factor") {
      const std::string text = value_of(i, arg);
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
    } else if (arg == "--min-capacity") {
      line.min_capacity = true;
    } else if (arg == "--json") {
      line.json_path = value_of(i, arg);
    } else if (arg == "--synthetic") {
      line.synthetic_spec = value_of(i, arg);
    } else if (arg == "--convert") {
      line.convert_path = value_of(i, arg);
    } else if (arg == "-o" || arg == "--output") {
      line.output_path = value_of(i, arg);
    } else if (arg == "--device") {
      const std::string text = value_of(i, arg);
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), line.device);
      if (error != std::errc() || end != text.data() + text.size() || line.device < 0) {
        throw UsageError("--device needs a device number, got '" + text + "'");
      }
    } else if (arg == "--real-gpu") {
      line.real_gpu = true;
    } else if (arg == "--print-config") {
      line.print_config = true;
    } else {
      throw UsageError("unknown option '" + arg + "'");
    }
  }
  if (line.allocators.empty()) line.allocators = default_allocator_names();
  if (line.capacity_bytes && line.capacity_factor) {
    throw UsageError("--capacity and --capacity-factor exclude each other");
  }
  if (line.output_path && !line.convert_path) throw UsageError("-o is the output of --convert");
  if (line.convert_path) {
    if (!line.output_path) throw UsageError("--convert needs -o OUT.csv");
    if (!line.traces.empty() || line.min_capacity || line.json_path) {
      throw UsageError("--convert takes no traces and no replay options");
    }
  }
  return line;
}

}  // namespace cudacache::replay
