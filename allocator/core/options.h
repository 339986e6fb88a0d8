// Parsed allocator options. The list of options lives in options.inc; this header defines the
// value type of each, and Options, whose fields the table generates.
#pragma once

#include "stack_table.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace cudacache {

// Each value type parses itself and prints itself. parse() returns an empty string on
// success and otherwise a description of what is accepted.

struct SplitSizeLimit {
  static constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();
  std::size_t bytes = kUnlimited;
  std::string parse(std::string_view text);
  std::string to_string() const;
};

// The largest page cudacache's policy may create (Note [Why pages are created]).
struct PageSizeLimit {
  static constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();
  static constexpr std::size_t kLargestMb = std::size_t{1} << 20;  // 1 TiB
  std::size_t bytes = kUnlimited;
  bool is_set() const { return bytes != kUnlimited; }
  std::string parse(std::string_view text);
  std::string to_string() const;
};

struct RoundupDivisions {
  // One entry per power-of-two interval from 1 MiB ([0, 2 MiB) is entry 0) up to 32 GiB and
  // above (entry 15), like PyTorch. 0 and 1 mean plain 512-byte rounding.
  static constexpr std::size_t kIntervals = 16;
  std::array<std::size_t, kIntervals> divisions{};
  std::string parse(std::string_view text);
  std::string to_string() const;
  std::size_t for_size(std::size_t size) const;
};

struct GcThreshold {
  double value = 0.0;  // 0 = disabled
  std::string parse(std::string_view text);
  std::string to_string() const;
};

struct MemoryFraction {
  double value = -1.0;  // negative = unset
  bool is_set() const { return value >= 0.0; }
  std::string parse(std::string_view text);
  std::string to_string() const;
};

struct ExpandableSegments {
  bool enabled = false;
  std::string parse(std::string_view text);
  std::string to_string() const;
};

// Whether the allocator publishes its counters for cudacache-top (stats_page.h).
struct PublishStats {
  bool enabled = true;
  std::string parse(std::string_view text);
  std::string to_string() const;
};

// Whether cudacache's policy cuts, without room, any free page a block would end inside
// (Note [Cut pages] in pages_of_one_block.cpp).
struct CutPages {
  bool enabled = false;
  std::string parse(std::string_view text);
  std::string to_string() const;
};

// Which placement policy: cudacache's own (allocator/README.md, Note [Moving pages]) or
// PyTorch's CUDACachingAllocator, native or, with expandable_segments:True, expandable.
struct AllocatorPolicy {
  enum class Kind { kCudacache, kPyTorch };
  Kind kind = Kind::kCudacache;  // the default
  bool is_cudacache() const { return kind == Kind::kCudacache; }
  std::string parse(std::string_view text);
  std::string to_string() const;
};

struct HistoryEntries {
  std::size_t max_entries = 0;
  std::string parse(std::string_view text);
  std::string to_string() const;
};

// Which stacks are captured (stack_table.h).
struct StackCapture {
  StackKind kind = StackKind::kNone;
  std::string parse(std::string_view text);
  std::string to_string() const;
};

// The growth detector's rising steps (growth_detector.h); 0 = off.
struct GrowthSteps {
  static constexpr unsigned kMax = 1000;
  unsigned rising_steps = 0;
  std::string parse(std::string_view text);
  std::string to_string() const;
};

struct Options {
#define CUDACACHE_OPTION(name, Type, default_value, doc) Type name = default_value;
#include "options.inc"
#undef CUDACACHE_OPTION

  Options() = default;
  // Defaults overridden by `config` ("key:value,..."). Throws cudacache::Error (CONFIG).
  explicit Options(std::string_view config);

  // A key given twice in one string must have the same value both times (kRefused), unless the
  // string joins several that override one another in turn (kLastWins: the
  // cudacache_configure() strings, each checked alone first).
  enum class RepeatedKeys { kRefused, kLastWins };
  // Overrides the keys present in `config`; on error (thrown) *this is unchanged.
  void apply(std::string_view config, RepeatedKeys repeated = RepeatedKeys::kRefused);

  std::size_t max_split_size() const { return max_split_size_mb.bytes; }
  // Whether the allocator wants driver-VMM pages: cudacache's policy or expandable segments.
  bool wants_pages() const { return policy.is_cudacache() || expandable_segments.enabled; }

  // Effective values as a "key:value,..." string that Options(string) accepts.
  std::string to_config_string() const;
  // Every option with its value, default and documentation (cudacache_config_help()).
  std::string describe() const;
  // "max_split_size_mb, roundup_power2_divisions, ..."
  static std::string valid_keys();
};

}  // namespace cudacache
