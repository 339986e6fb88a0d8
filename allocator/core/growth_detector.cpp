#include "growth_detector.h"

#include "json_writer.h"
#include "memory_figures.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

namespace cudacache {
namespace {

// Frames of a site shown in the warning; the report has them all.
constexpr std::size_t kFramesInWarning = 3;
// Sites listed in the warning.
constexpr std::size_t kSitesInWarning = 5;

}  // namespace

void GrowthDetector::watch(unsigned rising_steps, std::size_t allocated_now) {
  rising_steps_ = rising_steps;
  // Steps count on across watches, so that blocks allocated before this one are older.
  ++step_;
  watch_start_ = step_;
  boundaries_.assign(1, allocated_now);
  reported_ = false;
  report_ = GrowthReport{};
}

bool GrowthDetector::end_step(std::size_t allocated) {
  if (!watching()) return false;
  ++step_;
  boundaries_.push_back(allocated);
  if (boundaries_.size() > rising_steps_ + 1) boundaries_.erase(boundaries_.begin());
  if (reported_ || boundaries_.size() < rising_steps_ + 1) return false;
  for (std::size_t i = 1; i < boundaries_.size(); ++i) {
    if (boundaries_[i] <= boundaries_[i - 1]) return false;
  }
  return true;
}

std::vector<StackTally> GrowthDetector::tally(const std::vector<GrowingBlock>& live) const {
  // Steps of the rise: the last rising_steps_ ones, the newest ended now.
  const std::uint64_t first = step_ - rising_steps_;
  std::unordered_map<StackId, StackTally> by_stack;
  for (const GrowingBlock& block : live) {
    if (block.step < first || block.step >= step_) continue;
    StackTally& tally = by_stack[block.stack];
    tally.stack = block.stack;
    tally.bytes += block.size;
    tally.blocks += 1;
    tally.steps.push_back(block.step);
  }
  std::vector<StackTally> tallies;
  tallies.reserve(by_stack.size());
  for (auto& [stack, tally] : by_stack) {
    std::sort(tally.steps.begin(), tally.steps.end());
    tally.steps.erase(std::unique(tally.steps.begin(), tally.steps.end()), tally.steps.end());
    tallies.push_back(std::move(tally));
  }
  return tallies;
}

bool GrowthDetector::record(GrowthReport report) {
  if (reported_ || !report.growing) return false;
  reported_ = true;
  report_ = std::move(report);
  return true;
}

GrowthReport make_growth_report(int device, const GrowthReport& rise,
                                std::vector<StackTally> tallies) {
  // One site per stack_site_key; a stack without frames is a site of its own.
  using SiteKey = std::pair<std::string, StackId>;
  std::map<SiteKey, StackTally> sites;
  for (StackTally& tally : tallies) {
    std::string frames = stack_site_key(tally.stack);
    const StackId own = frames.empty() ? tally.stack : 0;
    const SiteKey key{std::move(frames), own};
    const auto [it, inserted] = sites.try_emplace(key, std::move(tally));
    if (inserted) continue;
    StackTally& site = it->second;
    site.stack = std::min(site.stack, tally.stack);  // the same frames either way
    site.bytes += tally.bytes;
    site.blocks += tally.blocks;
    site.steps.insert(site.steps.end(), tally.steps.begin(), tally.steps.end());
    std::sort(site.steps.begin(), site.steps.end());
    site.steps.erase(std::unique(site.steps.begin(), site.steps.end()), site.steps.end());
  }
  GrowthReport report = rise;
  report.device = device;
  report.sites.clear();
  for (const auto& [key, site] : sites) {
    if (site.steps.size() < 2) continue;  // allocated once: not growth
    report.sites.push_back({site.stack, site.bytes, site.blocks, site.steps.size()});
  }
  std::sort(report.sites.begin(), report.sites.end(), [](const GrowthSite& a, const GrowthSite& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.stack < b.stack;
  });
  // Growth whose blocks come from a different site each step is not what this names.
  report.growing = !report.sites.empty();
  return report;
}

GrowthReport GrowthDetector::report(int device) const {
  if (reported_) return report_;
  GrowthReport report;
  report.device = device;
  report.step = step_ - watch_start_;
  report.allocated_at_boundaries = boundaries_;
  return report;
}

std::string growth_report_json(const GrowthReport& report) {
  JsonWriter json;
  json.begin_object();
  json.field("device", static_cast<std::int64_t>(report.device));
  json.field("growing", report.growing);
  json.field("step", static_cast<std::uint64_t>(report.step));
  json.key("allocated_at_boundaries");
  json.begin_array();
  for (const std::size_t bytes : report.allocated_at_boundaries) {
    json.value(static_cast<std::uint64_t>(bytes));
  }
  json.end_array();
  json.key("sites");
  json.begin_array();
  for (const GrowthSite& site : report.sites) {
    json.begin_object();
    json.field("bytes", static_cast<std::uint64_t>(site.bytes));
    json.field("blocks", static_cast<std::uint64_t>(site.blocks));
    json.field("steps", static_cast<std::uint64_t>(site.steps));
    json.key("frames");
    write_frames(json, site.stack);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  return json.str();
}

std::string describe_growth(const GrowthReport& report) {
  const auto& boundaries = report.allocated_at_boundaries;
  const std::size_t rises = boundaries.empty() ? 0 : boundaries.size() - 1;
  std::string text = "cudacache: device ";
  text += std::to_string(report.device);
  text += ": allocated memory grew at each of the last ";
  text += std::to_string(rises);
  text += " steps (";
  for (std::size_t i = 0; i < boundaries.size(); ++i) {
    if (i > 0) text += " -> ";
    text += format_size(boundaries[i]);
  }
  text += "). Blocks allocated in those steps and still allocated, by allocation site:";
  for (std::size_t i = 0; i < report.sites.size() && i < kSitesInWarning; ++i) {
    const GrowthSite& site = report.sites[i];
    text += "\n  ";
    text += format_size(site.bytes);
    text += " in ";
    text += std::to_string(site.blocks);
    text += " blocks from ";
    text += std::to_string(site.steps);
    text += " steps, allocated at:";
    const std::vector<Frame> frames = stack_frames(site.stack);
    if (frames.empty()) text += " (no stack recorded)";
    for (std::size_t f = 0; f < frames.size() && f < kFramesInWarning; ++f) {
      text += "\n      ";
      text += frames[f].name;
      text += " (";
      text += frames[f].filename;
      if (frames[f].line > 0) {
        text += ':';
        text += std::to_string(frames[f].line);
      }
      text += ')';
    }
  }
  if (report.sites.size() > kSitesInWarning) {
    text += "\n  ... and ";
    text += std::to_string(report.sites.size() - kSitesInWarning);
    text += " more sites (cudacache_growth_report_json has them all)";
  }
  text +=
      "\nSomething keeps a block from each step alive (for example `total += loss`, which "
      "keeps every step's graph, instead of `total += loss.item()`).";
  return text;
}

}  // namespace cudacache
