#include "timeline.h"

#include <algorithm>

namespace cudacache::replay {
namespace {

void extend(TimelineRange& range, bool open, std::uint64_t value) {
  if (!open) {
    range.min.push_back(value);
    range.max.push_back(value);
    return;
  }
  range.min.back() = std::min(range.min.back(), value);
  range.max.back() = std::max(range.max.back(), value);
}

}  // namespace

TimelineRecorder::TimelineRecorder(std::size_t total_events, std::size_t max_points) {
  const std::size_t points = std::max<std::size_t>(max_points, 1);
  timeline_.bucket_events = std::max<std::size_t>((total_events + points - 1) / points, 1);
}

void TimelineRecorder::record(std::size_t event, std::uint64_t requested,
                              const CurrentFigures& current,
                              const std::optional<DeviceCalls>& calls) {
  if (bucket_open_ && event % timeline_.bucket_events == 0) close_bucket();
  if (!bucket_open_) timeline_.first_event.push_back(event);
  extend(timeline_.requested, bucket_open_, requested);
  has_allocated_ = has_allocated_ && current.allocated_bytes.has_value();
  has_reserved_ = has_reserved_ && current.reserved_bytes.has_value();
  extend(timeline_.allocated, bucket_open_, current.allocated_bytes.value_or(0));
  extend(timeline_.reserved, bucket_open_, current.reserved_bytes.value_or(0));
  if (calls) {
    for (std::size_t kind = 0; kind < kDeviceCallKinds; ++kind) {
      bucket_calls_.counts[kind] += calls->counts[kind] - last_calls_.counts[kind];
    }
    last_calls_ = *calls;
  }
  bucket_open_ = true;
  timeline_.events = event + 1;
}

void TimelineRecorder::close_bucket() {
  const std::size_t point = timeline_.first_event.size() - 1;
  for (std::size_t kind = 0; kind < kDeviceCallKinds; ++kind) {
    if (bucket_calls_.counts[kind] != 0) {
      timeline_.calls[kind].emplace_back(point, bucket_calls_.counts[kind]);
    }
  }
  bucket_calls_ = {};
  bucket_open_ = false;
}

Timeline TimelineRecorder::finish() {
  if (bucket_open_) close_bucket();
  if (!has_allocated_) timeline_.allocated = {};
  if (!has_reserved_) timeline_.reserved = {};
  return std::move(timeline_);
}

}  // namespace cudacache::replay
