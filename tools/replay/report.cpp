#include "report.h"

#include "utf8.h"

#include <unistd.h>
#include <algorithm>
#include <cmath>

#include <cstdio>
#include <ctime>
#include <iomanip>
#include <optional>
#include <sstream>
#include <thread>

namespace cudacache::replay {
namespace {

std::string format_fixed(double value, int decimals) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(decimals) << value;
  return out.str();
}

std::string format_optional_bytes(const std::optional<std::uint64_t>& bytes) {
  return bytes ? format_bytes(*bytes) : "-";
}

std::string format_ratio(const std::optional<std::uint64_t>& bytes, std::uint64_t floor_bytes) {
  if (!bytes || floor_bytes == 0) return "-";
  return format_fixed(static_cast<double>(*bytes) / static_cast<double>(floor_bytes), 3);
}

std::string format_seconds(double seconds) {
  if (seconds < 1.0) return format_fixed(seconds * 1e3, 1) + " ms";
  return format_fixed(seconds, 2) + " s";
}

// An estimated duration: "489.5 us", "18.2 ms", "3.41 s"; "-" when absent.
std::string format_estimate(const std::optional<double>& seconds) {
  if (!seconds) return "-";
  if (*seconds < 1e-3) return format_fixed(*seconds * 1e6, 1) + " us";
  return format_seconds(*seconds);
}

std::string format_total_calls(const std::optional<DeviceCalls>& calls) {
  return calls ? std::to_string(calls->total()) : "-";
}

std::string format_rate(double per_second) {
  if (per_second >= 1e6) return format_fixed(per_second / 1e6, 2) + " M/s";
  if (per_second >= 1e3) return format_fixed(per_second / 1e3, 1) + " k/s";
  return format_fixed(per_second, 0) + " /s";
}

std::string format_oom(const ReplayResult& result, std::size_t events) {
  if (!result.oom) return "no";
  return "event " + std::to_string(*result.oom_event + 1) + "/" + std::to_string(events);
}

void print_row(std::ostream& out, const std::vector<std::string>& cells,
               const std::vector<std::size_t>& widths, const std::string& indent) {
  out << indent;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (i == 0) {
      out << std::left << std::setw(static_cast<int>(widths[i])) << cells[i];
    } else {
      out << "  " << std::right << std::setw(static_cast<int>(widths[i])) << cells[i];
    }
  }
  out << '\n';
}

// Rows (the first one the header) with each column as wide as its widest cell.
void print_rows(std::ostream& out, const std::vector<std::vector<std::string>>& rows,
                const std::string& indent = "") {
  std::vector<std::size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) print_row(out, row, widths, indent);
}

// Device calls by kind, one row per allocator that has them (cudasim counts them).
void print_calls_by_kind(const TraceReport& report, std::ostream& out) {
  std::vector<std::string> header{"allocator"};
  for (const DeviceCallCost& cost : device_call_costs()) header.emplace_back(cost.key);
  header.emplace_back("total");
  header.emplace_back("est. time");
  std::vector<std::vector<std::string>> rows{header};
  for (const ReplayResult& r : report.results) {
    if (!r.device_calls) continue;
    std::vector<std::string> row{r.allocator};
    for (std::uint64_t count : r.device_calls->counts) row.push_back(std::to_string(count));
    row.push_back(std::to_string(r.device_calls->total()));
    row.push_back(format_estimate(r.estimated_device_call_seconds()));
    rows.push_back(std::move(row));
  }
  if (rows.size() == 1) return;
  out << "   device calls by kind; est. time = calls x cost per call on a GPU "
         "(tools/replay/README.md):\n";
  print_rows(out, rows, "   ");
}

