// Pages of one block (Note [Pages of one block] in pages_of_one_block.cpp): without room, a large
// block's granules before its end are one page of its own; such a page never holds a block and
// free memory beside it, so it is cut where a smaller block ends, and a move takes what it needs
// off its end.
#include "test_support.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace cudacache {
namespace {

using testing::reserved;
using testing::ScopedStream;
using testing::sim_calls;
using testing::sim_counters;

constexpr std::size_t kMiB = std::size_t{1} << 20;

class PagesOfOneBlock : public testing::SimulatedDeviceTest {
 protected:
  static Options options() { return Options("policy:cudacache"); }
};

// Every byte of [p, p + bytes) holds `value`.
bool holds(const void* p, std::size_t bytes, unsigned char value) {
  std::vector<unsigned char> host(bytes);
  if (cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  for (unsigned char byte : host) {
    if (byte != value) return false;
  }
  return true;
}

TEST_F(PagesOfOneBlock, ALargeBlockWithoutRoomGetsOnePageOfItsOwn) {
  ASSERT_EQ(cudasim_set_capacity(0, 100 * kMiB), 0);  // no room: 2 MiB pages otherwise
  DeviceAllocator allocator(0, options());
  cudasim_call_counts before = sim_calls();
  void* small = allocator.allocate(6 * kMiB, nullptr);  // three pages: too small for its own
  EXPECT_EQ(sim_calls().create, before.create + 3);
  before = sim_calls();
  void* large = allocator.allocate(61 * kMiB, nullptr);
  // The 60 MiB before its end as one page, the granule that holds its end as another.
  EXPECT_EQ(sim_calls().create, before.create + 2);
  EXPECT_EQ(sim_calls().map, before.map + 2);
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(68 * kMiB));
  ASSERT_EQ(cudaMemset(large, 9, 61 * kMiB), cudaSuccess);
  EXPECT_TRUE(holds(large, 61 * kMiB, 9));
  allocator.deallocate(large);
  allocator.deallocate(small);
}

// Found in review: a map that failed while a page of one block was cut left the cut's page sizes
// planned, and the next growth of any size mapped them (a 1000-byte request took 40 MiB into
// the small pool; an 8 MiB stretch before mapped memory refused every 8 MiB request).
TEST_F(PagesOfOneBlock, AMapThatFailsWhileCuttingLeavesNoPlanBehind) {
  ASSERT_EQ(cudasim_set_capacity(0, 64 * kMiB), 0);
  {
    DeviceAllocator allocator(0, options());
    allocator.deallocate(allocator.allocate(40 * kMiB, nullptr));  // a page of its own, free
    ASSERT_EQ(cudasim_fail_nth_call(0, "map", 1), 0);              // the map of the cut page fails
    void* cut = allocator.allocate(10 * kMiB, nullptr);  // out of memory for the map: the ladder
    ASSERT_NE(cut, nullptr);
    ASSERT_EQ(cudaMemset(cut, 4, 10 * kMiB), cudaSuccess);
    void* small = allocator.allocate(1000, nullptr);
    const MemoryStats stats = allocator.stats();
    EXPECT_EQ(stats.reserved_bytes[kSmallPool].current, static_cast<std::int64_t>(2 * kMiB));
    EXPECT_EQ(static_cast<std::uint64_t>(reserved(stats)), sim_counters().in_use_bytes);
    EXPECT_TRUE(holds(cut, 10 * kMiB, 4));
    allocator.deallocate(small);
    allocator.deallocate(cut);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// Found in review: a cut whose page merged, once unmapped, with the unmapped stretch before it
// split the two apart again to map the new pages; when those could not be created, the two
// stayed apart, and a range with nothing mapped but two blocks in it was never released
// (empty_cache gives back a range only when it is one unmapped block).
TEST_F(PagesOfOneBlock, ACutThatCreatesNothingLeavesTheRangeWhole) {
  ASSERT_EQ(cudasim_set_capacity(0, 64 * kMiB), 0);
  {
    DeviceAllocator allocator(0, options());
    void* first = allocator.allocate(20 * kMiB, nullptr);
    void* second = allocator.allocate(40 * kMiB, nullptr);  // a 38 MiB page of its own, a granule
    allocator.deallocate(first);
    allocator.empty_cache();  // the first's pages go: an unmapped stretch before the second's
    allocator.deallocate(second);
    ASSERT_EQ(cudasim_fail_nth_call(0, "create", 1), 0);  // the cut's first new page fails
    void* cut = allocator.allocate(10 * kMiB, nullptr);   // ends inside the 38 MiB page
    ASSERT_NE(cut, nullptr);
    ASSERT_EQ(cudaMemset(cut, 4, 10 * kMiB), cudaSuccess);
    EXPECT_TRUE(holds(cut, 10 * kMiB, 4));
    allocator.deallocate(cut);
    const cudasim_call_counts before = sim_calls();
    allocator.empty_cache();
    EXPECT_EQ(reserved(allocator.stats()), 0);
    EXPECT_EQ(sim_calls().address_free, before.address_free + 1) << "the range was kept";
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// A smaller block reusing the memory cuts the page where it ends, so the rest stays whole free
// pages: another stream then gets them moved instead of running out of memory (uncut, the page
// would hold the block and 39 MiB nothing could use).
TEST_F(PagesOfOneBlock, APageIsCutWhereASmallerBlockEndsSoTheRestCanMove) {
  ASSERT_EQ(cudasim_set_capacity(0, 64 * kMiB), 0);
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    allocator.deallocate(allocator.allocate(61 * kMiB, nullptr));  // 60 MiB page + granule
    const cudasim_call_counts before = sim_calls();
    void* smaller = allocator.allocate(21 * kMiB, nullptr);
    cudasim_call_counts counts = sim_calls();
    // Unmapped, released, and replaced where it was by 20 MiB, the 2 MiB granule that holds
    // the block's end, and the 38 MiB after it.
    EXPECT_EQ(counts.unmap, before.unmap + 1);
    EXPECT_EQ(counts.release, before.release + 1);
    EXPECT_EQ(counts.create, before.create + 3);
    EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(62 * kMiB));
    ASSERT_EQ(cudaMemset(smaller, 4, 21 * kMiB), cudaSuccess);

    void* moved = allocator.allocate(40 * kMiB, other);  // the 38 MiB page and the granule
    counts = sim_calls();
    EXPECT_EQ(counts.create, before.create + 3);  // nothing more created
    EXPECT_EQ(counts.unmap, before.unmap + 3);
    const MemoryStats stats = allocator.stats();
    EXPECT_EQ(stats.num_ooms, 0);
    EXPECT_EQ(stats.num_alloc_retries, 0);
    EXPECT_LE(sim_counters().in_use_bytes, 64 * kMiB);
    ASSERT_EQ(cudaMemset(moved, 5, 40 * kMiB), cudaSuccess);
    EXPECT_TRUE(holds(smaller, 21 * kMiB, 4));  // the cut and the move left it alone
    allocator.deallocate(moved);
    allocator.deallocate(smaller);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// Near a full device a request that would cut a page of one block takes another free block
// that needs no cut, when one is large enough: a cut costs an unmap, a release and up to three
// creates, the other block nothing. The page stays whole for a request of its size.
TEST_F(PagesOfOneBlock, NearAFullDeviceAnotherFreeBlockIsTakenRatherThanCuttingAPage) {
  ASSERT_EQ(cudasim_set_capacity(0, 100 * kMiB), 0);
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    std::vector<void*> shared;  // 2 MiB pages: blocks of three pages get none of their own
    for (int i = 0; i < 6; ++i) shared.push_back(allocator.allocate(6 * kMiB, nullptr));
    cudasim_call_counts before = sim_calls();
    void* own = allocator.allocate(20 * kMiB, nullptr);
    EXPECT_EQ(sim_calls().create, before.create + 1);    // one page of its own
    void* tail = allocator.allocate(6 * kMiB, nullptr);  // so that neither free block can grow
    for (int i = 0; i < 5; ++i) allocator.deallocate(shared[i]);  // one free 30 MiB block
    allocator.deallocate(own);                                    // 20 MiB: the best fit for 12 MiB
    void* filler = allocator.allocate(34 * kMiB, other);          // 4 MiB left on the device
    ASSERT_LE(100 * kMiB - sim_counters().in_use_bytes, 4 * kMiB);

    before = sim_calls();
    void* smaller = allocator.allocate(12 * kMiB, nullptr);
    cudasim_call_counts counts = sim_calls();
    EXPECT_EQ(counts.unmap, before.unmap);  // no cut
    EXPECT_EQ(counts.release, before.release);
    EXPECT_EQ(counts.create, before.create);
    EXPECT_EQ(smaller, shared[0]);                        // the 30 MiB block
    void* same = allocator.allocate(20 * kMiB, nullptr);  // the page, whole
    counts = sim_calls();
    EXPECT_EQ(counts.create, before.create);
    EXPECT_EQ(counts.map, before.map);
    EXPECT_EQ(same, own);
    ASSERT_EQ(cudaMemset(smaller, 1, 12 * kMiB), cudaSuccess);
    ASSERT_EQ(cudaMemset(same, 2, 20 * kMiB), cudaSuccess);
    EXPECT_TRUE(holds(smaller, 12 * kMiB, 1));
    for (void* block : {same, smaller, filler, tail, shared[5]}) allocator.deallocate(block);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// Far from the limit, a request predicted short-lived that would end inside a free page of one
// block, leaving at most half its size free after it, takes the page uncut: a cut costs an
// unmap, a release and up to three creates, and the block is freed soon. A request with no
// prediction in the same place cuts the page, and so does a short-lived one near the limit.
TEST_F(PagesOfOneBlock, FarFromTheLimitAShortLivedRequestTakesAPageOfOneBlockUncut) {
  ASSERT_EQ(cudasim_set_capacity(0, 256 * kMiB), 0);  // no room: a growth leaves < 216 MiB
  const ScopedStream other;
  enum class Case { kShortFar, kUnknownFar, kShortNear };
  for (const Case c : {Case::kShortFar, Case::kUnknownFar, Case::kShortNear}) {
    SCOPED_TRACE(static_cast<int>(c));
    DeviceAllocator allocator(0, options());
    void* big = allocator.allocate(61 * kMiB, nullptr);  // a 60 MiB page of its own + granule
    // Near the limit: less than a quarter of the device left in the end (about 136 MiB else).
    void* filler = c == Case::kShortNear ? allocator.allocate(80 * kMiB, other) : nullptr;
    // Blocks of 57 MiB that each live one allocation: the third one's context (57 MiB after two
    // of 57 MiB) is then known short-lived. Reused whole: no page is cut meanwhile.
    for (int i = 0; i < 3; ++i) allocator.deallocate(allocator.allocate(57 * kMiB, nullptr));
    allocator.deallocate(big);  // one free block from the page's start
    const std::size_t size = c == Case::kUnknownFar ? 57 * kMiB + 512 : 57 * kMiB;
    const cudasim_call_counts before = sim_calls();
    void* reused = allocator.allocate(size, nullptr);
    const cudasim_call_counts counts = sim_calls();
    EXPECT_EQ(reused, big);  // it ends 3 MiB before the page does
    const unsigned cuts = c == Case::kShortFar ? 0 : 1;
    EXPECT_EQ(counts.unmap, before.unmap + cuts);
    EXPECT_EQ(counts.release, before.release + cuts);
    EXPECT_EQ(counts.create, before.create + 3 * cuts);  // 56 MiB, the end granule, the rest
    ASSERT_EQ(cudaMemset(reused, 6, size), cudaSuccess);
    // The rest of the page serves like any free memory beside the block.
    void* rest = allocator.allocate(2 * kMiB, nullptr);
    ASSERT_EQ(cudaMemset(rest, 7, 2 * kMiB), cudaSuccess);
    EXPECT_TRUE(holds(reused, size, 6));
    EXPECT_EQ(static_cast<std::uint64_t>(reserved(allocator.stats())), sim_counters().in_use_bytes);
    for (void* block : {rest, reused, filler}) {
      if (block != nullptr) allocator.deallocate(block);
    }
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// A move that needs less than a free page of one block takes it off the page's end: the page's
// block keeps the front, which then serves a request of its size with no device call.
TEST_F(PagesOfOneBlock, AMoveCutsWhatItNeedsOffTheEndOfALargerPage) {
  ASSERT_EQ(cudasim_set_capacity(0, 64 * kMiB), 0);
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    allocator.deallocate(allocator.allocate(60 * kMiB, nullptr));  // one 60 MiB page
    cudasim_call_counts before = sim_calls();
    void* moved = allocator.allocate(20 * kMiB, other);  // 4 MiB left on the device
    cudasim_call_counts counts = sim_calls();
    EXPECT_EQ(counts.unmap, before.unmap + 1);
    EXPECT_EQ(counts.release, before.release + 1);
    EXPECT_EQ(counts.create, before.create + 2);  // 40 MiB mapped back, 20 MiB moved
    EXPECT_EQ(allocator.stats().num_alloc_retries, 0);
    EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(60 * kMiB));
    ASSERT_EQ(cudaMemset(moved, 2, 20 * kMiB), cudaSuccess);

    before = sim_calls();
    void* front = allocator.allocate(40 * kMiB, nullptr);
    counts = sim_calls();
    EXPECT_EQ(counts.create, before.create);
    EXPECT_EQ(counts.map, before.map);
    ASSERT_EQ(cudaMemset(front, 3, 40 * kMiB), cudaSuccess);
    EXPECT_TRUE(holds(moved, 20 * kMiB, 2));
    allocator.deallocate(front);
    allocator.deallocate(moved);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// A loop reuses each page with a block of the same size: nothing is cut or created after its
// first step, also for sizes that do not end on a granule.
TEST_F(PagesOfOneBlock, ASteadyLoopWithoutRoomMakesNoDeviceCallAfterItsFirstStep) {
  ASSERT_EQ(cudasim_set_capacity(0, 256 * kMiB), 0);  // no room: a growth leaves < 216 MiB
  DeviceAllocator allocator(0, options());
  const std::size_t sizes[] = {50 * kMiB + kMiB / 2, 30 * kMiB + kMiB / 2, 70 * kMiB + kMiB / 2};
  auto step = [&] {
    std::vector<void*> blocks;
    for (std::size_t size : sizes) blocks.push_back(allocator.allocate(size, nullptr));
    for (void* block : blocks) allocator.deallocate(block);
  };
  step();
  const cudasim_call_counts first = sim_calls();
  EXPECT_LE(first.create, 6u);  // a page of its own and an end granule per block, at most
  for (int i = 0; i < 4; ++i) step();
  const cudasim_call_counts after = sim_calls();
  EXPECT_EQ(after.create, first.create);
  EXPECT_EQ(after.release, first.release);
  EXPECT_EQ(after.map, first.map);
  EXPECT_EQ(after.unmap, first.unmap);
}

// A page made while the device had room is larger than one made near a full device: a block
// ending inside it would strand the rest. Near the limit it is cut there like a page of one
// block, so the rest can move to another stream (uncut: out of memory, with 3 MiB free in a
// page that also holds the block's end).
TEST_F(PagesOfOneBlock, ALargePageMadeWithRoomIsCutWhereABlockEndsNearAFullDevice) {
  ASSERT_EQ(cudasim_set_capacity(0, 2048 * kMiB), 0);  // with room: 4 MiB pages (1/512)
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    void* freed = allocator.allocate(8 * kMiB, nullptr);  // two 4 MiB pages
    void* kept = allocator.allocate(2 * kMiB, nullptr);   // a third, so the range ends in use
    allocator.deallocate(freed);
    cudasim_call_counts before = sim_calls();
    EXPECT_EQ(before.create, 3u);
    void* filler = allocator.allocate(2030 * kMiB, other);  // 6 MiB left on the device
    ASSERT_LE(2048 * kMiB - sim_counters().in_use_bytes, 6 * kMiB);

    before = sim_calls();
    void* ending = allocator.allocate(5 * kMiB, nullptr);  // ends 1 MiB into the second page
    cudasim_call_counts counts = sim_calls();
    // The second page unmapped, released, and replaced by the granule that holds the block's
    // end and the 2 MiB after it.
    EXPECT_EQ(counts.unmap, before.unmap + 1);
    EXPECT_EQ(counts.release, before.release + 1);
    EXPECT_EQ(counts.create, before.create + 2);
    ASSERT_EQ(cudaMemset(ending, 6, 5 * kMiB), cudaSuccess);

    void* moved = allocator.allocate(8 * kMiB, other);  // 6 MiB new, the 2 MiB page moved
    counts = sim_calls();
    EXPECT_EQ(counts.unmap, before.unmap + 2);
    const MemoryStats stats = allocator.stats();
    EXPECT_EQ(stats.num_ooms, 0);
    EXPECT_LE(sim_counters().in_use_bytes, 2048 * kMiB);
    ASSERT_EQ(cudaMemset(moved, 7, 8 * kMiB), cudaSuccess);
    EXPECT_TRUE(holds(ending, 5 * kMiB, 6));
    for (void* block : {moved, ending, filler, kept}) allocator.deallocate(block);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// Far from the limit the same page is left whole: a cut costs an unmap, a release and up to
// three creates, and the memory it would free is not needed.
TEST_F(PagesOfOneBlock, ALargePageMadeWithRoomIsLeftWholeFarFromTheLimit) {
  ASSERT_EQ(cudasim_set_capacity(0, 2048 * kMiB), 0);  // with room: 4 MiB pages (1/512)
  const ScopedStream other;
  DeviceAllocator allocator(0, options());
  void* freed = allocator.allocate(8 * kMiB, nullptr);
  void* kept = allocator.allocate(2 * kMiB, nullptr);
  allocator.deallocate(freed);
  void* filler = allocator.allocate(1880 * kMiB, other);  // 156 MiB left: no room, not full
  const cudasim_call_counts before = sim_calls();
  void* ending = allocator.allocate(5 * kMiB, nullptr);
  const cudasim_call_counts counts = sim_calls();
  EXPECT_EQ(counts.unmap, before.unmap);
  EXPECT_EQ(counts.create, before.create);
  for (void* block : {ending, filler, kept}) allocator.deallocate(block);
}

// cut_pages:True (Note [Cut pages]): without room, the shared page a block ends inside is cut
// far from the limit too, and its free rest is a page of its own. Here that rest is what a
// request on a full device lacks: by default it stays in the page beside the block's end and
// the request runs out of memory; cut, the rest moves to it.
TEST_F(PagesOfOneBlock, WithCutPagesTheRestOfAPageABlockEndsInsideCanMoveWithoutRoom) {
  for (const char* config : {"policy:cudacache", "policy:cudacache,cut_pages:True"}) {
    SCOPED_TRACE(config);
    const bool cuts = std::string(config).find("cut_pages:True") != std::string::npos;
    ASSERT_EQ(cudasim_set_capacity(0, 2048 * kMiB), 0);  // with room: 4 MiB pages (1/512)
    const ScopedStream other;
    {
      DeviceAllocator allocator(0, Options(config));
      void* freed = allocator.allocate(8 * kMiB, nullptr);  // two 4 MiB pages
      void* kept = allocator.allocate(2 * kMiB, nullptr);   // a third, so the range ends in use
      allocator.deallocate(freed);
      void* filler = allocator.allocate(1880 * kMiB, other);  // 156 MiB left: no room, not full

      cudasim_call_counts before = sim_calls();
      void* ending = allocator.allocate(5 * kMiB, nullptr);  // ends 1 MiB into the second page
      const cudasim_call_counts counts = sim_calls();
      // Cut: unmapped, released, and replaced by the granule that holds the block's end and
      // the 2 MiB after it. By default left whole.
      EXPECT_EQ(counts.unmap, before.unmap + (cuts ? 1 : 0));
      EXPECT_EQ(counts.release, before.release + (cuts ? 1 : 0));
      EXPECT_EQ(counts.create, before.create + (cuts ? 2 : 0));
      ASSERT_EQ(cudaMemset(ending, 6, 5 * kMiB), cudaSuccess);

      // All the device has left and 2 MiB more: the granule after the block's end.
      const std::size_t left = 2048 * kMiB - sim_counters().in_use_bytes;
      void* last = nullptr;
      try {
        last = allocator.allocate(left + 2 * kMiB, other);
        EXPECT_TRUE(cuts) << "expected an out-of-memory error";
        ASSERT_EQ(cudaMemset(last, 7, left + 2 * kMiB), cudaSuccess);
      } catch (const OutOfMemoryError& error) {
        EXPECT_FALSE(cuts) << error.what();
        // The 3 MiB after the block's end, and the 2 MiB beside `kept` in its 4 MiB page.
        EXPECT_EQ(error.report().free_in_partial_pages_bytes, 5 * kMiB);
      }
      EXPECT_LE(sim_counters().in_use_bytes, 2048 * kMiB);
      EXPECT_EQ(static_cast<std::uint64_t>(reserved(allocator.stats())),
                sim_counters().in_use_bytes);
      EXPECT_TRUE(holds(ending, 5 * kMiB, 6));
      if (last != nullptr) allocator.deallocate(last);
      for (void* block : {ending, filler, kept}) allocator.deallocate(block);
    }
    EXPECT_EQ(sim_counters().in_use_bytes, 0u);
  }
}

// With room cut_pages changes nothing: the page is left whole, as by default.
TEST_F(PagesOfOneBlock, WithCutPagesAPageIsLeftWholeWhileTheDeviceHasRoom) {
  ASSERT_EQ(cudasim_set_capacity(0, 2048 * kMiB), 0);
  DeviceAllocator allocator(0, Options("cut_pages:True"));
  void* freed = allocator.allocate(8 * kMiB, nullptr);
  void* kept = allocator.allocate(2 * kMiB, nullptr);
  allocator.deallocate(freed);
  const cudasim_call_counts before = sim_calls();
  void* ending = allocator.allocate(5 * kMiB, nullptr);  // 12 MiB of 2 GiB in use: room
  const cudasim_call_counts counts = sim_calls();
  EXPECT_EQ(counts.unmap, before.unmap);
  EXPECT_EQ(counts.create, before.create);
  for (void* block : {ending, kept}) allocator.deallocate(block);
}

// On a device of 64 GiB a growth with room creates pages of up to 64 MiB (Note [Fewer pages
// with room]), more than the 20 MiB that "near full" is otherwise judged by: such a page is cut
// once the device has less than twice its size left, here 100 MiB. The rest of the page is then a
// page of its own that empty_cache gives back while the block lives (uncut, the page holds the
// block's end and nothing of it can be released).
TEST_F(PagesOfOneBlock, APageLargerThanPyTorchsMadeWithRoomIsCutNearAFullDevice) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{64} << 30), 0);
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    void* freed = allocator.allocate(120 * kMiB, nullptr);  // pages of 64 and 56 MiB
    void* kept = allocator.allocate(2 * kMiB, nullptr);     // a 20 MiB page: the range ends in use
    EXPECT_EQ(sim_calls().create, 3u);
    allocator.deallocate(freed);
    void* filler = allocator.allocate((std::size_t{64} << 30) - 240 * kMiB, other);
    ASSERT_EQ((std::size_t{64} << 30) - sim_counters().in_use_bytes, 100 * kMiB);

    cudasim_call_counts before = sim_calls();
    void* ending = allocator.allocate(70 * kMiB, nullptr);  // ends 6 MiB into the 56 MiB page
    const cudasim_call_counts counts = sim_calls();
    EXPECT_EQ(counts.unmap, before.unmap + 1);
    EXPECT_EQ(counts.release, before.release + 1);
    EXPECT_EQ(counts.create, before.create + 2);  // 6 MiB for the block's end, 50 MiB the rest
    ASSERT_EQ(cudaMemset(ending, 5, 70 * kMiB), cudaSuccess);

    const std::int64_t held = reserved(allocator.stats());
    allocator.empty_cache();  // the 50 MiB rest page is wholly free
    EXPECT_EQ(reserved(allocator.stats()), held - static_cast<std::int64_t>(50 * kMiB));
    EXPECT_TRUE(holds(ending, 70 * kMiB, 5));
    for (void* block : {ending, filler, kept}) allocator.deallocate(block);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

}  // namespace
}  // namespace cudacache
