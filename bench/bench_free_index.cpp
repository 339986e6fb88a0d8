// The free index's cost against the free blocks it holds: FreeIndex (a sorted array,
// allocator/core/free_index.h) beside the red-black tree it replaced (std::set of Block
// pointers in the same order, a node reused for each insertion as BlockPool did), from 4 to
// 65,536 free blocks. One iteration is what a cache hit does to the index: a best-fit search,
// the removal of the block found, and the insertion of a block (a split's remainder or a merge's
// result). Run in a Release build: no device is involved.
#include "free_index.h"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <vector>

namespace {

using cudacache::Block;
using cudacache::FreeIndex;

struct TreeOrder {
  bool operator()(const Block* a, const Block* b) const {
    return FreeIndex::below(a, FreeIndex::key_of(b));
  }
};

// `count` free blocks on one stream, of sizes between 512 B and 64 MiB in 512 B steps (random,
// seeded), at distinct addresses; and the order in which iterations visit them.
struct Blocks {
  std::vector<std::unique_ptr<Block>> owned;
  std::vector<std::size_t> visits;
  explicit Blocks(std::size_t count) {
    std::mt19937_64 random(count);
    std::uniform_int_distribution<std::size_t> units(1, std::size_t{1} << 17);
    for (std::size_t i = 0; i < count; ++i) {
      auto block = std::make_unique<Block>();
      block->size = units(random) * 512;
      block->address = (std::uintptr_t{1} << 40) + i * (std::uintptr_t{1} << 27);
      block->segment_order = 1;
      owned.push_back(std::move(block));
    }
    std::uniform_int_distribution<std::size_t> pick(0, count - 1);
    visits.resize(4096);
    for (std::size_t& visit : visits) visit = pick(random);
  }
};

void BM_FreeIndex(benchmark::State& state) {
  const Blocks blocks(static_cast<std::size_t>(state.range(0)));
  FreeIndex index;
  for (const auto& block : blocks.owned) index.insert(block.get());
  std::size_t visit = 0;
  for (auto _ : state) {
    Block* wanted = blocks.owned[blocks.visits[visit++ % blocks.visits.size()]].get();
    const auto found = index.lower_bound(FreeIndex::search_key(nullptr, wanted->size));
    Block* taken = *found;
    index.erase(found);
    index.insert(taken);
    benchmark::DoNotOptimize(taken);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_RedBlackTree(benchmark::State& state) {
  const Blocks blocks(static_cast<std::size_t>(state.range(0)));
  std::set<Block*, TreeOrder> index;
  for (const auto& block : blocks.owned) index.insert(block.get());
  Block key;
  std::size_t visit = 0;
  for (auto _ : state) {
    Block* wanted = blocks.owned[blocks.visits[visit++ % blocks.visits.size()]].get();
    key.size = wanted->size;
    const auto found = index.lower_bound(&key);
    Block* taken = *found;
    auto node = index.extract(found);
    node.value() = taken;
    index.insert(std::move(node));
    benchmark::DoNotOptimize(taken);
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_FreeIndex)->RangeMultiplier(4)->Range(4, 65536);
BENCHMARK(BM_RedBlackTree)->RangeMultiplier(4)->Range(4, 65536);

}  // namespace

BENCHMARK_MAIN();
