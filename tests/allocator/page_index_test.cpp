// PageIndex (device/page_index.h): lookups by address, the page across an address and walks in
// address order, on pages of many sizes (some across chunks of the table, some far apart);
// through random inserts and erases, the same answers as a std::map of the same pages; and host
// memory that grows with the pages, not with the address space they span.
#include "page_index.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

// GCC sees free() of what its operator new returned: the pair below is malloc and free, so it
// matches (GCC only: clang has no such warning).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
std::size_t g_new_bytes = 0;  // bytes asked of operator new so far
}  // namespace

void* operator new(std::size_t bytes) {
  g_new_bytes += bytes;
  if (void* memory = std::malloc(bytes == 0 ? 1 : bytes)) return memory;
  throw std::bad_alloc();
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }

namespace cudacache {
namespace {

constexpr std::size_t kGranule = std::size_t{2} << 20;
constexpr std::uintptr_t kBase = std::uintptr_t{1} << 40;
// 4 GiB of 2 MiB granules: four chunks of the table.
constexpr std::size_t kRangeGranules = 2048;
constexpr std::size_t kRange = kRangeGranules * kGranule;

Page page_of(std::size_t granules, PageHandle handle) {
  return Page{handle, granules * kGranule, false};
}

void put(PageIndex& index, std::uintptr_t address, const Page& page) {
  index.reserve(address, page.size, 1);
  index.insert(address, page);
}

std::vector<std::pair<std::uintptr_t, PageHandle>> walk(const PageIndex& index,
                                                        std::uintptr_t address,
                                                        std::uintptr_t end) {
  std::vector<std::pair<std::uintptr_t, PageHandle>> seen;
  index.for_each_from(address, end, [&](std::uintptr_t at, const Page& page) {
    seen.emplace_back(at, page.handle);
  });
  return seen;
}

TEST(PageIndex, FindsAPageOnlyAtItsFirstGranule) {
  PageIndex index(kBase, kRange, kGranule);
  EXPECT_TRUE(index.empty());
  put(index, kBase + 10 * kGranule, page_of(3, 7));
  EXPECT_EQ(index.size(), 1u);
  ASSERT_NE(index.find(kBase + 10 * kGranule), nullptr);
  EXPECT_EQ(index.find(kBase + 10 * kGranule)->handle, 7u);
  EXPECT_EQ(index.find(kBase + 11 * kGranule), nullptr);         // inside it
  EXPECT_EQ(index.find(kBase + 10 * kGranule + 4096), nullptr);  // not on a granule
  EXPECT_EQ(index.find(kBase - kGranule), nullptr);              // before the range
  EXPECT_EQ(index.find(kBase + kRange), nullptr);                // after it
  index.find(kBase + 10 * kGranule)->exclusive = true;           // the page itself, not a copy
  EXPECT_TRUE(index.find(kBase + 10 * kGranule)->exclusive);
}

TEST(PageIndex, ThePageAcrossAnAddressStartsBeforeItAndEndsAfterIt) {
  PageIndex index(kBase, kRange, kGranule);
  const std::uintptr_t at = kBase + 10 * kGranule;
  put(index, at, page_of(3, 7));
  EXPECT_FALSE(index.across(at));  // it starts there: not before
  for (const std::uintptr_t point : {at + 1, at + kGranule, at + 3 * kGranule - 1}) {
    const auto found = index.across(point);
    ASSERT_TRUE(found) << point - at;
    EXPECT_EQ(found->first, at);
    EXPECT_EQ(found->second.handle, 7u);
  }
  EXPECT_FALSE(index.across(at + 3 * kGranule));  // it ends there
  EXPECT_FALSE(index.across(at - 1));
  EXPECT_FALSE(index.across(kBase));
  EXPECT_FALSE(index.across(kBase + kRange + kGranule));
}

TEST(PageIndex, APageAcrossChunksIsFoundFromItsLastGranule) {
  // 1.5 GiB from the middle of the first chunk into the third, with a small page after it.
  PageIndex index(kBase, kRange, kGranule);
  put(index, kBase + 300 * kGranule, page_of(768, 1));
  put(index, kBase + 1068 * kGranule, page_of(1, 2));
  const auto found = index.across(kBase + 1067 * kGranule + 5);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->first, kBase + 300 * kGranule);
  ASSERT_TRUE(index.across(kBase + 1068 * kGranule + 5));
  EXPECT_EQ(index.across(kBase + 1068 * kGranule + 5)->second.handle, 2u);
  EXPECT_FALSE(index.across(kBase + 1069 * kGranule + 5));
}

TEST(PageIndex, WalksGoInAddressOrderAcrossGapsAndStopAtThePageThatEndsPastTheEnd) {
  PageIndex index(kBase, kRange, kGranule);
  put(index, kBase + 1900 * kGranule, page_of(4, 4));  // in the last chunk
  put(index, kBase + 5 * kGranule, page_of(2, 1));
  put(index, kBase + 7 * kGranule, page_of(1, 2));
  put(index, kBase + 700 * kGranule, page_of(10, 3));  // past an empty stretch
  using Seen = std::vector<std::pair<std::uintptr_t, PageHandle>>;
  EXPECT_EQ(walk(index, kBase, kBase + kRange), (Seen{{kBase + 5 * kGranule, 1},
                                                      {kBase + 7 * kGranule, 2},
                                                      {kBase + 700 * kGranule, 3},
                                                      {kBase + 1900 * kGranule, 4}}));
  // From inside the first page: pages that start there or later.
  EXPECT_EQ(walk(index, kBase + 6 * kGranule, kBase + kRange).front().second, 2u);
  // The page of 10 granules ends past 705: the walk stops at it, not after it.
  EXPECT_EQ(walk(index, kBase, kBase + 705 * kGranule),
            (Seen{{kBase + 5 * kGranule, 1}, {kBase + 7 * kGranule, 2}}));
  EXPECT_TRUE(walk(index, kBase + 8 * kGranule, kBase + 700 * kGranule).empty());
  const auto first = index.first_from(kBase + 8 * kGranule, kBase + kRange);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->first, kBase + 700 * kGranule);
  EXPECT_FALSE(index.first_from(kBase + 8 * kGranule, kBase + 700 * kGranule));
}

