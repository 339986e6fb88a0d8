#include "replay_snapshot.h"

#include <chrono>

namespace cudacache::replay {

std::int64_t snapshot_time_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SnapshotTrace::start(std::size_t max_entries) {
  max_entries_ = max_entries;
  first_ = 0;
  ring_.clear();
}

void SnapshotTrace::record(const char* action, std::uint64_t address, std::uint64_t size,
                           std::uint64_t stream) {
  if (!recording()) return;
  SnapshotEntry entry{action, address, size, stream, snapshot_time_us()};
  if (ring_.size() < max_entries_) {
    ring_.push_back(std::move(entry));
    return;
  }
  ring_[first_] = std::move(entry);
  first_ = (first_ + 1) % max_entries_;
}

std::vector<SnapshotEntry> SnapshotTrace::entries() const {
  std::vector<SnapshotEntry> out(ring_.begin() + static_cast<std::ptrdiff_t>(first_), ring_.end());
  out.insert(out.end(), ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(first_));
  return out;
}

}  // namespace cudacache::replay
