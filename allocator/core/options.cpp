#include "options.h"

#include "error_report.h"
#include "history.h"

#include <cudacache/cudacache.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cudacache {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kMinSplitSizeMb = 20;  // kLargeBuffer in MiB, as PyTorch

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

bool parse_unsigned(std::string_view text, std::size_t* out) {
  if (text.empty()) return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return error == std::errc() && end == text.data() + text.size();
}

bool parse_double(std::string_view text, double* out) {
  if (text.empty()) return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return error == std::errc() && end == text.data() + text.size();
}

// The shortest text that parses back to the same double: a stream's six digits printed
// garbage_collection_threshold:0.99999999999996 as 1, which the parser refuses.
std::string format_double(double value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), value);
  return error == std::errc() ? std::string(text, end) : std::string("nan");
}

// Splits at top-level commas: the commas inside [...] belong to a value.
std::vector<std::string_view> split_entries(std::string_view config, std::string* error) {
  std::vector<std::string_view> entries;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= config.size(); ++i) {
    const char c = i < config.size() ? config[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) {
      *error = "unbalanced ']'";
      return {};
    }
    if (c == ',' && depth == 0) {
      entries.push_back(trim(config.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (depth != 0) *error = "unbalanced '['";
  return entries;
}

// A key given a second time in one string with another value (as its option prints it, so
// that 64 and 064 agree) is refused, naming both values.
void refuse_a_second_value(std::vector<std::pair<std::string_view, std::string>>& set_here,
                           std::string_view key, std::string value, std::string_view config) {
  for (const auto& [earlier_key, earlier_value] : set_here) {
    if (earlier_key == key && earlier_value != value) {
      report::config("key '" + std::string(key) + "' is given twice with different values ('" +
                     earlier_value + "' and '" + value + "') in \"" + std::string(config) + "\"");
    }
  }
  set_here.emplace_back(key, std::move(value));
}

}  // namespace

std::string SplitSizeLimit::parse(std::string_view text) {
  if (text == "unlimited") {
    bytes = kUnlimited;
    return {};
  }
  // At most what a signed 64-bit byte count holds, so that memory_stats() shows it as it is
  // (not as a negative number); anything larger is 'unlimited'.
  constexpr std::size_t kLargestMb = static_cast<std::size_t>(PTRDIFF_MAX) / kMiB;
  std::size_t megabytes = 0;
  if (!parse_unsigned(text, &megabytes) || megabytes < kMinSplitSizeMb || megabytes > kLargestMb) {
    return "an integer number of MiB from 20 to " + std::to_string(kLargestMb) + ", or 'unlimited'";
  }
  bytes = megabytes * kMiB;
  return {};
}

std::string SplitSizeLimit::to_string() const {
  return bytes == kUnlimited ? "unlimited" : std::to_string(bytes / kMiB);
}

std::string PageSizeLimit::parse(std::string_view text) {
  if (text == "unlimited") {
    bytes = kUnlimited;
    return {};
  }
  std::size_t megabytes = 0;
  if (!parse_unsigned(text, &megabytes) || megabytes < 2 || megabytes % 2 != 0 ||
      megabytes > kLargestMb) {
    return "an even integer number of MiB (whole 2 MiB granules) from 2 to " +
           std::to_string(kLargestMb) + ", or 'unlimited'";
  }
  bytes = megabytes * kMiB;
  return {};
}

std::string PageSizeLimit::to_string() const {
  return is_set() ? std::to_string(bytes / kMiB) : "unlimited";
}

std::string RoundupDivisions::parse(std::string_view text) {
  const std::string accepted =
      "a power of two, or a table [MiB:N,...,>:N] with power-of-two MiB boundaries and N 0 or "
      "a power of two";
  if (text.empty()) return accepted;
  std::array<std::size_t, kIntervals> table{};
  if (text.front() != '[') {
    std::size_t value = 0;
    if (!parse_unsigned(text, &value) || !std::has_single_bit(value)) return accepted;
    table.fill(value);
    divisions = table;
    return {};
  }
  if (text.back() != ']' || text.size() < 3) return accepted;
  std::string_view rest = text.substr(1, text.size() - 2);
  bool first = true;
  std::size_t last_index = 0;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view entry = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    // "[256:2,]" as "[,256:2]": an empty entry is refused wherever it is.
    if (comma != std::string_view::npos && trim(rest).empty()) return accepted;
    const std::size_t colon = entry.find(':');
    if (colon == std::string_view::npos) return accepted;
    const std::string_view boundary_text = trim(entry.substr(0, colon));
    std::size_t value = 0;
    if (!parse_unsigned(trim(entry.substr(colon + 1)), &value) ||
        (value != 0 && !std::has_single_bit(value))) {
      return accepted;
    }
    if (boundary_text == ">") {
      // As PyTorch: every interval above the last named boundary (above interval 0 when none).
      const std::size_t from = last_index + 1;
      std::fill(table.begin() + static_cast<std::ptrdiff_t>(std::min(from, kIntervals)),
                table.end(), value);
      continue;
    }
    std::size_t boundary = 0;
    if (!parse_unsigned(boundary_text, &boundary) || !std::has_single_bit(boundary)) {
      return accepted;
    }
    const std::size_t index = std::min<std::size_t>(
        static_cast<std::size_t>(std::bit_width(boundary)) - 1, kIntervals - 1);
    if (first) {
      std::fill(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(index), value);
      first = false;
    }
    table[index] = value;
    last_index = index;
  }
  divisions = table;
  return {};
}

std::string RoundupDivisions::to_string() const {
  const bool uniform = std::all_of(divisions.begin(), divisions.end(),
                                   [&](std::size_t d) { return d == divisions.front(); });
  // 0 and 1 both mean plain 512-byte rounding; a bare 0 is not accepted (as in PyTorch), so the
  // default prints as 1.
  if (uniform) return std::to_string(std::max<std::size_t>(divisions.front(), 1));
  std::string text = "[";
  for (std::size_t i = 0; i < kIntervals; ++i) {
    text += (i + 1 == kIntervals ? std::string(">") : std::to_string(std::size_t{1} << i)) + ":" +
            std::to_string(divisions[i]) + (i + 1 == kIntervals ? "]" : ",");
  }
  return text;
}

std::size_t RoundupDivisions::for_size(std::size_t size) const {
  // Interval 0 holds sizes below 2 MiB, interval i sizes in [2^i MiB, 2^(i+1) MiB).
  const int log_size = static_cast<int>(std::bit_width(size)) - 1;
  const int start = 20;  // log2(1 MiB)
  const std::size_t index = log_size > start ? static_cast<std::size_t>(log_size - start) : 0;
  return divisions[std::min(index, kIntervals - 1)];
}

std::string GcThreshold::parse(std::string_view text) {
  if (text == "unset") {
    value = 0.0;
    return {};
  }
  double parsed = 0.0;
  if (!parse_double(text, &parsed) || !(parsed > 0.0 && parsed < 1.0)) {
    return "a number strictly between 0 and 1, or 'unset'";
  }
  value = parsed;
  return {};
}

std::string GcThreshold::to_string() const { return value > 0.0 ? format_double(value) : "unset"; }

std::string MemoryFraction::parse(std::string_view text) {
  if (text == "unset") {
    value = -1.0;
    return {};
  }
  double parsed = 0.0;
  if (!parse_double(text, &parsed) || !(parsed >= 0.0 && parsed <= 1.0)) {
    return "a number between 0 and 1, or 'unset'";
  }
  value = parsed + 0.0;  // -0 is 0 (printed back as 0)
  return {};
}

std::string MemoryFraction::to_string() const { return is_set() ? format_double(value) : "unset"; }

namespace {

// The True/False options: PyTorch's spelling, and its lower-case form.
std::string parse_true_or_false(std::string_view text, bool* enabled) {
  if (text == "False" || text == "false") {
    *enabled = false;
    return {};
  }
  if (text == "True" || text == "true") {
    *enabled = true;
    return {};
  }
  return "True or False";
}

std::string true_or_false(bool enabled) { return enabled ? "True" : "False"; }

}  // namespace

std::string ExpandableSegments::parse(std::string_view text) {
  return parse_true_or_false(text, &enabled);
}
std::string ExpandableSegments::to_string() const { return true_or_false(enabled); }

std::string PublishStats::parse(std::string_view text) {
  return parse_true_or_false(text, &enabled);
}
std::string PublishStats::to_string() const { return true_or_false(enabled); }

std::string CutPages::parse(std::string_view text) { return parse_true_or_false(text, &enabled); }
std::string CutPages::to_string() const { return true_or_false(enabled); }

std::string AllocatorPolicy::parse(std::string_view text) {
  if (text == "cudacache") {
    kind = Kind::kCudacache;
  } else if (text == "pytorch") {
    kind = Kind::kPyTorch;
  } else {
    return "cudacache or pytorch";
  }
  return {};
}

std::string AllocatorPolicy::to_string() const { return is_cudacache() ? "cudacache" : "pytorch"; }

std::string HistoryEntries::parse(std::string_view text) {
  constexpr const char* kExpected = "an integer from 0 (off) to 100000000 (entries)";
  static_assert(kMaxHistoryEntries == 100'000'000, "keep the message in step");
  if (!parse_unsigned(text, &max_entries) || max_entries > kMaxHistoryEntries) return kExpected;
  return {};
}

std::string HistoryEntries::to_string() const { return std::to_string(max_entries); }

std::string StackCapture::parse(std::string_view text) {
  if (!parse_stack_kind(text, &kind)) return "none, cpp, python or all";
  return {};
}

std::string StackCapture::to_string() const { return stack_kind_name(kind); }

std::string GrowthSteps::parse(std::string_view text) {
  std::size_t steps = 0;
  if (!parse_unsigned(text, &steps) || steps == 1 || steps > kMax) {
    return "an integer: 0 (off) or 2 to 1000 (rising steps)";
  }
  rising_steps = static_cast<unsigned>(steps);
  return {};
}

std::string GrowthSteps::to_string() const { return std::to_string(rising_steps); }

Options::Options(std::string_view config) { apply(config); }

void Options::apply(std::string_view config, RepeatedKeys repeated) {
  std::string error;
  const std::vector<std::string_view> entries = split_entries(trim(config), &error);
  if (!error.empty()) report::config(error + " in \"" + std::string(config) + "\"");
  Options updated = *this;
  bool sets_policy = false;
  bool sets_expandable = false;
  // Each key's value as this string set it: a key given twice must say the same both times
  // (PyTorch keeps the last silently; here nothing is guessed). Strings applied later still
  // override earlier ones.
  std::vector<std::pair<std::string_view, std::string>> set_here;
  for (const std::string_view entry : entries) {
    if (entry.empty()) {
      if (entries.size() == 1) break;  // "" configures nothing
      report::config("empty entry in \"" + std::string(config) + "\"");
    }
    const std::size_t colon = entry.find(':');
    const std::string_view key = trim(entry.substr(0, colon));
    if (colon == std::string_view::npos) {
      report::config("entry '" + std::string(entry) + "' has no ':value'");
    }
    const std::string_view value = trim(entry.substr(colon + 1));
    bool known = false;
#define CUDACACHE_OPTION(name, Type, default_value, doc)                                     \
  if (key == #name) {                                                                        \
    known = true;                                                                            \
    const std::string expected = updated.name.parse(value);                                  \
    if (!expected.empty()) {                                                                 \
      report::config("invalid value '" + std::string(value) + "' for " #name ": expected " + \
                     expected);                                                              \
    }                                                                                        \
    if (repeated == RepeatedKeys::kRefused) {                                                \
      refuse_a_second_value(set_here, key, updated.name.to_string(), config);                \
    }                                                                                        \
  }
#include "options.inc"
#undef CUDACACHE_OPTION
    if (!known) report::config("unknown key '" + std::string(key) + "'");
    sets_policy = sets_policy || key == "policy";
    sets_expandable = sets_expandable || key == "expandable_segments";
  }
  // expandable_segments:True is PyTorch's option: without a policy beside it, it selects
  // PyTorch's policy, as the same string does in PYTORCH_CUDA_ALLOC_CONF.
  if (sets_expandable && updated.expandable_segments.enabled && !sets_policy) {
    updated.policy.kind = AllocatorPolicy::Kind::kPyTorch;
  }
  if (updated.policy.is_cudacache() && updated.expandable_segments.enabled) {
    report::config("policy:cudacache cannot be combined with expandable_segments:True in \"" +
                   std::string(config) +
                   "\": cudacache's policy always maps driver-VMM pages; PyTorch's expandable "
                   "segments are policy:pytorch,expandable_segments:True");
  }
  if (!updated.policy.is_cudacache() && updated.max_page_size_mb.is_set()) {
    report::config(
        "max_page_size_mb applies to cudacache's policy only, not policy:pytorch, in \"" +
        std::string(config) + "\": PyTorch's expandable segments keep their 2 and 20 MiB pages");
  }
  if (!updated.policy.is_cudacache() && updated.cut_pages.enabled) {
    report::config("cut_pages applies to cudacache's policy only, not policy:pytorch, in \"" +
                   std::string(config) +
                   "\": PyTorch's expandable segments never cut a page they mapped");
  }
  *this = updated;
}

std::string Options::to_config_string() const {
  std::string text;
#define CUDACACHE_OPTION(name, Type, default_value, doc) \
  if (!text.empty()) text += ',';                        \
  text += #name ":";                                     \
  text += name.to_string();
#include "options.inc"
#undef CUDACACHE_OPTION
  return text;
}

std::string Options::describe() const {
  std::string text = "cudacache options (CUDACACHE_CONF=\"key:value,...\"):\n";
#define CUDACACHE_OPTION(name, Type, default_value, doc)                                         \
  text += "  " #name " = " + name.to_string() + " (default " + Type(default_value).to_string() + \
          ")\n      " doc "\n";
#include "options.inc"
#undef CUDACACHE_OPTION
  return text;
}

std::string Options::valid_keys() {
  std::string text;
#define CUDACACHE_OPTION(name, Type, default_value, doc) \
  text += (text.empty() ? "" : ", ") + std::string(#name);
#include "options.inc"
#undef CUDACACHE_OPTION
  return text;
}

}  // namespace cudacache