TEST(PageIndex, AnErasedPageIsGoneAndItsGranulesTakeANewOne) {
  PageIndex index(kBase, kRange, kGranule);
  put(index, kBase, page_of(4, 1));
  index.erase(kBase);
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.find(kBase), nullptr);
  EXPECT_FALSE(index.across(kBase + kGranule));
  EXPECT_TRUE(walk(index, kBase, kBase + kRange).empty());
  put(index, kBase + kGranule, page_of(1, 2));
  EXPECT_EQ(index.across(kBase + kGranule + 1)->second.handle, 2u);
}

TEST(PageIndex, AGranuleThatIsNotAPowerOfTwoIsRefused) {
  EXPECT_THROW(PageIndex(kBase, kRange, 0), std::invalid_argument);
  EXPECT_THROW(PageIndex(kBase, kRange, 3 * kGranule), std::invalid_argument);
  EXPECT_NO_THROW(PageIndex(kBase, kRange, 4 * kGranule));
}

TEST(PageIndex, RandomInsertsAndErasesMatchAMap) {
  // Pages of 1 to 600 granules land in free stretches of the range and leave at random; after
  // each change every lookup agrees with a std::map of the same pages.
  std::mt19937_64 random(20261207);
  PageIndex index(kBase, kRange, kGranule);
  std::map<std::uintptr_t, Page> expected;
  std::vector<bool> used(kRangeGranules, false);
  PageHandle next_handle = 1;
  auto check = [&](std::uintptr_t point) {
    auto it = expected.lower_bound(point);
    std::optional<std::pair<std::uintptr_t, Page>> across;
    if (it != expected.begin() && std::prev(it)->first + std::prev(it)->second.size > point) {
      across = *std::prev(it);
    }
    const auto found = index.across(point);
    ASSERT_EQ(found.has_value(), across.has_value()) << point - kBase;
    if (found) {
      EXPECT_EQ(found->first, across->first);
      EXPECT_EQ(found->second.handle, across->second.handle);
      EXPECT_EQ(found->second.size, across->second.size);
    }
    const auto first = index.first_from(point, kBase + kRange);
    ASSERT_EQ(first.has_value(), it != expected.end());
    if (first) {
      EXPECT_EQ(first->first, it->first);
      EXPECT_EQ(first->second.handle, it->second.handle);
      // The page at an address, found directly: a removal that moved it kept its slot right.
      const Page* direct = index.find(it->first);
      ASSERT_NE(direct, nullptr);
      EXPECT_EQ(direct->handle, it->second.handle);
      EXPECT_EQ(direct->size, it->second.size);
    }
  };
  for (int step = 0; step < 3000; ++step) {
    if (!expected.empty() && random() % 3 == 0) {
      auto it = expected.begin();
      std::advance(it, static_cast<long>(random() % expected.size()));
      const std::size_t first = (it->first - kBase) / kGranule;
      for (std::size_t g = first; g < first + it->second.size / kGranule; ++g) used[g] = false;
      index.erase(it->first);
      expected.erase(it);
    } else {
      const std::size_t granules = random() % 8 == 0 ? 1 + random() % 600 : 1 + random() % 12;
      const std::size_t first = random() % (kRangeGranules - granules + 1);
      bool free = true;
      for (std::size_t g = first; g < first + granules && free; ++g) free = !used[g];
      if (!free) continue;
      for (std::size_t g = first; g < first + granules; ++g) used[g] = true;
      const Page page = page_of(granules, next_handle++);
      put(index, kBase + first * kGranule, page);
      expected.emplace(kBase + first * kGranule, page);
    }
    ASSERT_EQ(index.size(), expected.size());
    for (int probe = 0; probe < 4; ++probe) {
      check(kBase + random() % kRange);
      if (HasFatalFailure()) return;
    }
  }
  std::vector<std::pair<std::uintptr_t, PageHandle>> all;
  for (const auto& [address, page] : expected) all.emplace_back(address, page.handle);
  EXPECT_EQ(walk(index, kBase, kBase + kRange), all);
}

