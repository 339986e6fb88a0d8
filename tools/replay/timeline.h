// Memory over time during one replay, for the --html page: per event, the live requested bytes
// of the trace, the allocator's allocated and reserved bytes, and its device calls by kind.
// Events are grouped into at most `max_points` buckets of equal length; each bucket keeps the
// minimum and the maximum of every figure, so that peaks survive downsampling exactly and a
// trace of any length gives a page of bounded size.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "device_call_costs.h"
#include "replay_allocator.h"

namespace cudacache::replay {

// Points per allocator and trace: about one per pixel of a page-wide chart.
inline constexpr std::size_t kTimelinePoints = 1000;

struct TimelineRange {
  std::vector<std::uint64_t> min;
  std::vector<std::uint64_t> max;
};

struct Timeline {
  std::size_t events = 0;                // events recorded (up to and including an OOM)
  std::size_t bucket_events = 1;         // events per point
  std::vector<std::size_t> first_event;  // index of each point's first event
  TimelineRange requested;
  TimelineRange allocated;  // empty when the allocator keeps no such figure
  TimelineRange reserved;   // likewise
  // Device calls made during each point's events, by kind: (point, calls), nonzero only.
  std::array<std::vector<std::pair<std::size_t, std::uint64_t>>, kDeviceCallKinds> calls;
};

class TimelineRecorder {
 public:
  TimelineRecorder(std::size_t total_events, std::size_t max_points);

  // The figures after event `event` (events come in order, 0 first). `calls` are the
  // cumulative counts since the replay started (absent off cudasim).
  void record(std::size_t event, std::uint64_t requested, const CurrentFigures& current,
              const std::optional<DeviceCalls>& calls);

  Timeline finish();

 private:
  void close_bucket();

  Timeline timeline_;
  bool bucket_open_ = false;
  bool has_allocated_ = true;
  bool has_reserved_ = true;
  DeviceCalls last_calls_;
  DeviceCalls bucket_calls_;
};

}  // namespace cudacache::replay
