#include "memory_page.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "json_writer.h"
#include "memory_page_template.h"  // generated from tools/html/memory_page.html

namespace cudacache::replay {
namespace {

constexpr std::string_view kDataPlaceholder = "__CUDACACHE_MEMORY_DATA__";

// An absent figure is an absent key (the page reads it as undefined).
void optional_number(JsonWriter& json, std::string_view name,
                     const std::optional<std::uint64_t>& value) {
  if (value) json.field(name, *value);
}

void numbers(JsonWriter& json, std::string_view name, const std::vector<std::uint64_t>& values,
             bool present) {
  if (!present) return;
  json.key(name);
  json.begin_array();
  for (std::uint64_t value : values) json.value(value);
  json.end_array();
}

void write_series(JsonWriter& json, const ReplayResult& result) {
  json.begin_object();
  json.field("name", result.allocator);
  optional_number(json, "peak_allocated", result.peak_allocated_bytes);
  optional_number(json, "peak_reserved", result.peak_reserved_bytes);
  optional_number(json, "min_capacity", result.min_capacity_bytes);
  if (result.oom_event) json.field("oom_event", static_cast<std::uint64_t>(*result.oom_event));
  if (!result.timeline) {
    json.field("note",
               "not drawn: " + result.allocator +
                   " replays in a PyTorch process, which reports its figures only at the end");
    json.end_object();
    return;
  }
  const Timeline& timeline = *result.timeline;
  json.field("note", "");
  json.field("events", static_cast<std::uint64_t>(timeline.events));
  json.field("bucket_events", static_cast<std::uint64_t>(timeline.bucket_events));
  json.key("first_event");
  json.begin_array();
  for (std::size_t event : timeline.first_event) json.value(static_cast<std::uint64_t>(event));
  json.end_array();
  numbers(json, "requested_min", timeline.requested.min, true);
  numbers(json, "requested_max", timeline.requested.max, true);
  numbers(json, "allocated_min", timeline.allocated.min, !timeline.allocated.min.empty());
  numbers(json, "allocated_max", timeline.allocated.max, !timeline.allocated.max.empty());
  numbers(json, "reserved_min", timeline.reserved.min, !timeline.reserved.min.empty());
  numbers(json, "reserved_max", timeline.reserved.max, !timeline.reserved.max.empty());
  json.key("calls");
  json.begin_object();
  for (std::size_t kind = 0; kind < kDeviceCallKinds; ++kind) {
    const auto& points = timeline.calls[kind];
    if (points.empty()) continue;
    json.key(device_call_costs()[kind].key);
    json.begin_array();
    for (const auto& [point, count] : points) {
      json.begin_array();
      json.value(static_cast<std::uint64_t>(point));
      json.value(count);
      json.end_array();
    }
    json.end_array();
  }
  json.end_object();
  json.end_object();
}

}  // namespace

std::string memory_page_json(const RunContext& context, const std::vector<TraceReport>& reports,
                             const std::vector<std::string>& sources) {
  JsonWriter json;
  json.begin_object();
  json.field("format", "cudacache-memory-page/1");
  json.field("generator", context.tool + " " + context.version);
  json.field("created", context.date);
  json.key("notes");
  json.begin_array();
  json.value(
      "Requested: live bytes the trace asks for. Allocated and reserved: as each allocator "
      "counts them (cub: live and live + cached blocks; nocache: live bytes). Device calls: "
      "every CUDA memory call the allocator made, as cudasim counts them.");
  json.end_array();
  json.key("traces");
  json.begin_array();
  for (std::size_t t = 0; t < reports.size(); ++t) {
    const TraceReport& report = reports[t];
    json.begin_object();
    json.field("name", report.name);
    json.field("source", t < sources.size() ? sources[t] : report.name);
    json.field("events", static_cast<std::uint64_t>(report.events));
    json.field("peak_requested", report.peak_requested_bytes);
    optional_number(json, "capacity",
                    report.results.empty() ? std::nullopt : report.results[0].capacity_bytes);
    json.field("min_capacity_searched", report.min_capacity_searched);
    json.key("notes");
    json.begin_array();
    if (!report.min_capacity_searched) {
      json.value(
          "No min-capacity line: run cudacache-replay with --min-capacity to draw each "
          "allocator's smallest device on which the whole trace completes.");
    }
    json.end_array();
    json.key("series");
    json.begin_array();
    for (const ReplayResult& result : report.results) write_series(json, result);
    json.end_array();
    json.end_object();
  }
  json.end_array();
  json.end_object();
  return json.str();
}

std::string_view memory_page_template() { return kMemoryPageTemplate; }

std::string render_memory_page(std::string_view data_json) {
  std::string safe;
  safe.reserve(data_json.size());
  for (char c : data_json) {
    switch (c) {
      case '<': safe += "\\u003c"; break;
      case '>': safe += "\\u003e"; break;
      case '&': safe += "\\u0026"; break;
      default: safe += c;
    }
  }
  std::string page(memory_page_template());
  const std::size_t at = page.find(kDataPlaceholder);
  if (at == std::string::npos) {
    throw std::logic_error("memory_page.html has no " + std::string(kDataPlaceholder));
  }
  page.replace(at, kDataPlaceholder.size(), safe);
  return page;
}

void check_writable_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw std::runtime_error(path + ": is a directory");
  }
  const bool existed = std::filesystem::exists(path, error);
  {
    std::ofstream probe(path, std::ios::app);
    if (!probe) throw std::runtime_error(path + ": cannot open for writing");
  }
  if (!existed) std::filesystem::remove(path, error);
}

void write_memory_page(const std::string& path, const std::string& html) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error(path + ": cannot open for writing");
  out << html;
  out.close();
  if (!out) throw std::runtime_error(path + ": write error");
}

}  // namespace cudacache::replay
