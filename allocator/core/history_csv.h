// The allocation history as a replay CSV (../shared/traces/README.md, tools/replay):
//   op,id,size,stream
//   alloc,0,41472,0
//   free,0,41472,0
//   empty_cache,,,
//
// Rules (those of cudacache-replay --convert for PyTorch snapshots, plus empty_cache rows):
// - `alloc` entries become alloc rows; `free_completed` entries become free rows (the memory is
//   reusable only then); `empty_cache` entries become `empty_cache,,,` rows. Segment and oom
//   entries are not rows (a replay makes its own segments; a failed request allocated nothing).
// - Ids count allocations in row order. A free closes the id most recently allocated at its
//   address and repeats that alloc's size (requested bytes) and stream.
// - Prelude: blocks allocated before the ring's oldest entry come first as alloc rows: one per
//   free of an address with no open allocation in the ring (in the order of those frees, with
//   the free's size and stream), then one per block live now that the ring leaves unopened (in
//   address order). So every free matches an alloc and the live set at the end is the
//   allocator's.
// - Stream handle 0 (the legacy default stream) is stream 0; other handles become 1, 2, ... in
//   order of first use in the rows.
#pragma once

#include "history.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cudacache {

struct LiveBlock {
  std::uintptr_t address = 0;
  std::size_t requested_size = 0;
  std::uintptr_t stream = 0;
};

// `entries` oldest first; `live` = blocks allocated or pending free now.
std::string history_to_csv(const std::vector<HistoryEntry>& entries,
                           const std::vector<LiveBlock>& live);

}  // namespace cudacache
