// Allocation stacks (stack_table.h): what the history's alloc and oom entries and the
// snapshot's allocated blocks carry as `frames` with record_stacks / record_history(N, stacks).
// The binary is linked with -rdynamic (ENABLE_EXPORTS) so that dladdr names its functions.
#include "json_test_reader.h"
#include "stack_table.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

// Call sites with names the frames must show: outside any namespace and never inlined, so
// that each is one frame of its own.
extern "C++" CUDACACHE_TEST_SITE void* stacks_test_site_one(cudacache::DeviceAllocator& a,
                                                            std::size_t size) {
  void* p = a.allocate(size, nullptr);
  asm volatile("" ::: "memory");  // keeps the call from becoming a tail call
  return p;
}

extern "C++" CUDACACHE_TEST_SITE void* stacks_test_site_two(cudacache::DeviceAllocator& a,
                                                            std::size_t size) {
  void* p = a.allocate(size, nullptr);
  asm volatile("" ::: "memory");
  return p;
}

namespace cudacache {
namespace {

using replay::testing::Json;
using replay::testing::JsonReader;
using testing::pytorch_native;

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A copy: the entries are often a temporary.
std::optional<HistoryEntry> first_of(const std::vector<HistoryEntry>& entries,
                                     HistoryAction action) {
  for (const HistoryEntry& entry : entries) {
    if (entry.action == action) return entry;
  }
  return std::nullopt;
}

TEST(AllocationStacks, OffByDefault) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native());
  allocator.record_history(100);
  void* p = stacks_test_site_one(allocator, 1000);
  const std::optional<HistoryEntry> alloc = first_of(allocator.history(), HistoryAction::kAlloc);
  ASSERT_TRUE(alloc.has_value());
  EXPECT_EQ(alloc->stack, 0u);
  EXPECT_NE(allocator.snapshot_json().find("\"frames\":[]"), std::string::npos);
  allocator.deallocate(p);
}

TEST(AllocationStacks, CppFramesNameTheCallerFirst) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native());
  allocator.record_history(100, StackKind::kCpp);
  void* p = stacks_test_site_one(allocator, 1000);
  const std::vector<HistoryEntry> entries = allocator.history();
  const std::optional<HistoryEntry> alloc = first_of(entries, HistoryAction::kAlloc);
  ASSERT_TRUE(alloc.has_value());
  ASSERT_NE(alloc->stack, 0u);
  const std::vector<Frame> frames = stack_frames(alloc->stack);
  ASSERT_FALSE(frames.empty());
  // cudacache's own frames (DeviceAllocator::allocate, the capture) are left out: the
  // innermost frame is the program's.
  EXPECT_NE(frames[0].name.find("stacks_test_site_one"), std::string::npos) << frames[0].name;
  EXPECT_FALSE(frames[0].filename.empty());
  // Out to the program's entry: the test's own body (a local symbol: unnamed) and main.
  bool main_seen = false;
  for (const Frame& frame : frames) main_seen = main_seen || frame.name == "main";
  EXPECT_TRUE(main_seen);
  // Segment and free entries carry none.
  EXPECT_EQ(first_of(entries, HistoryAction::kSegmentAlloc)->stack, 0u);
  allocator.deallocate(p);
  EXPECT_EQ(first_of(allocator.history(), HistoryAction::kFreeRequested)->stack, 0u);
}

TEST(AllocationStacks, OneStackPerCallSite) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native());
  allocator.record_history(100, StackKind::kCpp);
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(stacks_test_site_one(allocator, 1000));
  blocks.push_back(stacks_test_site_two(allocator, 1000));
  std::vector<StackId> stacks;
  for (const HistoryEntry& entry : allocator.history()) {
    if (entry.action == HistoryAction::kAlloc) stacks.push_back(entry.stack);
  }
  ASSERT_EQ(stacks.size(), 4u);
  EXPECT_EQ(stacks[0], stacks[1]);  // the same loop line: interned once
  EXPECT_EQ(stacks[1], stacks[2]);
  EXPECT_NE(stacks[2], stacks[3]);
  EXPECT_NE(stack_frames(stacks[3])[0].name.find("stacks_test_site_two"), std::string::npos);
  for (void* p : blocks) allocator.deallocate(p);
}

