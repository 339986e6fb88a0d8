// ContentCheck: --check-contents, proof that a replay's allocator never gave one byte of memory
// to two live blocks and never moved or unmapped memory under a live block.
//
// Note [Checked contents]: a replay runs no kernels, so an allocator that maps the wrong page,
// moves a page that still holds a live block or hands out overlapping blocks goes unnoticed:
// the figures stay plausible. With the check, every block the allocator returns is
//   - compared with the live blocks (exact, on the host): no byte may belong to two;
//   - stamped through cudaMemcpy with words that name it: its first and last 8 bytes and the
//     first 8 bytes of every 2 MiB granule it reaches into (the unit of VMM pages, so a page
//     remapped or moved under the block loses a stamp);
// and every stamp is read back when the block is freed and, for blocks still live, when the
// replay ends. A stamp that differs, or a copy the runtime refuses (memory unmapped under the
// block), stops the replay with a ContentError naming the event, the block and the offset.
// The copies are synchronous and run inside the timed loop: a checked replay's times are not
// the allocator's (its memory figures and device calls are: cudaMemcpy is no memory call).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudacache::replay {

class ContentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ContentCheck {
 public:
  // A check for a trace of `slots` allocations (Trace::alloc_count).
  explicit ContentCheck(std::size_t slots);

  // Event `event` allocated `size` bytes at `ptr` for `slot`: checks the overlap, then stamps.
  void stamp(std::size_t event, std::size_t slot, void* ptr, std::uint64_t size);
  // Event `event` is about to free `slot`: checks its stamps, then forgets it.
  void verify_and_forget(std::size_t event, std::size_t slot);
  // Checks every live block's stamps after event `event`: `when` says what it was ("empty_cache",
  // "end of the replay"), for the message.
  void verify_live(std::size_t event, const char* when);

  // Stamps read back intact so far.
  std::uint64_t intact_stamps() const { return intact_stamps_; }

  // Where a block of `size` bytes at `address` is stamped: the byte offsets of its stamps, in
  // order, none overlapping another; each is 8 bytes or what is left of the block.
  static std::vector<std::uint64_t> stamp_offsets(std::uintptr_t address, std::uint64_t size);

 private:
  struct Live {
    std::uintptr_t address = 0;
    std::uint64_t size = 0;
    std::size_t event = 0;  // the alloc event
    bool live = false;
  };
  // The word stamped at `offset` of `slot`'s block: changes with both.
  static std::uint64_t word(std::size_t slot, std::uint64_t offset);
  void verify(std::size_t event, std::size_t slot, const char* when);

  std::vector<Live> slots_;
  std::map<std::uintptr_t, std::size_t> by_address_;  // live blocks' addresses -> slots
  std::uint64_t intact_stamps_ = 0;
};

}  // namespace cudacache::replay
