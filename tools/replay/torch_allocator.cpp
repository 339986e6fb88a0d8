#include "torch_allocator.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "trace_csv.h"

#ifndef CUDACACHE_TORCH_REPLAY_SCRIPT
#error "CUDACACHE_TORCH_REPLAY_SCRIPT must name tools/torch_replay/torch_replay.py"
#endif
#ifndef CUDACACHE_TORCH_REPLAY_CUDASIM_DIR
#error "CUDACACHE_TORCH_REPLAY_CUDASIM_DIR must name cudasim's build directory"
#endif

namespace cudacache::replay {
namespace {

constexpr int kExitNoTorch = 3;  // torch_replay.py: torch is not installed

std::string env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' ? value : fallback;
}

std::string python() { return env_or("CUDACACHE_PYTHON", "python3"); }
std::string script() { return env_or("CUDACACHE_TORCH_REPLAY", CUDACACHE_TORCH_REPLAY_SCRIPT); }

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int run_shell(const std::string& command) {
  const int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// A temporary file that is removed when it goes out of scope.
class TempFile {
 public:
  explicit TempFile(const char* suffix) {
    std::string pattern = "/tmp/cudacache-torch-XXXXXX" + std::string(suffix);
    const int fd = mkstemps(pattern.data(), static_cast<int>(std::string(suffix).size()));
    if (fd < 0) throw std::runtime_error("cannot create a temporary file in /tmp");
    close(fd);
    path_ = pattern;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The driver prints one flat result object per trace; its keys are unique in the document,
// so a value is found by its key. Returns nothing for null or a missing key.
std::optional<std::string> json_raw(const std::string& json, const std::string& key) {
  const std::string marker = "\"" + key + "\": ";
  const std::size_t at = json.find(marker);
  if (at == std::string::npos) return std::nullopt;
  std::size_t begin = at + marker.size();
  std::size_t end = begin;
  if (json[begin] == '"') {
    std::string text;
    for (end = begin + 1; end < json.size() && json[end] != '"'; ++end) {
      if (json[end] == '\\' && end + 1 < json.size()) {
        ++end;
        text += json[end] == 'n' ? '\n' : json[end];
      } else {
        text += json[end];
      }
    }
    return text;
  }
  while (end < json.size() && json[end] != ',' && json[end] != '\n' && json[end] != '}') ++end;
  std::string value = json.substr(begin, end - begin);
  if (value == "null") return std::nullopt;
  return value;
}

std::optional<std::uint64_t> json_uint(const std::string& json, const std::string& key) {
  const auto raw = json_raw(json, key);
  if (!raw) return std::nullopt;
  try {
    return std::stoull(*raw);
  } catch (const std::exception&) {
    throw std::runtime_error("torch_replay.py: bad value for " + key + ": " + *raw);
  }
}

// "device_calls": {"malloc": N, ...} with every kind of the cost table, or null (not counted).
std::optional<DeviceCalls> json_device_calls(const std::string& json) {
  const std::string marker = "\"device_calls\": ";
  const std::size_t at = json.find(marker);
  if (at == std::string::npos) return std::nullopt;
  const std::size_t begin = at + marker.size();
  if (json.compare(begin, 4, "null") == 0) return std::nullopt;
  const std::size_t end = json.find('}', begin);
  if (json[begin] != '{' || end == std::string::npos) {
    throw std::runtime_error("torch_replay.py: device_calls is neither an object nor null");
  }
  const std::string object = json.substr(begin, end + 1 - begin);
  DeviceCalls calls;
  for (const DeviceCallCost& cost : device_call_costs()) {
    const std::string key(cost.key);
    const auto count = json_uint(object, key);
    if (!count) throw std::runtime_error("torch_replay.py: device_calls lacks " + key);
    calls[cost.kind] = *count;
  }
  return calls;
}

}  // namespace

bool is_torch_allocator(const std::string& name) {
  return name == "torch-native" || name == "torch-expandable";
}

void check_torch_available(const std::string& name) {
  if (access(script().c_str(), R_OK) != 0) {
    throw std::invalid_argument("allocator '" + name + "' needs " + script() +
                                " (set CUDACACHE_TORCH_REPLAY to its path)");
  }
  const std::string probe = quoted(python()) +
                            " -c 'import importlib.util, sys; "
                            "sys.exit(importlib.util.find_spec(\"torch\") is None)' 2>/dev/null";
  if (run_shell(probe) != 0) {
    throw std::invalid_argument("allocator '" + name +
                                "' runs PyTorch's own allocator, but PyTorch is not installed "
                                "for " +
                                python() +
                                " (pip install -r requirements-torch.txt; CUDACACHE_PYTHON picks "
                                "another interpreter)");
  }
}

ReplayResult replay_with_torch(const Trace& trace, const std::string& name,
                               std::uint64_t capacity_bytes, bool min_capacity) {
  TempFile csv(".csv");
  {
    std::ofstream out(csv.path(), std::ios::binary);
    write_trace_csv(trace, out);
    if (!out) throw std::runtime_error(csv.path() + ": write error");
  }
  TempFile json_file(".json");
  std::string command = quoted(python()) + " " + quoted(script()) + " " + quoted(csv.path()) +
                        " --json " + quoted(json_file.path()) + " --cudasim-dir " +
                        quoted(CUDACACHE_TORCH_REPLAY_CUDASIM_DIR) + " --label " + quoted(name) +
                        " --capacity " + std::to_string(capacity_bytes);
  if (name == "torch-expandable") command += " --expandable";
  if (min_capacity) command += " --min-capacity";
  const int status = run_shell(command);
  if (status == kExitNoTorch) check_torch_available(name);  // throws the clear message
  if (status != 0) {
    throw std::runtime_error("allocator '" + name + "': tools/torch_replay/torch_replay.py " +
                             "failed (exit status " + std::to_string(status) + ")");
  }
  std::ifstream in(json_file.path());
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string json = buffer.str();

  ReplayResult result;
  result.allocator = name;
  result.peak_allocated_bytes = json_uint(json, "peak_allocated_bytes");
  result.peak_reserved_bytes = json_uint(json, "peak_reserved_bytes");
  result.device_peak_bytes = json_uint(json, "device_peak_bytes");
  result.device_mallocs = json_uint(json, "device_mallocs");
  result.device_frees = json_uint(json, "device_frees");
  result.device_calls = json_device_calls(json);
  result.capacity_bytes = json_uint(json, "capacity_bytes");
  result.oom = json_raw(json, "oom").value_or("false") == "true";
  if (auto index = json_uint(json, "oom_event_index")) result.oom_event = *index;
  result.oom_message = json_raw(json, "oom_message").value_or("");
  result.events_replayed = json_uint(json, "events_replayed").value_or(0);
  if (auto seconds = json_raw(json, "seconds")) result.seconds = std::stod(*seconds);
  result.min_capacity_bytes = json_uint(json, "min_capacity_bytes");
  result.min_capacity_replays = json_uint(json, "min_capacity_replays").value_or(0);
  return result;
}

}  // namespace cudacache::replay
