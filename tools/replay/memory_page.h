// The --html page: memory over time of every allocator compared, per trace, as one
// self-contained HTML file. The page is tools/html/memory_page.html (embedded at build time;
// the Python package renders the same file) with the figures substituted as JSON; its script
// draws the charts. The JSON (memory_page_json) is the page's whole input:
//
//   {"format": "cudacache-memory-page/1", "generator", "created", "notes": [...],
//    "traces": [{"name", "source", "events", "peak_requested", "capacity",
//                "min_capacity_searched", "notes": [...],
//                "series": [{"name", "events", "bucket_events", "first_event": [...],
//                            "requested_min", "requested_max", "allocated_min",
//                            "allocated_max", "reserved_min", "reserved_max" (absent: none),
//                            "peak_allocated", "peak_reserved", "min_capacity",
//                            "oom_event", "note", "calls": {"malloc": [[point, n], ...]}}]}]}
// A figure that does not exist is an absent key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "report.h"

namespace cudacache::replay {

// The page's data for these traces (results without a timeline get a note instead).
std::string memory_page_json(const RunContext& context, const std::vector<TraceReport>& reports,
                             const std::vector<std::string>& sources);

// The template with `data_json` in place. The JSON is made safe to sit inside a <script>
// element: '<', '>' and '&' (which JSON has only inside strings) become \u escapes, so no
// trace name or path can close the element or inject markup.
std::string render_memory_page(std::string_view data_json);

// The embedded template, as built (tools/html/memory_page.html).
std::string_view memory_page_template();

// Checks before any replay that `path` can be written (an unwritable path fails in seconds,
// not after an hour of replays); throws std::runtime_error naming it.
void check_writable_file(const std::string& path);

// Writes the page; throws std::runtime_error naming the path on failure.
void write_memory_page(const std::string& path, const std::string& html);

}  // namespace cudacache::replay
