// What cudacache-top prints: the table (sortable), JSON for scripts, and Prometheus' text
// exposition format (version 0.0.4) for node_exporter's textfile collector or a scraper.
#pragma once

#include "page_scan.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudacache::top {

enum class SortKey {
  kPid,
  kCommand,
  kDevice,
  kAllocated,
  kReserved,
  kPeak,
  kCache,
  kLargestFree,
  kFragmentation,
  kOoms,
  kCalls
};

struct SortKeyInfo {
  SortKey key;
  const char* name;  // for --sort
  char letter;       // the key that selects it in the live view
  const char* column;
};
const std::vector<SortKeyInfo>& sort_keys();
std::optional<SortKey> sort_key_named(std::string_view name);
std::optional<SortKey> sort_key_of_letter(char letter);
const SortKeyInfo& info(SortKey key);

// Numbers largest first, pid/command/device smallest first; ties by (pid, device).
void sort_rows(std::vector<Row>& rows, SortKey key);

// The table: a header line and one line per row, `width` columns at most (0: no limit).
std::string table(const Scan& scan, SortKey key, std::size_t width = 0);
std::string json(const Scan& scan);
std::string prometheus(const Scan& scan);

}  // namespace cudacache::top