TEST(PageIndex, HostMemoryGrowsWithThePagesNotTheAddressSpace) {
  // A range of 64 GiB with one 80 MiB page in each GiB (a device's first pages, spread by
  // growths of several ranges): each chunk of the table the pages span must fit in one 4 KiB
  // page of host memory, which a first touch faults in whole. Slots of whole pages took 12 KiB.
  constexpr std::size_t kChunks = 32;
  constexpr std::size_t kGranulesPerGiB = (std::size_t{1} << 30) / kGranule;
  PageIndex index(kBase, kChunks * kGranulesPerGiB * kGranule, kGranule);
  const std::size_t before = g_new_bytes;
  for (std::size_t chunk = 0; chunk < kChunks; ++chunk) {
    put(index, kBase + chunk * kGranulesPerGiB * kGranule, page_of(40, chunk + 1));
  }
  const std::size_t bytes = g_new_bytes - before;
  EXPECT_LE(bytes, kChunks * 4096) << bytes / kChunks << " bytes a chunk";
  for (std::size_t chunk = 0; chunk < kChunks; ++chunk) {
    const Page* page = index.find(kBase + chunk * kGranulesPerGiB * kGranule);
    ASSERT_NE(page, nullptr);
    EXPECT_EQ(page->handle, chunk + 1);
  }
}

TEST(PageIndex, ErasingMovesTheLastPageAndKeepsEveryLookupRight) {
  PageIndex index(kBase, kRange, kGranule);
  put(index, kBase, page_of(2, 1));
  put(index, kBase + 600 * kGranule, page_of(3, 2));
  put(index, kBase + 1500 * kGranule, page_of(1, 3));  // the last in the pages' array
  index.erase(kBase);                                  // the last one fills its place
  EXPECT_EQ(index.find(kBase), nullptr);
  ASSERT_NE(index.find(kBase + 1500 * kGranule), nullptr);
  EXPECT_EQ(index.find(kBase + 1500 * kGranule)->handle, 3u);
  index.erase(kBase + 1500 * kGranule);  // now in the first place
  EXPECT_EQ(index.find(kBase + 1500 * kGranule), nullptr);
  ASSERT_NE(index.find(kBase + 600 * kGranule), nullptr);
  EXPECT_EQ(index.find(kBase + 600 * kGranule)->handle, 2u);
  EXPECT_EQ(index.across(kBase + 602 * kGranule)->second.handle, 2u);
  EXPECT_EQ(index.size(), 1u);
}

}  // namespace
}  // namespace cudacache
