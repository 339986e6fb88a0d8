// Command line of cudacache-replay, parsed by CLI11. parse_command_line() never exits: errors
// are UsageError, which main turns into a message and exit code 2. Options take their value as
// `--opt value` or `--opt=value`; `--` ends the options. A TRACE of `-` is stdin, and the file
// options (--json, -o) take `-` for stdout.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudacache::replay {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The largest simulated device: cudasim backs address reservations with host address space
// (128 TiB on x86-64 Linux), and an allocator with expandable segments reserves 9/8 of the
// device. A device of 128 TiB failed every such allocator's first reservation, reported as out
// of memory on the first request; --capacity and --capacity-factor refuse more, and the default
// device stops here. A ThreadSanitizer build leaves a process far less address space, and
// there such a device still fails.
inline constexpr std::uint64_t kLargestSimulatedDevice = std::uint64_t{16} << 40;  // 16 TiB

struct CommandLine {
  std::vector<std::string> traces;  // CSV or pickle paths; "-" = stdin (at most once)
  std::vector<std::string> allocators;
  std::optional<std::uint64_t> capacity_bytes;
  // --capacity-factor F: each trace's device is F x its peak requested bytes, rounded up to
  // the capacity resolution (2 MiB); exclusive with --capacity.
  std::optional<double> capacity_factor;
  bool min_capacity = false;
  bool split_time = false;      // --split-time: allocator time per event, calling vs not
  bool check_contents = false;  // --check-contents: blocks stamped and checked (content_check.h)
  std::optional<std::string> json_path;       // "-" = stdout (the tables then go to stderr)
  std::optional<std::string> convert_path;    // --convert PICKLE ("-" = stdin)
  std::optional<std::string> output_path;     // -o OUT.csv ("-" = stdout)
  std::optional<std::string> synthetic_spec;  // --synthetic SPEC (also implied by no trace)
  std::optional<std::string> html_path;       // --html FILE: memory over time (memory_page.h)
  std::optional<std::string> memory_viz_dir;  // --memory-viz DIR: snapshot pickles
  int device = 0;                             // device_traces index when reading a snapshot
  bool real_gpu = false;
  bool help = false;
  bool version = false;       // --version: version_text() and exit 0
  bool print_config = false;  // --print-config: cudacache's options under $CUDACACHE_CONF
};

CommandLine parse_command_line(int argc, const char* const* argv);

// "8GiB", "512MiB", "1073741824", "24GB"; throws UsageError.
std::uint64_t parse_byte_size(const std::string& text);

std::string usage_text();

// The project's version, "0.1.0" (CMake's cudacache_VERSION, from include/cudacache/cudacache.h).
std::string tool_version();

// What --version prints: "cudacache-replay 0.1.0\n".
std::string version_text();

// The path that stands for stdin (a TRACE, --convert) or stdout (--json, -o).
inline constexpr const char* kStdioPath = "-";

}  // namespace cudacache::replay
