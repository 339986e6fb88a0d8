#include "test_support.h"

#include <gtest/gtest.h>

#include <string>

namespace cudacache {
namespace {

using testing::HeldStream;
using testing::pytorch_native;
using testing::ScopedStream;

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Snapshot, DescribesSegmentsAndBlockStates) {
  CUDACACHE_REQUIRE_CUDASIM();
  const ScopedStream side;
  DeviceAllocator allocator(0, pytorch_native());
  void* a = allocator.allocate(1000, nullptr);
  void* b = allocator.allocate(2000, nullptr);
  void* large = allocator.allocate(12 * kMiB, nullptr);
  allocator.record_stream(b, side);
  HeldStream held(side);
  allocator.deallocate(b);  // pending until side completes

  const MemorySnapshot snapshot = allocator.snapshot();
  ASSERT_EQ(snapshot.segments.size(), 2u);
  const SegmentSnapshot* small = nullptr;
  for (const auto& segment : snapshot.segments) {
    if (std::string(segment.segment_type) == "small") small = &segment;
  }
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->total_size, 2 * kMiB);
  EXPECT_EQ(small->allocated_size, 1024u);
  EXPECT_EQ(small->active_size, 1024u + 2048u);
  EXPECT_EQ(small->requested_size, 3000u);
  ASSERT_EQ(small->blocks.size(), 3u);
  EXPECT_STREQ(small->blocks[0].state, "active_allocated");
  EXPECT_STREQ(small->blocks[1].state, "active_pending_free");
  EXPECT_STREQ(small->blocks[2].state, "inactive");

  const std::string json = allocator.snapshot_json();
  EXPECT_EQ(json.rfind("{\"segments\":[", 0), 0u) << json;
  EXPECT_NE(json.find("\"device_traces\":[[]]"), std::string::npos);
  for (const char* field : {"\"device\":", "\"address\":", "\"total_size\":", "\"allocated_size\":",
                            "\"active_size\":", "\"requested_size\":", "\"stream\":",
                            "\"segment_type\":", "\"is_expandable\":false", "\"blocks\":"}) {
    EXPECT_EQ(count(json, field) >= 2, true) << field;
  }
  EXPECT_EQ(count(json, "\"state\":"), 4u);  // 3 small blocks + 1 large block
  EXPECT_EQ(count(json, "\"frames\":[]"), 2u + 4u);

  ASSERT_EQ(held.release(), 0);
  allocator.deallocate(a);
  allocator.deallocate(large);
}

}  // namespace
}  // namespace cudacache