TEST(AllocationStacks, SnapshotBlocksAndTraceCarryFrames) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, Options("record_history:100,record_stacks:cpp"));
  void* kept = stacks_test_site_one(allocator, 3 * kMiB);
  void* freed = stacks_test_site_two(allocator, 1000);
  allocator.deallocate(freed);
  const Json snapshot = JsonReader(allocator.snapshot_json()).read();
  int allocated_blocks = 0;
  for (const Json& segment : snapshot.at("segments").array) {
    for (const Json& block : segment.at("blocks").array) {
      const auto& frames = block.at("frames").array;
      if (block.at("state").text == "active_allocated") {
        ++allocated_blocks;
        ASSERT_FALSE(frames.empty());
        EXPECT_NE(frames[0].at("name").text.find("stacks_test_site_one"), std::string::npos);
        EXPECT_TRUE(frames[0].has("filename"));
        EXPECT_EQ(frames[0].at("line").type, Json::Type::kNumber);
      } else {
        EXPECT_TRUE(frames.empty());  // a free block has no allocation site
      }
    }
  }
  EXPECT_EQ(allocated_blocks, 1);
  int alloc_entries_with_frames = 0;
  for (const Json& entry : snapshot.at("device_traces").array.at(0).array) {
    if (entry.at("action").text == "alloc" && !entry.at("frames").array.empty()) {
      ++alloc_entries_with_frames;
    }
  }
  EXPECT_EQ(alloc_entries_with_frames, 2);
  allocator.deallocate(kept);
}

class AllocationStacksOnSmallDevice : public testing::SimulatedDeviceTest {};

TEST_F(AllocationStacksOnSmallDevice, OutOfMemoryEntryCarriesTheRequestsFrames) {
  ASSERT_EQ(cudasim_set_capacity(0, 64 * kMiB), 0);
  DeviceAllocator allocator(0, pytorch_native("record_history:100,record_stacks:cpp"));
  EXPECT_THROW(stacks_test_site_two(allocator, 256 * kMiB), OutOfMemoryError);
  const std::optional<HistoryEntry> oom = first_of(allocator.history(), HistoryAction::kOom);
  ASSERT_TRUE(oom.has_value());
  ASSERT_NE(oom->stack, 0u);
  EXPECT_NE(stack_frames(oom->stack)[0].name.find("stacks_test_site_two"), std::string::npos);
}

// A stand-in for the Python provider: two frames of a pretend interpreter.
void two_python_frames(FrameSink emit, void* sink) {
  emit(sink, "train_step", "/work/train.py", 42);
  emit(sink, "<module>", "/work/train.py", 7);
}

struct ProviderGuard {
  explicit ProviderGuard(PythonFramesProvider provider) { set_python_frames_provider(provider); }
  ~ProviderGuard() { set_python_frames_provider(nullptr); }
};

TEST(AllocationStacks, PythonFramesComeFromTheProvider) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native());
  allocator.record_history(100, StackKind::kPython);
  void* without = stacks_test_site_one(allocator, 1000);  // no provider yet: no frames
  ProviderGuard provider(&two_python_frames);
  EXPECT_TRUE(python_frames_available());
  void* with = stacks_test_site_one(allocator, 1000);
  std::vector<StackId> stacks;
  for (const HistoryEntry& entry : allocator.history()) {
    if (entry.action == HistoryAction::kAlloc) stacks.push_back(entry.stack);
  }
  ASSERT_EQ(stacks.size(), 2u);
  EXPECT_EQ(stacks[0], 0u);
  const std::vector<Frame> frames = stack_frames(stacks[1]);
  ASSERT_EQ(frames.size(), 2u);  // python only: no C++ frames
  EXPECT_EQ(frames[0].name, "train_step");
  EXPECT_EQ(frames[0].filename, "/work/train.py");
  EXPECT_EQ(frames[0].line, 42);
  EXPECT_EQ(frames[1].name, "<module>");
  allocator.deallocate(without);
  allocator.deallocate(with);
}

