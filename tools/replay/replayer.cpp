#include "replayer.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "content_check.h"
#include "replay_allocator.h"
#include "simulated_device.h"

namespace cudacache::replay {
namespace {

// Progress is reported this often: rarely enough to cost nothing in the timed loop.
constexpr std::size_t kProgressInterval = 4096;

// One CUDA stream per trace stream number; 0 is the legacy default stream.
class TraceStreams {
 public:
  explicit TraceStreams(std::uint32_t count) : streams_(count, nullptr) {
    for (std::uint32_t i = 1; i < count; ++i) {
      cudaError_t error = cudaStreamCreateWithFlags(&streams_[i], cudaStreamNonBlocking);
      if (error != cudaSuccess) {
        destroy();
        throw std::runtime_error(std::string("cudaStreamCreate failed: ") +
                                 cudaGetErrorString(error));
      }
    }
  }
  ~TraceStreams() { destroy(); }
  TraceStreams(const TraceStreams&) = delete;
  TraceStreams& operator=(const TraceStreams&) = delete;

  cudaStream_t operator[](std::uint32_t number) const { return streams_[number]; }

 private:
  void destroy() {
    for (cudaStream_t& stream : streams_) {
      if (stream != nullptr) cudaStreamDestroy(stream);
      stream = nullptr;
    }
  }
  std::vector<cudaStream_t> streams_;
};

// Adds one event, started at `start` with the thread's call total at `call_ns_before`, to the
// side of `split` it belongs to.
void add_event_time(ReplaySplitTime& split, std::chrono::steady_clock::time_point start,
                    std::uint64_t call_ns_before) {
  const auto stop = std::chrono::steady_clock::now();
  const std::uint64_t call_ns = thread_device_call_ns().value_or(call_ns_before) - call_ns_before;
  const double seconds = std::chrono::duration<double>(stop - start).count();
  const double own = std::max(0.0, seconds - static_cast<double>(call_ns) * 1e-9);
  if (call_ns > 0) {
    ++split.calling_events;
    split.calling_seconds += own;
  } else {
    ++split.other_events;
    split.other_seconds += own;
  }
}

// Runs a content check; when it fails, frees every live block before the error goes on, so that
// the allocator is destroyed with nothing allocated (as after a replay that completes).
template <typename Check>
void check_or_free_live(ReplayAllocator& allocator, const std::vector<void*>& pointers,
                        std::vector<bool>& live, const Check& check) {
  try {
    check();
  } catch (const ContentError&) {
    for (std::size_t slot = 0; slot < live.size(); ++slot) {
      if (live[slot]) allocator.free(pointers[slot]);
      live[slot] = false;
    }
    throw;
  }
}

std::uint64_t round_up(std::uint64_t value, std::uint64_t step) {
  return (value + step - 1) / step * step;
}

}  // namespace

ReplayResult replay_trace(const Trace& trace, const std::string& allocator_name,
                          std::optional<std::uint64_t> capacity_bytes,
                          const ProgressCallback& progress, const ReplayRecording& recording) {
  ReplayResult result;
  result.allocator = allocator_name;
  if (capacity_bytes) set_simulated_capacity(*capacity_bytes);
  result.capacity_bytes = simulated_capacity();

  TraceStreams streams(trace.stream_count);
  std::vector<void*> pointers(trace.alloc_count, nullptr);
  std::vector<bool> live(trace.alloc_count, false);
  {
    std::unique_ptr<ReplayAllocator> allocator = make_replay_allocator(allocator_name);
    const std::size_t total = trace.events.size();
    // Room for every entry: an alloc gives an alloc entry and the segment calls it needed (pages
    // moved or mapped), a free three (nocache: free_requested, free_completed, segment_free),
    // empty_cache what it releases. The ring grows as it fills: a generous bound costs nothing.
    if (recording.snapshot) allocator->record_history(8 * total + 1024);
    std::optional<TimelineRecorder> timeline;
    if (recording.timeline) timeline.emplace(total, recording.timeline_points);
    std::uint64_t live_requested = 0;
    reset_device_counters();
    const std::optional<std::uint64_t> call_ns_before = thread_device_call_ns();
    // Off cudasim there is no call time to tell the two kinds of event apart.
    std::optional<ReplaySplitTime> split;
    if (recording.split_time && call_ns_before) split.emplace();
    std::optional<ContentCheck> contents;
    if (recording.check_contents) contents.emplace(trace.alloc_count);
    const auto start = std::chrono::steady_clock::now();
    std::size_t i = 0;
    for (; i < total; ++i) {
      const TraceEvent& event = trace.events[i];
      if (progress && i % kProgressInterval == 0) progress(i, total);
      std::uint64_t event_call_ns = 0;
      std::chrono::steady_clock::time_point event_start;
      if (split) {
        event_call_ns = thread_device_call_ns().value_or(0);
        event_start = std::chrono::steady_clock::now();
      }
      switch (event.op) {
        case TraceOp::kAlloc:
          try {
            pointers[event.slot] = allocator->allocate(event.size, streams[event.stream]);
          } catch (const ReplayOutOfMemory& error) {
            result.oom = true;
            result.oom_event = i;
            result.oom_message = error.what();
          }
          live[event.slot] = !result.oom;
          if (contents && live[event.slot]) {
            check_or_free_live(*allocator, pointers, live, [&] {
              contents->stamp(i, event.slot, pointers[event.slot], event.size);
            });
          }
          break;
        case TraceOp::kFree:
          if (contents) {
            check_or_free_live(*allocator, pointers, live,
                               [&] { contents->verify_and_forget(i, event.slot); });
          }
          allocator->free(pointers[event.slot]);
          live[event.slot] = false;
          break;
        case TraceOp::kEmptyCache:
          allocator->empty_cache();
          if (contents) {
            check_or_free_live(*allocator, pointers, live,
                               [&] { contents->verify_live(i, "empty_cache"); });
          }
          break;
      }
      if (split) add_event_time(*split, event_start, event_call_ns);
      if (timeline) {
        if (event.op == TraceOp::kAlloc && !result.oom) live_requested += event.size;
        if (event.op == TraceOp::kFree) live_requested -= event.size;
        timeline->record(i, live_requested, allocator->current(), device_call_counts());
      }
      if (result.oom) break;
    }
    const auto stop = std::chrono::steady_clock::now();
    result.seconds = std::chrono::duration<double>(stop - start).count();
    if (const std::optional<std::uint64_t> call_ns = thread_device_call_ns();
        call_ns && call_ns_before) {
      result.simulator_call_seconds = static_cast<double>(*call_ns - *call_ns_before) * 1e-9;
    }
    result.split_time = split;
    result.events_replayed = result.oom ? i + 1 : total;
    if (progress) progress(result.events_replayed, total);

    const AllocatorFigures figures = allocator->figures();
    result.peak_allocated_bytes = figures.peak_allocated_bytes;
    result.peak_reserved_bytes = figures.peak_reserved_bytes;
    if (auto counters = device_counters()) {
      result.device_peak_bytes = counters->peak_bytes;
      result.device_mallocs = counters->mallocs;
      result.device_frees = counters->frees;
    }
    result.device_calls = device_call_counts();
    if (timeline) result.timeline = timeline->finish();
    if (recording.snapshot) result.snapshot = allocator->snapshot();
    if (contents) {
      check_or_free_live(*allocator, pointers, live, [&] {
        contents->verify_live(result.events_replayed, "end of the replay");
      });
      result.intact_stamps = contents->intact_stamps();
    }
    for (std::size_t slot = 0; slot < live.size(); ++slot) {
      if (live[slot]) allocator->free(pointers[slot]);
    }
  }
  if (auto counters = device_counters(); counters && counters->in_use_bytes != 0) {
    // The next allocator would start on a partly used device: the comparison would be unfair.
    throw std::runtime_error("allocator '" + allocator_name + "' left " +
                             std::to_string(counters->in_use_bytes) +
                             " bytes of device memory allocated after it was destroyed");
  }
  return result;
}

MinCapacity find_min_capacity(const Trace& trace, const std::string& allocator_name,
                              std::uint64_t upper_limit, const ProgressCallback& progress,
                              bool check_contents) {
  ReplayRecording recording;
  recording.check_contents = check_contents;
  return find_min_capacity(
      [&](std::uint64_t capacity) {
        return !replay_trace(trace, allocator_name, capacity, progress, recording).oom;
      },
      trace.peak_requested_bytes, upper_limit);
}

std::uint64_t verified_steps(std::uint64_t steps) {
  constexpr std::uint64_t kLeast = 8;
  constexpr std::uint64_t kPerThousand = 5;
  return std::max(kLeast, (steps * kPerThousand + 999) / 1000);
}

MinCapacity find_min_capacity(const std::function<bool(std::uint64_t)>& completes,
                              std::uint64_t peak_requested_bytes, std::uint64_t upper_limit) {
  MinCapacity found;
  // Capacities are k * resolution, and the limit itself as the last (a limit that is no multiple
  // of the resolution was rounded down, and a trace that completed on it was "not found").
  // `failing` is a k known (or proven) to fail, `passing` one known to complete.
  const std::uint64_t step = kCapacityResolution;
  const auto capacity_of = [&](std::uint64_t k) { return std::min(k * step, upper_limit); };
  const auto completes_at = [&](std::uint64_t k) {
    ++found.replays;
    return completes(capacity_of(k));
  };
  const std::uint64_t floor_steps = round_up(peak_requested_bytes, step) / step;
  std::uint64_t failing = floor_steps == 0 ? 0 : floor_steps - 1;  // below the peak: impossible
  const std::uint64_t limit_steps = upper_limit / step + (upper_limit % step != 0 ? 1 : 0);
  std::uint64_t passing = std::min(std::max<std::uint64_t>(2 * floor_steps, 1), limit_steps);
  if (passing <= failing) return found;  // the limit is below the workload's floor
  while (!completes_at(passing)) {
    if (passing >= limit_steps) return found;
    failing = passing;
    passing = std::min(2 * passing, limit_steps);
  }
  while (passing - failing > 1) {
    const std::uint64_t middle = failing + (passing - failing) / 2;
    if (completes_at(middle)) {
      passing = middle;
    } else {
      failing = middle;
    }
  }
  // Note [Smallest device]: checked upward. `verified` counts the steps from `passing` on that
  // completed; a failure makes the next step the candidate, not yet run.
  std::uint64_t verified = 1;
  for (std::uint64_t k = passing + 1; k <= limit_steps && verified <= verified_steps(passing);
       ++k) {
    if (completes_at(k)) {
      ++verified;
    } else {
      passing = k + 1;
      verified = 0;
    }
  }
  if (passing > limit_steps) return found;  // it failed on the limit itself
  found.bytes = capacity_of(passing);
  return found;
}

}  // namespace cudacache::replay
