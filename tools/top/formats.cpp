#include "formats.h"

#include "json_writer.h"
#include "memory_figures.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <tuple>

namespace cudacache::top {
namespace {

// Prometheus label values: backslash, double quote and line feed are escaped.
std::string label_value(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// The program's file name and its arguments: "/usr/bin/python3 train.py" -> "python3 train.py".
// Control characters (a `python -c` script's line feeds) become spaces.
std::string short_command(std::string command) {
  for (char& c : command) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  const std::size_t program_end = std::min(command.find(' '), command.size());
  const std::size_t slash = command.rfind('/', program_end == 0 ? 0 : program_end - 1);
  return slash == std::string::npos ? command : command.substr(slash + 1);
}

std::string fixed(double value, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

}  // namespace

const std::vector<SortKeyInfo>& sort_keys() {
  static const std::vector<SortKeyInfo> keys = {
      {SortKey::kPid, "pid", 'p', "PID"},
      {SortKey::kCommand, "command", 'n', "COMMAND"},
      {SortKey::kDevice, "device", 'd', "DEV"},
      {SortKey::kAllocated, "allocated", 'a', "ALLOCATED"},
      {SortKey::kReserved, "reserved", 'r', "RESERVED"},
      {SortKey::kPeak, "peak", 'k', "PEAK"},
      {SortKey::kCache, "cache", 'c', "CACHE"},
      {SortKey::kLargestFree, "largest", 'l', "LARGEST FREE"},
      {SortKey::kFragmentation, "fragmentation", 'f', "FRAG"},
      {SortKey::kOoms, "ooms", 'o', "OOMS"},
      {SortKey::kCalls, "calls", 'x', "CALLS"},
  };
  return keys;
}

std::optional<SortKey> sort_key_named(std::string_view name) {
  for (const auto& key : sort_keys()) {
    if (name == key.name) return key.key;
  }
  return std::nullopt;
}

std::optional<SortKey> sort_key_of_letter(char letter) {
  for (const auto& key : sort_keys()) {
    if (letter == key.letter) return key.key;
  }
  return std::nullopt;
}

const SortKeyInfo& info(SortKey key) {
  for (const auto& entry : sort_keys()) {
    if (entry.key == key) return entry;
  }
  return sort_keys().front();
}

void sort_rows(std::vector<Row>& rows, SortKey key) {
  const auto number = [key](const Row& row) -> double {
    switch (key) {
      case SortKey::kAllocated: return static_cast<double>(row.allocated);
      case SortKey::kReserved: return static_cast<double>(row.reserved);
      case SortKey::kPeak: return static_cast<double>(row.peak_reserved);
      case SortKey::kCache: return static_cast<double>(row.cached);
      case SortKey::kLargestFree: return static_cast<double>(row.largest_free);
      case SortKey::kFragmentation: return row.fragmentation;
      case SortKey::kOoms: return static_cast<double>(row.ooms);
      case SortKey::kCalls: return static_cast<double>(row.device_calls());
      default: return 0.0;
    }
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    const auto by_id = std::tie(a.pid, a.device) < std::tie(b.pid, b.device);
    switch (key) {
      case SortKey::kPid: return by_id;
      case SortKey::kDevice: return std::tie(a.device, a.pid) < std::tie(b.device, b.pid);
      case SortKey::kCommand: return a.command != b.command ? a.command < b.command : by_id;
      default: return number(a) != number(b) ? number(a) > number(b) : by_id;
    }
  });
}

std::string table(const Scan& scan, SortKey key, std::size_t width) {
  std::vector<Row> rows = scan.rows;
  sort_rows(rows, key);
  char line[512];
  const auto column = [key](SortKey k) {
    // The sort column is marked, as top marks it.
    return std::string(info(k).column) + (k == key ? "*" : "");
  };
  std::string out;
  std::snprintf(line, sizeof line, "%8s %-18s %4s %11s %11s %11s %11s %12s %5s %5s %7s\n",
                column(SortKey::kPid).c_str(), column(SortKey::kCommand).c_str(),
                column(SortKey::kDevice).c_str(), column(SortKey::kAllocated).c_str(),
                column(SortKey::kReserved).c_str(), column(SortKey::kPeak).c_str(),
                column(SortKey::kCache).c_str(), column(SortKey::kLargestFree).c_str(),
                column(SortKey::kFragmentation).c_str(), column(SortKey::kOoms).c_str(),
                column(SortKey::kCalls).c_str());
  const auto clip = [width](std::string text) {
    if (width > 0 && text.size() > width + 1) {
      text.resize(width);
      text += '\n';
    }
    return text;
  };
  out += clip(line);
  for (const Row& row : rows) {
    std::string command = short_command(row.command).substr(0, 18);
    std::snprintf(line, sizeof line,
                  "%8ld %-18s %4d %11s %11s %11s %11s %12s %5s %5" PRIu64 " %7" PRIu64 "\n",
                  row.pid, command.c_str(), row.device, format_size(row.allocated).c_str(),
                  format_size(row.reserved).c_str(), format_size(row.peak_reserved).c_str(),
                  format_size(row.cached).c_str(), format_size(row.largest_free).c_str(),
                  fixed(row.fragmentation, 2).c_str(), row.ooms, row.device_calls());
    out += clip(line);
  }
  return out;
}

namespace {

// The counters of a row, once for the JSON keys and the Prometheus metrics.
struct Counter {
  const char* key;     // JSON
  const char* metric;  // Prometheus
  const char* type;
  const char* help;
  std::uint64_t Row::*member;
};

constexpr Counter kCounters[] = {
    {"allocated_bytes", "cudacache_allocated_bytes", "gauge",
     "Bytes in live allocations (allocated_bytes.all.current).", &Row::allocated},
    {"reserved_bytes", "cudacache_reserved_bytes", "gauge",
     "Device memory the allocator holds (reserved_bytes.all.current).", &Row::reserved},
    {"requested_bytes", "cudacache_requested_bytes", "gauge",
     "Bytes the program asked for, before rounding.", &Row::requested},
    {"peak_allocated_bytes", "cudacache_peak_allocated_bytes", "gauge",
     "Peak of allocated bytes since start or reset.", &Row::peak_allocated},
    {"peak_reserved_bytes", "cudacache_peak_reserved_bytes", "gauge",
     "Peak of reserved bytes since start or reset.", &Row::peak_reserved},
    {"cached_bytes", "cudacache_cached_bytes", "gauge", "Reserved bytes not allocated: the cache.",
     &Row::cached},
    {"largest_free_block_bytes", "cudacache_largest_free_block_bytes", "gauge",
     "The largest free cached block.", &Row::largest_free},
    {"allocations", "cudacache_allocations", "gauge", "Live allocations.", &Row::allocations},
    {"segments", "cudacache_segments", "gauge",
     "cudaMalloc segments (segment.all.current); 0 under the VMM policies, as in PyTorch's "
     "expandable segments: their pages count in reserved bytes.",
     &Row::segments},
    {"ooms", "cudacache_ooms_total", "counter", "Allocations that ended in an out-of-memory error.",
     &Row::ooms},
    {"alloc_retries", "cudacache_alloc_retries_total", "counter",
     "Allocations that needed the cache freed and a retry.", &Row::alloc_retries},
    {"device_allocs", "cudacache_device_allocs_total", "counter",
     "cudaMalloc calls, or maps of pages.", &Row::device_allocs},
    {"device_frees", "cudacache_device_frees_total", "counter",
     "cudaFree calls, or unmaps of pages.", &Row::device_frees},
};

}  // namespace

std::string json(const Scan& scan) {
  JsonWriter out;
  out.begin_object();
  out.field("directory", scan.directory);
  out.field("processes", std::int64_t{scan.processes});
  out.field("skipped", std::int64_t{scan.skipped});
  out.field("removed", std::int64_t{scan.removed});
  out.key("rows");
  out.begin_array();
  for (const Row& row : scan.rows) {
    out.begin_object();
    out.field("pid", std::int64_t{row.pid});
    out.field("page", row.page);
    out.field("command", row.command);
    out.field("device", std::int64_t{row.device});
    for (const Counter& counter : kCounters) out.field(counter.key, row.*counter.member);
    out.field("fragmentation", row.fragmentation);
    out.end_object();
  }
  out.end_array();
  out.key("notes");
  out.begin_array();
  for (const std::string& note : scan.notes) out.value(note);
  out.end_array();
  out.end_object();
  return out.str() + "\n";
}

std::string prometheus(const Scan& scan) {
  const auto labels = [](const Row& row) {
    return "{pid=\"" + std::to_string(row.pid) + "\",device=\"" + std::to_string(row.device) +
           "\"," + (row.page != 0 ? "page=\"" + std::to_string(row.page) + "\"," : std::string()) +
           "command=\"" + label_value(row.command) + "\"}";
  };
  const auto family = [](const char* name, const char* type, const char* help) {
    return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  std::string out;
  for (const Counter& counter : kCounters) {
    out += family(counter.metric, counter.type, counter.help);
    for (const Row& row : scan.rows) {
      out += counter.metric + labels(row) + " " + std::to_string(row.*counter.member) + "\n";
    }
  }
  out += family("cudacache_fragmentation_ratio", "gauge",
                "1 - largest free block / cached bytes (0: the cache is one block).");
  for (const Row& row : scan.rows) {
    out += "cudacache_fragmentation_ratio" + labels(row) + " " + fixed(row.fragmentation, 6) + "\n";
  }
  out +=
      family("cudacache_top_pages_skipped", "gauge", "Stats pages cudacache-top could not read.");
  out += "cudacache_top_pages_skipped " + std::to_string(scan.skipped) + "\n";
  out += family("cudacache_top_directory_readable", "gauge",
                "1 when cudacache-top could read the directory of stats pages, 0 when not.");
  out += "cudacache_top_directory_readable " +
         std::string(scan.directory_error.empty() ? "1" : "0") + "\n";
  return out;
}

}  // namespace cudacache::top
