// The growth detector (Note [Growth detection] in growth_detector.h): a loop that keeps one
// block per step alive from the same line is named, once, with its bytes, blocks and steps;
// steady loops, one-time allocations and blocks from before the watch are not. Linked with
// -rdynamic so that the sites' frames carry this file's function names.
#include "growth_detector.h"
#include "json_test_reader.h"
#include "test_support.h"

#include <cudacache/cudacache.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

// The leak: one block per call, kept by the caller.
extern "C++" CUDACACHE_TEST_SITE void* growth_test_keep_one(cudacache::DeviceAllocator& a,
                                                            std::size_t size) {
  void* p = a.allocate(size, nullptr);
  asm volatile("" ::: "memory");  // keeps the call from becoming a tail call
  return p;
}

// A step's temporary work: allocated and freed within the step.
extern "C++" CUDACACHE_TEST_SITE void growth_test_transient(cudacache::DeviceAllocator& a,
                                                            std::size_t size) {
  void* p = a.allocate(size, nullptr);
  asm volatile("" ::: "memory");
  a.deallocate(p);
}

extern "C++" CUDACACHE_TEST_SITE void* growth_test_once(cudacache::DeviceAllocator& a,
                                                        std::size_t size) {
  void* p = a.allocate(size, nullptr);
  asm volatile("" ::: "memory");
  return p;
}

// Steps of a loop whose trip count the compiler cannot see (a loop it fully unrolled would
// call from a different return address each step, in an unnamed test body: a different site).
extern "C++" CUDACACHE_TEST_SITE std::vector<bool> growth_test_steps(cudacache::DeviceAllocator& a,
                                                                     int steps, std::size_t keep,
                                                                     std::vector<void*>* kept) {
  std::vector<bool> found;
  for (int step = 0; step < steps; ++step) {
    kept->push_back(growth_test_keep_one(a, keep));
    found.push_back(a.mark_step());
  }
  return found;
}

// Two steps from two return addresses of one named function, as an unrolled loop makes them.
extern "C++" CUDACACHE_TEST_SITE std::vector<bool> growth_test_unrolled(
    cudacache::DeviceAllocator& a, std::size_t keep, std::vector<void*>* kept) {
  std::vector<bool> found;
  kept->push_back(growth_test_keep_one(a, keep));
  found.push_back(a.mark_step());
  kept->push_back(growth_test_keep_one(a, keep));
  found.push_back(a.mark_step());
  return found;
}

