// NodeArena (support/node_arena.h): the nodes of one container come from its chunks and are
// reused after an erase; a request of another size goes to operator new; a map over the arena
// behaves as a plain std::map through random inserts and erases (checked against one).
#include "node_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <utility>

namespace cudacache {
namespace {

TEST(NodeArena, AnErasedNodeIsTheNextOneHandedOut) {
  NodeArena arena;
  void* first = arena.allocate(40);
  void* second = arena.allocate(40);
  EXPECT_NE(first, second);
  arena.deallocate(first, 40);
  EXPECT_EQ(arena.allocate(40), first);  // from the free list, not a new slot
  arena.deallocate(first, 40);
  arena.deallocate(second, 40);
}

TEST(NodeArena, NodesOfAChunkAreAdjacentAndAligned) {
  NodeArena arena;
  auto* first = static_cast<char*>(arena.allocate(40));
  auto* second = static_cast<char*>(arena.allocate(40));
  EXPECT_EQ(second - first, 48);  // 40 rounded up to max_align_t
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % alignof(std::max_align_t), 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(second) % alignof(std::max_align_t), 0u);
}

TEST(NodeArena, ASizeOtherThanTheFirstGoesToOperatorNew) {
  NodeArena arena;
  void* node = arena.allocate(32);
  void* other = arena.allocate(200);  // not from the arena: freed with operator delete
  arena.deallocate(other, 200);
  arena.deallocate(node, 32);
  EXPECT_EQ(arena.allocate(32), node);  // the free list holds only the arena's node
}

TEST(NodeArena, ManyNodesOutliveSeveralChunks) {
  NodeArena arena;
  std::set<void*> nodes;
  for (int i = 0; i < 5000; ++i) {
    void* node = arena.allocate(24);
    EXPECT_TRUE(nodes.insert(node).second) << "node " << i << " handed out twice";
    *static_cast<std::uint64_t*>(node) = static_cast<std::uint64_t>(i);
  }
  for (void* node : nodes) arena.deallocate(node, 24);
  for (int i = 0; i < 5000; ++i) {  // all reused: no node outside the ones given back
    EXPECT_EQ(nodes.count(arena.allocate(24)), 1u);
  }
}

TEST(NodeArena, AMapOverTheArenaMatchesAPlainMap) {
  NodeArena arena;
  using Alloc = ArenaAllocator<std::pair<const std::uint64_t, std::uint64_t>>;
  std::map<std::uint64_t, std::uint64_t, std::less<>, Alloc> arena_map{Alloc(&arena)};
  std::map<std::uint64_t, std::uint64_t> plain;
  std::mt19937_64 random(11);
  for (int step = 0; step < 20000; ++step) {
    const std::uint64_t key = random() % 512;
    if (random() % 3 == 0) {
      EXPECT_EQ(arena_map.erase(key), plain.erase(key)) << "step " << step;
    } else {
      arena_map[key] = step;
      plain[key] = step;
    }
  }
  ASSERT_EQ(arena_map.size(), plain.size());
  EXPECT_TRUE(std::equal(arena_map.begin(), arena_map.end(), plain.begin(), plain.end()));
  // A node extracted from the map and inserted again keeps working (node handles share the
  // allocator).
  if (!arena_map.empty()) {
    auto node = arena_map.extract(arena_map.begin());
    node.key() = 100000;
    arena_map.insert(std::move(node));
    EXPECT_EQ(arena_map.rbegin()->first, 100000u);
  }
}

}  // namespace
}  // namespace cudacache