TEST(AllocationStacks, AllPutsCppFramesBeforePythonFrames) {
  CUDACACHE_REQUIRE_CUDASIM();
  ProviderGuard provider(&two_python_frames);
  DeviceAllocator allocator(0, pytorch_native());
  allocator.record_history(100, StackKind::kAll);
  void* p = stacks_test_site_two(allocator, 1000);
  const std::vector<Frame> frames =
      stack_frames(first_of(allocator.history(), HistoryAction::kAlloc)->stack);
  ASSERT_GE(frames.size(), 3u);
  EXPECT_NE(frames[0].name.find("stacks_test_site_two"), std::string::npos);
  EXPECT_EQ(frames[frames.size() - 2].name, "train_step");
  EXPECT_EQ(frames.back().name, "<module>");
  allocator.deallocate(p);
}

TEST(AllocationStacks, StoppingTheHistoryStopsCapturing) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native());
  allocator.record_history(100, StackKind::kCpp);
  allocator.record_history(0);
  allocator.record_history(100);  // a new recording without stacks
  void* p = stacks_test_site_one(allocator, 1000);
  EXPECT_EQ(first_of(allocator.history(), HistoryAction::kAlloc)->stack, 0u);
  allocator.deallocate(p);
}

TEST(AllocationStacks, ThreadsCaptureAndExportTogether) {
  // Capture (no allocator lock), interning and naming (the table's lock, dladdr outside it)
  // from several threads while another exports: for TSan, and every entry keeps its frames.
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native("record_history:100000,record_stacks:cpp"));
  std::atomic<bool> done{false};
  std::thread exporter([&] {
    while (!done.load()) EXPECT_FALSE(allocator.snapshot_json().empty());
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&allocator, t] {
      for (int i = 0; i < 200; ++i) {
        void* p = (i + t) % 2 == 0 ? stacks_test_site_one(allocator, 1000 + 512 * t)
                                   : stacks_test_site_two(allocator, 5000);
        allocator.deallocate(p);
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  done.store(true);
  exporter.join();
  int allocs = 0;
  for (const HistoryEntry& entry : allocator.history()) {
    if (entry.action != HistoryAction::kAlloc) continue;
    ++allocs;
    ASSERT_NE(entry.stack, 0u);
    const std::vector<Frame> frames = stack_frames(entry.stack);
    ASSERT_FALSE(frames.empty());
    EXPECT_EQ(frames[0].name.rfind("stacks_test_site_", 0), 0u) << frames[0].name;
  }
  EXPECT_EQ(allocs, 800);
}

TEST(AllocationStacks, StackKindNamesRoundTrip) {
  for (const StackKind kind :
       {StackKind::kNone, StackKind::kCpp, StackKind::kPython, StackKind::kAll}) {
    StackKind parsed = StackKind::kNone;
    ASSERT_TRUE(parse_stack_kind(stack_kind_name(kind), &parsed));
    EXPECT_EQ(parsed, kind);
  }
  StackKind untouched = StackKind::kCpp;
  EXPECT_FALSE(parse_stack_kind("python3", &untouched));
  EXPECT_FALSE(parse_stack_kind("", &untouched));
  EXPECT_EQ(untouched, StackKind::kCpp);
  EXPECT_TRUE(stack_frames(0).empty());
  EXPECT_TRUE(stack_frames(0xfffffff0u).empty());  // never issued
}

}  // namespace
}  // namespace cudacache