void write_json_string(std::ostream& out, const std::string& text) {
  out << '"';
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '"':
        out << "\\\"";
        ++i;
        continue;
      case '\\':
        out << "\\\\";
        ++i;
        continue;
      case '\n':
        out << "\\n";
        ++i;
        continue;
      case '\t':
        out << "\\t";
        ++i;
        continue;
      case '\r':
        out << "\\r";
        ++i;
        continue;
      default: break;
    }
    // Control characters, and bytes that are not valid UTF-8 (a file name in another encoding),
    // become \u00XX, the byte read as Latin-1: the JSON stays loadable.
    const std::size_t length = c < 0x20 ? 0 : utf8_sequence_length(text, i);
    if (length == 0) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out << escaped;
      ++i;
      continue;
    }
    out.write(text.data() + i, static_cast<std::streamsize>(length));
    i += length;
  }
  out << '"';
}

template <typename T>
void write_json_optional(std::ostream& out, const std::optional<T>& value) {
  if (value) {
    out << *value;
  } else {
    out << "null";
  }
}

void write_json_double(std::ostream& out, double value) {
  if (!std::isfinite(value)) {
    out << "null";
    return;
  }
  std::ostringstream text;
  text << std::setprecision(9) << value;
  out << text.str();
}

// {"malloc": N, "free": N, ...} in the cost table's order, or null.
void write_json_device_calls(std::ostream& out, const std::optional<DeviceCalls>& calls) {
  if (!calls) {
    out << "null";
    return;
  }
  out << "{";
  for (const DeviceCallCost& cost : device_call_costs()) {
    if (cost.kind != DeviceCallKind::kMalloc) out << ", ";
    out << '"' << cost.key << "\": " << (*calls)[cost.kind];
  }
  out << "}";
}

void write_json_result(std::ostream& out, const ReplayResult& r, std::uint64_t peak_requested) {
  out << "{\"allocator\": ";
  write_json_string(out, r.allocator);
  out << ", \"peak_allocated_bytes\": ";
  write_json_optional(out, r.peak_allocated_bytes);
  out << ", \"peak_reserved_bytes\": ";
  write_json_optional(out, r.peak_reserved_bytes);
  out << ", \"reserved_over_requested\": ";
  if (r.peak_reserved_bytes && peak_requested > 0) {
    write_json_double(
        out, static_cast<double>(*r.peak_reserved_bytes) / static_cast<double>(peak_requested));
  } else {
    out << "null";
  }
  out << ", \"device_peak_bytes\": ";
  write_json_optional(out, r.device_peak_bytes);
  out << ", \"min_capacity_bytes\": ";
  write_json_optional(out, r.min_capacity_bytes);
  out << ", \"min_capacity_over_requested\": ";
  if (r.min_capacity_bytes && peak_requested > 0) {
    write_json_double(
        out, static_cast<double>(*r.min_capacity_bytes) / static_cast<double>(peak_requested));
  } else {
    out << "null";
  }
  out << ", \"device_mallocs\": ";
  write_json_optional(out, r.device_mallocs);
  out << ", \"device_frees\": ";
  write_json_optional(out, r.device_frees);
  out << ", \"device_calls\": ";
  write_json_device_calls(out, r.device_calls);
  out << ", \"estimated_device_call_seconds\": ";
  if (const auto seconds = r.estimated_device_call_seconds()) {
    write_json_double(out, *seconds);
  } else {
    out << "null";
  }
  out << ", \"capacity_bytes\": ";
  write_json_optional(out, r.capacity_bytes);
  out << ", \"oom\": " << (r.oom ? "true" : "false") << ", \"oom_event_index\": ";
  write_json_optional(out, r.oom_event);
  out << ", \"oom_message\": ";
  if (r.oom) {
    write_json_string(out, r.oom_message);
  } else {
    out << "null";
  }
  out << ", \"min_capacity_replays\": ";
  if (r.min_capacity_replays > 0) {
    out << r.min_capacity_replays;
  } else {
    out << "null";
  }
  out << ", \"events_replayed\": " << r.events_replayed << ", \"seconds\": ";
  write_json_double(out, r.seconds);
  out << ", \"simulator_call_seconds\": ";
  if (r.simulator_call_seconds) {
    write_json_double(out, *r.simulator_call_seconds);
  } else {
    out << "null";
  }
  out << ", \"events_per_second\": ";
  write_json_double(out, r.events_per_second());
  out << ", \"split_time\": ";
  if (r.split_time) {
    out << "{\"calling_events\": " << r.split_time->calling_events << ", \"calling_seconds\": ";
    write_json_double(out, r.split_time->calling_seconds);
    out << ", \"other_events\": " << r.split_time->other_events << ", \"other_seconds\": ";
    write_json_double(out, r.split_time->other_seconds);
    out << "}";
  } else {
    out << "null";
  }
  out << ", \"intact_stamps\": ";
  if (r.intact_stamps) {
    out << *r.intact_stamps;
  } else {
    out << "null";
  }
  out << "}";
}