namespace cudacache {
namespace {

using replay::testing::Json;
using replay::testing::JsonReader;

constexpr std::size_t kMiB = std::size_t{1} << 20;

class GrowthDetectionSites : public testing::SimulatedDeviceTest {};

// --- The detector alone -------------------------------------------------------------------

TEST(GrowthDetector, NeedsTheGivenNumberOfRisesInARow) {
  GrowthDetector detector;
  EXPECT_FALSE(detector.end_step(100));  // not watching
  detector.watch(3, 100);
  EXPECT_FALSE(detector.end_step(200));
  EXPECT_FALSE(detector.end_step(300));
  EXPECT_FALSE(detector.end_step(300));  // flat: not a rise
  EXPECT_FALSE(detector.end_step(400));
  EXPECT_FALSE(detector.end_step(500));
  EXPECT_TRUE(detector.end_step(600));  // 300 -> 400 -> 500 -> 600
}

TEST(GrowthDetector, SitesNeedBlocksFromTwoStepsOfTheRise) {
  GrowthDetector detector;
  const std::uint64_t before = detector.step();
  detector.watch(2, 0);
  const std::uint64_t first = detector.step();
  EXPECT_GT(first, before);
  EXPECT_FALSE(detector.end_step(10));
  const std::uint64_t second = detector.step();
  ASSERT_TRUE(detector.end_step(20));
  // Stacks 5, 7 and 9 were never issued: no frames, each a site of its own.
  const std::vector<StackTally> tallies = detector.tally({{7, before, 1000},  // before the watch
                                                          {5, first, 4},      // two steps: growth
                                                          {5, second, 6},
                                                          {9, second, 100}});  // once: not growth
  ASSERT_EQ(tallies.size(), 2u);  // stack 7 is older than the watch
  const GrowthReport report = make_growth_report(0, detector.report(0), tallies);
  ASSERT_TRUE(report.growing);
  ASSERT_EQ(report.sites.size(), 1u);
  EXPECT_EQ(report.sites[0].stack, 5u);
  EXPECT_EQ(report.sites[0].bytes, 10u);
  EXPECT_EQ(report.sites[0].blocks, 2u);
  EXPECT_EQ(report.sites[0].steps, 2u);
  EXPECT_EQ(report.allocated_at_boundaries, (std::vector<std::size_t>{0, 10, 20}));
  EXPECT_EQ(report.step, 2u);
  EXPECT_TRUE(detector.record(report));
  EXPECT_FALSE(detector.record(report));  // once per watch
  EXPECT_FALSE(detector.end_step(30));
  EXPECT_TRUE(detector.report(0).growing);
}

TEST(GrowthDetector, NoQualifyingSiteKeepsWatching) {
  GrowthDetector detector;
  detector.watch(2, 0);
  const std::uint64_t first = detector.step();
  detector.end_step(10);
  ASSERT_TRUE(detector.end_step(20));
  const GrowthReport report = make_growth_report(
      0, detector.report(0), detector.tally({{1, first, 10}, {2, first + 1, 10}}));
  EXPECT_FALSE(report.growing);  // a new site each step
  EXPECT_FALSE(detector.record(report));
  EXPECT_TRUE(detector.end_step(30));  // still rising: asked again
}

TEST_F(GrowthDetectionSites, AnUnrolledLoopIsOneSite) {
  DeviceAllocator allocator(0, Options());
  allocator.watch_growth(2, StackKind::kCpp, /*quiet=*/true);
  std::vector<void*> kept;
  EXPECT_EQ(growth_test_unrolled(allocator, kMiB, &kept), (std::vector<bool>{false, true}));
  const GrowthReport report = allocator.growth_report();
  ASSERT_EQ(report.sites.size(), 1u);
  EXPECT_EQ(report.sites[0].blocks, 2u);
  EXPECT_EQ(report.sites[0].steps, 2u);
  for (void* p : kept) allocator.deallocate(p);
}

// --- Through the allocator ----------------------------------------------------------------

class GrowthDetection : public testing::SimulatedDeviceTest {};

TEST_F(GrowthDetection, NamesTheLineThatKeepsOneBlockPerStep) {
  DeviceAllocator allocator(0, Options());
  void* weights = growth_test_once(allocator, 64 * kMiB);  // before the watch: not growth
  allocator.watch_growth(3, StackKind::kCpp, /*quiet=*/false);
  std::vector<void*> kept;
  ::testing::internal::CaptureStderr();
  std::vector<bool> found;
  for (int step = 0; step < 6; ++step) {
    growth_test_transient(allocator, 8 * kMiB);
    kept.push_back(growth_test_keep_one(allocator, 2 * kMiB));
    growth_test_transient(allocator, 1000);
    found.push_back(allocator.mark_step());
  }
  const std::string printed = ::testing::internal::GetCapturedStderr();
  // Found at the third boundary (three rises from the watch's start), said once.
  EXPECT_EQ(found, (std::vector<bool>{false, false, true, false, false, false}));
  EXPECT_NE(printed.find("grew at each of the last 3 steps"), std::string::npos) << printed;
  EXPECT_NE(printed.find("growth_test_keep_one"), std::string::npos) << printed;
  EXPECT_NE(printed.find("6.00 MiB in 3 blocks from 3 steps"), std::string::npos) << printed;
  EXPECT_EQ(printed.find("growth_test_transient"), std::string::npos) << printed;
  EXPECT_EQ(printed.find("growth_test_once"), std::string::npos) << printed;

  const GrowthReport report = allocator.growth_report();
  ASSERT_TRUE(report.growing);
  ASSERT_EQ(report.sites.size(), 1u);
  EXPECT_EQ(report.sites[0].bytes, 6 * kMiB);
  EXPECT_EQ(report.sites[0].blocks, 3u);
  EXPECT_EQ(report.sites[0].steps, 3u);
  EXPECT_EQ(report.step, 3u);
  const std::vector<Frame> frames = stack_frames(report.sites[0].stack);
  ASSERT_FALSE(frames.empty());
  EXPECT_NE(frames[0].name.find("growth_test_keep_one"), std::string::npos) << frames[0].name;

  const Json json = JsonReader(growth_report_json(report)).read();
  EXPECT_TRUE(json.at("growing").boolean);
  EXPECT_EQ(json.at("allocated_at_boundaries").array.size(), 4u);
  EXPECT_DOUBLE_EQ(json.at("sites").array.at(0).at("bytes").number, static_cast<double>(6 * kMiB));
  EXPECT_NE(json.at("sites").array.at(0).at("frames").array.at(0).at("name").text.find(
                "growth_test_keep_one"),
            std::string::npos);
  for (void* p : kept) allocator.deallocate(p);
  allocator.deallocate(weights);
}

TEST_F(GrowthDetection, ASteadyLoopIsNotGrowth) {
  DeviceAllocator allocator(0, Options());
  allocator.watch_growth(2, StackKind::kCpp, /*quiet=*/true);
  for (int step = 0; step < 8; ++step) {
    void* kept_for_one_step = growth_test_keep_one(allocator, 2 * kMiB);
    growth_test_transient(allocator, 4 * kMiB);
    allocator.deallocate(kept_for_one_step);
    EXPECT_FALSE(allocator.mark_step());
  }
  EXPECT_FALSE(allocator.growth_report().growing);
}

TEST_F(GrowthDetection, OneTimeAllocationsOfTheFirstStepsAreNotGrowth) {
  // Gradients in step 1, optimizer state in step 2, a cache in step 3: allocated memory rises
  // three times, but each site allocates once.
  DeviceAllocator allocator(0, Options());
  allocator.watch_growth(3, StackKind::kCpp, /*quiet=*/true);
  void* a = growth_test_once(allocator, 4 * kMiB);
  EXPECT_FALSE(allocator.mark_step());
  void* b = growth_test_keep_one(allocator, 4 * kMiB);
  EXPECT_FALSE(allocator.mark_step());
  void* c = allocator.allocate(4 * kMiB, nullptr);  // a third site
  EXPECT_FALSE(allocator.mark_step());
  EXPECT_FALSE(allocator.growth_report().growing);
  for (void* p : {a, b, c}) allocator.deallocate(p);
}

TEST_F(GrowthDetection, TheOptionWatchesFromCreation) {
  ::testing::internal::CaptureStderr();
  DeviceAllocator allocator(0, Options("detect_growth:2"));
  std::vector<void*> kept;
  const std::vector<bool> found = growth_test_steps(allocator, 3, kMiB, &kept);
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(found, (std::vector<bool>{false, true, false}));
  EXPECT_NE(printed.find("growth_test_keep_one"), std::string::npos) << printed;
  for (void* p : kept) allocator.deallocate(p);
}

TEST_F(GrowthDetection, QuietReportsOnlyThroughTheReport) {
  DeviceAllocator allocator(0, Options());
  allocator.watch_growth(2, StackKind::kCpp, /*quiet=*/true);
  std::vector<void*> kept;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(growth_test_steps(allocator, 2, kMiB, &kept), (std::vector<bool>{false, true}));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_TRUE(allocator.growth_report().growing);
  for (void* p : kept) allocator.deallocate(p);
}

TEST_F(GrowthDetection, StoppingTheWatchStopsCapturingStacks) {
  DeviceAllocator allocator(0, Options());
  allocator.record_history(100);
  allocator.watch_growth(2, StackKind::kCpp, true);
  allocator.watch_growth(0, StackKind::kCpp, true);
  void* p = growth_test_keep_one(allocator, kMiB);
  for (const HistoryEntry& entry : allocator.history()) {
    if (entry.action == HistoryAction::kAlloc) {
      EXPECT_EQ(entry.stack, 0u);
    }
  }
  EXPECT_FALSE(allocator.mark_step());
  allocator.deallocate(p);
}

TEST(GrowthOptions, BadValuesAreRefusedByName) {
  for (const char* config : {"detect_growth:1", "detect_growth:1001", "detect_growth:-2",
                             "detect_growth:yes", "record_stacks:python3", "record_stacks:"}) {
    try {
      Options options(config);
      ADD_FAILURE() << config << " was accepted";
    } catch (const Error& error) {
      const std::string key = std::string(config).substr(0, std::string(config).find(':'));
      EXPECT_NE(std::string(error.what()).find(key), std::string::npos) << error.what();
    }
  }
  EXPECT_EQ(Options("detect_growth:5").detect_growth.rising_steps, 5u);
  EXPECT_EQ(Options("record_stacks:all").record_stacks.kind, StackKind::kAll);
  const std::string printed = Options("detect_growth:3,record_stacks:python").to_config_string();
  EXPECT_NE(printed.find("detect_growth:3"), std::string::npos) << printed;
  EXPECT_NE(printed.find("record_stacks:python"), std::string::npos) << printed;
}

}  // namespace
}  // namespace cudacache
