// The growth detector: names the allocation sites of memory that a program keeps step after
// step (opt-in: the detect_growth option, cudacache_watch_growth).
//
// Note [Growth detection]: the commonest memory bug of a training loop keeps something alive
// per step (`total_loss += loss` keeps each step's graph): allocated memory then rises at every
// step boundary until the device is full. The program marks its step boundaries
// (cudacache_mark_step); every block carries the step it was allocated in and its allocation
// stack. When allocated memory at a boundary is higher than at the previous one for
// `rising_steps` boundaries in a row, the blocks still allocated that were allocated during
// those steps are grouped by allocation site, and the sites with blocks from at least two of
// those steps are reported: a site that allocates once (weights, optimizer state, the first
// step's gradients) is not growth, a site that leaves a block behind at every step is. A site
// is a stack's functions (stack_site_key), not its return addresses: a loop the compiler
// unrolled calls from several addresses of one function. The report is made once per watch;
// the caller (DeviceAllocator) says it.
//
// Not thread safe: the owning DeviceAllocator calls it under its mutex.
#pragma once

#include "stack_table.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cudacache {

struct GrowthSite {
  StackId stack = 0;
  std::size_t bytes = 0;   // allocated (rounded) bytes of its blocks still allocated
  std::size_t blocks = 0;  // how many
  std::size_t steps = 0;   // from how many distinct steps of the rise
};

struct GrowthReport {
  int device = 0;
  bool growing = false;    // a rise was found and reported
  std::uint64_t step = 0;  // steps marked since the watch began (when found, if growing)
  // Allocated bytes at the boundaries of the rise, oldest first (rising_steps + 1 values).
  std::vector<std::size_t> allocated_at_boundaries;
  std::vector<GrowthSite> sites;  // most bytes first
};

// A block still allocated, as the detector sees it.
struct GrowingBlock {
  StackId stack = 0;
  std::uint64_t step = 0;
  std::size_t size = 0;
};

// The blocks of a rise from one stack.
struct StackTally {
  StackId stack = 0;
  std::size_t bytes = 0;
  std::size_t blocks = 0;
  std::vector<std::uint64_t> steps;  // distinct, ascending
};

class GrowthDetector {
 public:
  // Starts a watch (0 stops it): a rise over `rising_steps` boundaries in a row is growth.
  // `allocated_now` is the first boundary's value.
  void watch(unsigned rising_steps, std::size_t allocated_now);
  bool watching() const { return rising_steps_ != 0; }
  unsigned rising_steps() const { return rising_steps_; }
  // The step that blocks allocated now belong to: counts on across watches (0 before the
  // first), so blocks allocated before a watch began are older than its steps.
  std::uint64_t step() const { return step_; }

  // Ends the current step with `allocated` bytes allocated. True when allocated memory rose
  // at the last rising_steps boundaries and nothing was reported yet; then the caller tallies
  // the blocks still allocated (tally), makes the report without its lock
  // (make_growth_report: naming frames takes the dynamic linker's lock) and records it.
  bool end_step(std::size_t allocated);
  std::vector<StackTally> tally(const std::vector<GrowingBlock>& live) const;
  // A report with no site is not recorded (the watch goes on); nor is one when this watch has
  // one already. True when recorded.
  bool record(GrowthReport report);

  // The report recorded by this watch, or (growing false) the boundaries seen so far.
  GrowthReport report(int device) const;

 private:
  unsigned rising_steps_ = 0;
  std::uint64_t step_ = 0;
  std::uint64_t watch_start_ = 0;        // step_ when the watch began
  std::vector<std::size_t> boundaries_;  // the newest rising_steps_ + 1 boundary values
  bool reported_ = false;
  GrowthReport report_;
};

// The report of a rise: tallies of stacks with the same frames merged into one site, sites
// from fewer than two steps dropped, most bytes first. Call it without an allocator's lock.
GrowthReport make_growth_report(int device, const GrowthReport& rise,
                                std::vector<StackTally> tallies);

// The report as JSON: {"device", "growing", "step", "allocated_at_boundaries",
// "sites": [{"bytes", "blocks", "steps", "frames": [{name, filename, line}]}]}.
std::string growth_report_json(const GrowthReport& report);
// The warning printed once when growth is found: the rise and one line per site (its first
// frames).
std::string describe_growth(const GrowthReport& report);

}  // namespace cudacache