void write_json_context(std::ostream& out, const RunContext& context) {
  out << "{\"context\": {\"tool\": ";
  write_json_string(out, context.tool);
  out << ", \"version\": ";
  write_json_string(out, context.version);
  out << ", \"date\": ";
  write_json_string(out, context.date);
  out << ", \"host_name\": ";
  write_json_string(out, context.host_name);
  out << ", \"num_cpus\": " << context.num_cpus << ", \"cuda_runtime\": ";
  write_json_string(out, context.cuda_runtime);
  out << ",\n    \"inputs\": [";
  for (std::size_t i = 0; i < context.inputs.size(); ++i) {
    if (i != 0) out << ", ";
    write_json_string(out, context.inputs[i]);
  }
  out << "],\n    \"allocators\": [";
  for (std::size_t i = 0; i < context.allocators.size(); ++i) {
    const AllocatorContext& allocator = context.allocators[i];
    out << (i == 0 ? "\n      " : ",\n      ") << "{\"name\": ";
    write_json_string(out, allocator.name);
    out << ", \"kind\": ";
    write_json_string(out, allocator.kind);
    out << ", \"config\": ";
    write_json_string(out, allocator.config);
    out << "}";
  }
  out << "],\n    \"capacity_bytes\": ";
  write_json_optional(out, context.capacity_bytes);
  out << ", \"capacity_factor\": ";
  if (context.capacity_factor) {
    write_json_double(out, *context.capacity_factor);
  } else {
    out << "null";
  }
  out << ", \"min_capacity\": " << (context.min_capacity ? "true" : "false")
      << "},\n \"traces\": [";
}

// The "traces" array after the context, or the whole document's start without one.
void write_json_reports(const std::vector<TraceReport>& reports, std::ostream& out,
                        const RunContext* context) {
  if (context != nullptr) {
    write_json_context(out, *context);
  } else {
    out << "{\"traces\": [";
  }

  for (std::size_t t = 0; t < reports.size(); ++t) {
    const TraceReport& report = reports[t];
    out << (t == 0 ? "\n  " : ",\n  ") << "{\"name\": ";
    write_json_string(out, report.name);
    out << ", \"events\": " << report.events << ", \"allocs\": " << report.allocs
        << ", \"frees\": " << report.frees
        << ", \"empty_cache_calls\": " << report.empty_cache_calls
        << ", \"streams\": " << report.streams
        << ", \"peak_requested_bytes\": " << report.peak_requested_bytes << ", \"results\": [";
    for (std::size_t r = 0; r < report.results.size(); ++r) {
      out << (r == 0 ? "\n    " : ",\n    ");
      write_json_result(out, report.results[r], report.peak_requested_bytes);
    }
    out << "]}";
  }
  out << "\n]}\n";
}

}  // namespace

TraceReport TraceReport::describe(const Trace& trace) {
  TraceReport report;
  report.name = trace.name;
  report.events = trace.events.size();
  report.allocs = trace.alloc_count;
  report.frees = trace.events.size() - trace.alloc_count - trace.empty_cache_count;
  report.empty_cache_calls = trace.empty_cache_count;
  report.streams = trace.stream_count;
  report.peak_requested_bytes = trace.peak_requested_bytes;
  return report;
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return format_fixed(value, 2) + " " + kUnits[unit];
}

