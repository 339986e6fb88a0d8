// Replays a trace through one allocator on device 0 and measures it; finds the smallest
// simulated device on which a trace completes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "device_call_costs.h"
#include "replay_snapshot.h"
#include "timeline.h"
#include "trace.h"

namespace cudacache::replay {

// Called now and then with (events done, events total).
using ProgressCallback = std::function<void(std::size_t, std::size_t)>;

// ReplayResult::split_time: defined outside ReplayResult because clang cannot default-construct
// a nested struct with member initializers inside std::optional while the outer class is
// incomplete.
struct ReplaySplitTime {
  std::size_t calling_events = 0;
  double calling_seconds = 0.0;  // without the time inside the calls
  std::size_t other_events = 0;
  double other_seconds = 0.0;
};

struct ReplayResult {
  std::string allocator;
  // As the allocator counts them (see AllocatorFigures).
  std::optional<std::uint64_t> peak_allocated_bytes;
  std::optional<std::uint64_t> peak_reserved_bytes;
  // As cudasim counts them: the honest device-side figures. Absent on a real GPU.
  std::optional<std::uint64_t> device_peak_bytes;
  std::optional<std::uint64_t> device_mallocs;
  std::optional<std::uint64_t> device_frees;
  // Every device call by kind, failed ones included (cudasim_get_call_counts), counted like
  // device_mallocs during the event loop only. Absent on a real GPU.
  std::optional<DeviceCalls> device_calls;
  std::optional<std::uint64_t> capacity_bytes;  // simulated capacity during the replay
  bool oom = false;
  std::optional<std::size_t> oom_event;  // 0-based index of the event that failed
  std::string oom_message;
  std::size_t events_replayed = 0;  // including the failed one
  double seconds = 0.0;             // the event loop only, not setup or cleanup
  // The part of `seconds` spent inside cudasim's device calls (cudasim_thread_call_ns): the
  // simulator's cost per call, not a GPU's. seconds - this is the allocator's own time.
  std::optional<double> simulator_call_seconds;
  std::optional<std::uint64_t> min_capacity_bytes;
  std::size_t min_capacity_replays = 0;
  // Only when ReplayRecording asked for them (--html, --memory-viz).
  std::optional<Timeline> timeline;
  std::optional<ReplaySnapshot> snapshot;  // taken after the last event, before the cleanup
  // Only with ReplayRecording::split_time (--split-time): the allocator's own time split
  // between the events that made a timed device call (a growth, a move, a release) and those
  // that made none (a cache hit, a free). Each event is timed on its own, which adds two
  // clock readings per event to `seconds`: compare these with each other, not with `seconds`.
  std::optional<ReplaySplitTime> split_time;
  // Only with ReplayRecording::check_contents: the stamps read back intact (every stamp of
  // every block, at its free or at the end). A damaged one throws instead.
  std::optional<std::uint64_t> intact_stamps;

  // The device calls weighted by the cost table (device_call_costs.h): an estimate of the time
  // a GPU driver would spend in them, not a measurement.
  std::optional<double> estimated_device_call_seconds() const {
    if (!device_calls) return std::nullopt;
    return device_calls->estimated_seconds();
  }

  // The event loop without the time inside cudasim's device calls: the allocator's own work
  // (and the loop's). All of `seconds` off cudasim.
  double allocator_seconds() const {
    return seconds - std::min(seconds, simulator_call_seconds.value_or(0.0));
  }

  double events_per_second() const {
    return seconds > 0.0 ? static_cast<double>(events_replayed) / seconds : 0.0;
  }
};

// What a replay records beyond its figures. Off by default: recording reads the allocator's
// figures after every event, which a plain replay's timing must not include.
struct ReplayRecording {
  bool timeline = false;  // ReplayResult::timeline, for --html
  std::size_t timeline_points = kTimelinePoints;
  bool snapshot = false;    // ReplayResult::snapshot, for --memory-viz
  bool split_time = false;  // ReplayResult::split_time, for --split-time (cudasim only)
  // --check-contents: every block stamped and checked (Note [Checked contents] in
  // content_check.h); a block that lost a stamp or overlaps another throws ContentError.
  bool check_contents = false;
};

// Replays `trace` through a fresh allocator `allocator_name`. With `capacity_bytes`, the
// simulated device gets that capacity first. An out-of-memory stops the replay and is recorded
// in the result; everything still live is then freed and the allocator destroyed.
ReplayResult replay_trace(const Trace& trace, const std::string& allocator_name,
                          std::optional<std::uint64_t> capacity_bytes,
                          const ProgressCallback& progress = {},
                          const ReplayRecording& recording = {});

// Resolution of the minimum-capacity search.
inline constexpr std::uint64_t kCapacityResolution = std::uint64_t{2} << 20;

struct MinCapacity {
  std::optional<std::uint64_t> bytes;  // absent when even the largest size tried failed
  std::size_t replays = 0;
};

// Note [Smallest device]: the smallest multiple of kCapacityResolution on which the whole trace
// completes without OOM and so does every size above it up to verified_steps() steps larger
// (or `upper_limit`). Found by bisection between the peak requested bytes (nothing smaller can
// work) and a size where it completes (by doubling from 2x the peak, up to `upper_limit`), then
// checked upward. Success need not be monotonic in capacity: a policy whose page sizes follow
// the device's size can strand a little more memory on a slightly larger device. Bisection
// alone reported `cs336_small`'s smallest device under cudacache's policy of 2026-12-05 as
// 1.0019 x its peak (3,678 MiB), where 3,682 MiB ran out of memory: no promise at all. A
// failure found above restarts the check one step past it; the answer completes, and so does
// every step checked above it.
// With `check_contents`, every replay of the search checks contents (--check-contents).
MinCapacity find_min_capacity(const Trace& trace, const std::string& allocator_name,
                              std::uint64_t upper_limit, const ProgressCallback& progress = {},
                              bool check_contents = false);
// The search itself, over any predicate: `completes(bytes)` for a device of `bytes`.
MinCapacity find_min_capacity(const std::function<bool(std::uint64_t)>& completes,
                              std::uint64_t peak_requested_bytes, std::uint64_t upper_limit);
// How many steps above a size of `steps` steps are checked: 0.5 % of it, at least 8 (16 MiB).
std::uint64_t verified_steps(std::uint64_t steps);

}  // namespace cudacache::replay
