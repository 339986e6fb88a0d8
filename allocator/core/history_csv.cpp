#include "history_csv.h"

#include <algorithm>
#include <unordered_map>

namespace cudacache {
namespace {

enum class RowOp : std::uint8_t { kAlloc, kFree, kEmptyCache };

// A row before ids and stream numbers are assigned; `allocation` indexes `allocations`.
struct Row {
  RowOp op;
  std::size_t allocation;
};

struct Allocation {
  std::size_t size;
  std::uintptr_t stream;
};

}  // namespace

std::string history_to_csv(const std::vector<HistoryEntry>& entries,
                           const std::vector<LiveBlock>& live) {
  std::vector<Allocation> allocations;
  std::vector<Row> prelude;
  std::vector<Row> body;
  std::unordered_map<std::uintptr_t, std::vector<std::size_t>> open_by_address;

  for (const HistoryEntry& entry : entries) {
    switch (entry.action) {
      case HistoryAction::kAlloc:
        allocations.push_back({entry.size, entry.stream});
        open_by_address[entry.address].push_back(allocations.size() - 1);
        body.push_back({RowOp::kAlloc, allocations.size() - 1});
        break;
      case HistoryAction::kFreeCompleted: {
        const auto it = open_by_address.find(entry.address);
        if (it == open_by_address.end()) {
          allocations.push_back({entry.size, entry.stream});
          prelude.push_back({RowOp::kAlloc, allocations.size() - 1});
          body.push_back({RowOp::kFree, allocations.size() - 1});
          break;
        }
        body.push_back({RowOp::kFree, it->second.back()});
        it->second.pop_back();
        if (it->second.empty()) open_by_address.erase(it);
        break;
      }
      case HistoryAction::kEmptyCache: body.push_back({RowOp::kEmptyCache, 0}); break;
      default: break;
    }
  }
  std::vector<LiveBlock> live_sorted = live;
  std::sort(live_sorted.begin(), live_sorted.end(),
            [](const LiveBlock& a, const LiveBlock& b) { return a.address < b.address; });
  for (const LiveBlock& block : live_sorted) {
    if (open_by_address.contains(block.address)) continue;
    allocations.push_back({block.requested_size, block.stream});
    prelude.push_back({RowOp::kAlloc, allocations.size() - 1});
  }

  std::string csv = "op,id,size,stream\n";
  std::vector<std::size_t> id_of(allocations.size(), 0);
  std::size_t next_id = 0;
  std::unordered_map<std::uintptr_t, std::size_t> stream_numbers{{0, 0}};
  auto emit = [&](const Row& row) {
    if (row.op == RowOp::kEmptyCache) {
      csv += "empty_cache,,,\n";
      return;
    }
    const Allocation& allocation = allocations[row.allocation];
    if (row.op == RowOp::kAlloc) id_of[row.allocation] = next_id++;
    const std::size_t stream =
        stream_numbers.try_emplace(allocation.stream, stream_numbers.size()).first->second;
    csv += row.op == RowOp::kAlloc ? "alloc," : "free,";
    csv += std::to_string(id_of[row.allocation]);
    csv += ',';
    csv += std::to_string(allocation.size);
    csv += ',';
    csv += std::to_string(stream);
    csv += '\n';
  };
  for (const Row& row : prelude) emit(row);
  for (const Row& row : body) emit(row);
  return csv;
}

}  // namespace cudacache