namespace {

// --split-time: each allocator's own time per event (cudasim's call time taken out), for the
// events that made a device call and for the rest.
void print_split_time(const TraceReport& report, std::ostream& out) {
  auto per_event = [](double seconds, std::size_t events) {
    return events == 0 ? std::string("-")
                       : format_fixed(seconds * 1e9 / static_cast<double>(events), 0);
  };
  bool header = false;
  for (const ReplayResult& r : report.results) {
    if (!r.split_time) continue;
    if (!header) {
      out << "   allocator ns / event (each event timed alone, device calls taken out):\n";
      header = true;
    }
    const ReplaySplitTime& s = *r.split_time;
    out << "   " << r.allocator << ": " << per_event(s.calling_seconds, s.calling_events) << " in "
        << s.calling_events << " events with device calls, "
        << per_event(s.other_seconds, s.other_events) << " in " << s.other_events << " without\n";
  }
}

}  // namespace

void print_table(const TraceReport& report, std::ostream& out) {
  out << "== " << report.name << "\n   " << report.events << " events (" << report.allocs
      << " allocs, " << report.frees << " frees, " << report.empty_cache_calls << " empty_cache), "
      << report.streams << (report.streams == 1 ? " stream" : " streams") << "; peak requested "
      << format_bytes(report.peak_requested_bytes) << " (" << report.peak_requested_bytes << " B)";
  if (!report.results.empty() && report.results.front().capacity_bytes) {
    out << "; device " << format_bytes(*report.results.front().capacity_bytes);
  }
  out << "\n";
  std::vector<std::string> header{"allocator",   "peak alloc",   "peak reserved",  "reserved/req",
                                  "device peak", "device calls", "est. call time", "OOM",
                                  "time",        "events/s"};
  if (report.min_capacity_searched) {
    header.push_back("min capacity");
    header.push_back("min cap/req");
  }
  std::vector<std::vector<std::string>> rows{header};
  for (const ReplayResult& r : report.results) {
    std::vector<std::string> row{r.allocator,
                                 format_optional_bytes(r.peak_allocated_bytes),
                                 format_optional_bytes(r.peak_reserved_bytes),
                                 format_ratio(r.peak_reserved_bytes, report.peak_requested_bytes),
                                 format_optional_bytes(r.device_peak_bytes),
                                 format_total_calls(r.device_calls),
                                 format_estimate(r.estimated_device_call_seconds()),
                                 format_oom(r, report.events),
                                 format_seconds(r.seconds),
                                 format_rate(r.events_per_second())};
    if (report.min_capacity_searched) {
      row.push_back(r.min_capacity_bytes ? format_bytes(*r.min_capacity_bytes) : "not found");
      row.push_back(format_ratio(r.min_capacity_bytes, report.peak_requested_bytes));
    }
    rows.push_back(std::move(row));
  }
  print_rows(out, rows);
  for (const ReplayResult& r : report.results) {
    if (r.oom) out << "   " << r.allocator << " ran out of memory: " << r.oom_message << "\n";
  }
  for (const ReplayResult& r : report.results) {
    if (r.intact_stamps) {
      out << "   " << r.allocator << ": contents checked, " << *r.intact_stamps
          << " stamps read back intact\n";
    }
  }
  print_calls_by_kind(report, out);
  print_split_time(report, out);
  out << '\n';
}

void fill_host_context(RunContext& context) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  char date[32] = "";
  if (gmtime_r(&now, &utc) != nullptr) std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  context.date = date;
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  context.host_name = host;
  context.num_cpus = std::max(1u, std::thread::hardware_concurrency());
}

void write_json(const std::vector<TraceReport>& reports, std::ostream& out) {
  write_json_reports(reports, out, nullptr);
}

void write_json(const RunContext& context, const std::vector<TraceReport>& reports,
                std::ostream& out) {
  write_json_reports(reports, out, &context);
}

}  // namespace cudacache::replay
