// Size policy: how a request size becomes a block size, which pool serves it, and how big a
// new segment is. PyTorch's constants and rules (c10/cuda/CUDACachingAllocator.cpp).
#pragma once

#include "options.h"

#include <bit>
#include <cstddef>
#include <cstdint>

namespace cudacache {

inline constexpr std::size_t kMinBlockSize = 512;                   // all sizes round to this
inline constexpr std::size_t kSmallSize = std::size_t{1} << 20;     // largest small-pool request
inline constexpr std::size_t kSmallBuffer = std::size_t{2} << 20;   // small-pool segment
inline constexpr std::size_t kLargeBuffer = std::size_t{20} << 20;  // large segment below 10 MiB
inline constexpr std::size_t kMinLargeAlloc = std::size_t{10} << 20;
inline constexpr std::size_t kRoundLarge = std::size_t{2} << 20;  // large segment granularity
// Expandable segments: page size per pool, and the reserved range per (stream, pool) in
// eighths of the device's memory (PyTorch reserves 1 1/8 x so that every page fits).
inline constexpr std::size_t kSmallPage = kSmallBuffer;
inline constexpr std::size_t kLargePage = kLargeBuffer;
inline constexpr std::size_t kReservedEighths = 9;
// Largest request accepted: anything larger cannot be a ssize_t (PyTorch's ABI) and would
// overflow when rounded. Such requests are invalid arguments, not out-of-memory errors.
inline constexpr std::size_t kMaxRequestBytes = PTRDIFF_MAX;

enum class PoolKind : std::uint8_t { kSmall, kLarge };

inline PoolKind pool_for(std::size_t rounded_size) {
  return rounded_size <= kSmallSize ? PoolKind::kSmall : PoolKind::kLarge;
}

inline std::size_t round_up(std::size_t size, std::size_t step) {
  return (size + step - 1) / step * step;
}

// The next 1/divisions step of the power-of-two interval holding size (divisions >= 2).
inline std::size_t round_to_power2_division(std::size_t size, std::size_t divisions) {
  if (std::has_single_bit(size)) return size;
  const std::size_t floor = std::bit_floor(size);
  const std::size_t step = floor >> (static_cast<unsigned>(std::bit_width(divisions)) - 1);
  if (step == 0) return size;  // divisions finer than a byte: nothing to round
  const std::size_t rounded_down = size & ~(step - 1);
  return rounded_down == size ? size : rounded_down + step;
}

// Block size for a request. As PyTorch, division rounding applies only when
// size > 512 * divisions; below that, 512-byte rounding is finer anyway. Compared without
// multiplying: any power of two parses, and 512 * 2^55 wrapped to 0, which rounded every size
// up to the next power of two.
inline std::size_t round_size(std::size_t size, const RoundupDivisions& roundup) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const std::size_t divisions = roundup.for_size(size);
  if (divisions > 1 && (size - 1) / kMinBlockSize >= divisions) {
    return round_to_power2_division(size, divisions);
  }
  return round_up(size, kMinBlockSize);
}

// Size of a new segment for a block of rounded_size bytes.
inline std::size_t segment_size(std::size_t rounded_size) {
  if (rounded_size <= kSmallSize) return kSmallBuffer;
  if (rounded_size < kMinLargeAlloc) return kLargeBuffer;
  return round_up(rounded_size, kRoundLarge);
}

// Whether a free block of block_size serving `size` is split, leaving a free remainder. With
// expandable segments every pool splits off any remainder of at least 512 B, whatever
// max_split_size says (PyTorch: the rest of a segment is its growth room, not a cached block).
inline bool should_split(PoolKind pool, std::size_t block_size, std::size_t size,
                         std::size_t max_split_size, bool expandable = false) {
  const std::size_t remaining = block_size - size;
  if (pool == PoolKind::kSmall || expandable) return remaining >= kMinBlockSize;
  return size < max_split_size && remaining > kSmallSize;
}

// Whether a cached free block may serve a request (beyond being large enough and on the
// request's stream): oversize blocks never serve requests below max_split_size, nor requests
// kLargeBuffer or more smaller than themselves.
inline bool may_serve(std::size_t block_size, std::size_t size, std::size_t max_split_size) {
  if (size < max_split_size && block_size >= max_split_size) return false;
  if (size >= max_split_size && block_size >= size + kLargeBuffer) return false;
  return true;
}

}  // namespace cudacache
