// How memory figures are written and summarized, the same in the OOM message, the stats tools
// and cudacache-top (which compiles this header without the rest of the allocator).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>

namespace cudacache {

// PyTorch's format: "N bytes" up to 1024 bytes, else KiB/MiB/GiB with two decimals.
inline std::string format_size(std::size_t bytes) {
  if (bytes <= 1024) return std::to_string(bytes) + " bytes";
  const char* unit = "KiB";
  double value = static_cast<double>(bytes) / 1024.0;
  if (value >= 1024.0) {
    value /= 1024.0;
    unit = "MiB";
  }
  if (value >= 1024.0) {
    value /= 1024.0;
    unit = "GiB";
  }
  char text[64];
  std::snprintf(text, sizeof text, "%.2f %s", value, unit);
  return text;
}

// 1 - largest_free_cached / (reserved - allocated); 0 when nothing is cached.
inline double fragmentation(std::size_t reserved, std::size_t allocated,
                            std::size_t largest_free_cached) {
  if (reserved <= allocated) return 0.0;
  const double free_cached = static_cast<double>(reserved - allocated);
  return std::clamp(1.0 - static_cast<double>(largest_free_cached) / free_cached, 0.0, 1.0);
}

}  // namespace cudacache
