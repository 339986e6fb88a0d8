// Finding and reading the stats pages of every process (allocator/core/stats_page.h): one Row
// per process and device, and a note for every file that was skipped or removed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cudacache::top {

struct Row {
  long pid = 0;
  // 0; 1 and up for another copy of the allocator in the same process (the preload beside
  // libcudacache.so), whose rows would otherwise look the same.
  std::uint64_t page = 0;
  std::string command;  // as the process wrote it: valid UTF-8 (stats_page.h)
  int device = 0;
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  std::uint64_t requested = 0;
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_reserved = 0;
  std::uint64_t cached = 0;  // reserved - allocated
  std::uint64_t largest_free = 0;
  double fragmentation = 0.0;  // memory_figures.h's, as in the OOM message
  std::uint64_t allocations = 0;
  std::uint64_t segments = 0;
  std::uint64_t ooms = 0;
  std::uint64_t alloc_retries = 0;
  std::uint64_t device_allocs = 0;
  std::uint64_t device_frees = 0;
  std::uint64_t device_calls() const { return device_allocs + device_frees; }
};

struct Scan {
  std::string directory;
  std::vector<Row> rows;
  std::vector<std::string> notes;  // skipped, busy, corrupt or removed pages, one sentence each
  std::string directory_error;     // why the directory could not be opened; empty when it was
  int processes = 0;               // pages read
  int skipped = 0;                 // pages skipped (bad, foreign, unreadable)
  int removed = 0;                 // abandoned pages removed
};

// Reads every stats page in `directory`. Pages of processes that no longer run are removed
// when they are this user's and `remove_abandoned` is set; other users' pages and files that
// are not valid pages are skipped with a note. Never throws for a bad file.
Scan scan_pages(const std::string& directory, bool remove_abandoned);

}  // namespace cudacache::top
