// --html and --memory-viz: the pickle writer (read back by the tool's own reader), the
// timeline's downsampling, the snapshots each adapter records during a replay, and the page.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "memory_page.h"
#include "memory_viz_writer.h"
#include "pickle_reader.h"
#include "pickle_writer.h"
#include "replay_allocator.h"
#include "replayer.h"
#include "report.h"
#include "require_cudasim.h"
#include "snapshot_converter.h"
#include "timeline.h"
#include "trace_csv.h"

namespace cudacache::replay {
namespace {

TEST(PickleWriter, WritesWhatThePickleReaderReads) {
  PickleWriter out;
  out.begin_dict();
  out.field("small", std::int64_t{7});
  out.field("two_bytes", std::int64_t{40000});
  out.field("negative", std::int64_t{-5});
  out.field("address", std::uint64_t{0x7f0000001000});
  out.field("text", "a\"b\xc3\xa9");
  out.field("yes", true);
  out.key("empty");
  out.begin_list();
  out.end_list();
  out.key("list");
  out.begin_list();
  out.value(std::int64_t{1});
  out.none();
  out.end_list();
  out.end_dict();
  const PickleRef root = parse_pickle(out.finish(), "written.pickle");
  ASSERT_TRUE(root->is_dict());
  EXPECT_EQ(root->find("small")->integer, 7);
  EXPECT_EQ(root->find("two_bytes")->integer, 40000);
  EXPECT_EQ(root->find("negative")->integer, -5);
  EXPECT_EQ(root->find("address")->integer, 0x7f0000001000);
  EXPECT_EQ(root->find("text")->text, "a\"b\xc3\xa9");
  EXPECT_TRUE(root->find("yes")->boolean);
  EXPECT_TRUE(root->find("empty")->items.empty());
  ASSERT_EQ(root->find("list")->items.size(), 2u);
  EXPECT_EQ(root->find("list")->items[1]->kind, PickleValue::Kind::kNone);
}

TEST(PickleWriter, BatchesLongContainersLikePython) {
  PickleWriter out;
  out.begin_dict();
  out.key("list");
  out.begin_list();
  for (std::int64_t i = 0; i < 2500; ++i) out.value(i);
  out.end_list();
  for (int i = 0; i < 1500; ++i) {
    std::string key = "k";  // (not "k" + ...: GCC 12 warns falsely on that, -Wrestrict)
    key += std::to_string(i);
    out.field(key, std::int64_t{i});
  }
  out.end_dict();
  const std::string& bytes = out.finish();
  const PickleRef root = parse_pickle(bytes, "batched.pickle");
  ASSERT_EQ(root->find("list")->items.size(), 2500u);
  EXPECT_EQ(root->find("list")->items[2499]->integer, 2499);
  EXPECT_EQ(root->entries.size(), 1501u);
  EXPECT_EQ(root->find("k1499")->integer, 1499);
}

TEST(PickleWriter, RefusesToFinishWithAnOpenContainer) {
  PickleWriter out;
  out.begin_list();
  EXPECT_THROW(out.finish(), std::logic_error);
  EXPECT_THROW(out.end_dict(), std::logic_error);
}

TEST(Timeline, KeepsTheExactPeakOfEveryBucket) {
  TimelineRecorder recorder(10, 3);  // buckets of 4 events: 0-3, 4-7, 8-9
  const std::uint64_t requested[] = {1, 9, 2, 3, 4, 4, 1, 4, 0, 2};
  DeviceCalls calls;
  for (std::size_t i = 0; i < 10; ++i) {
    if (i == 1 || i == 9) ++calls[DeviceCallKind::kMalloc];
    recorder.record(i, requested[i], {requested[i] * 2, std::nullopt}, calls);
  }
  const Timeline timeline = recorder.finish();
  EXPECT_EQ(timeline.events, 10u);
  EXPECT_EQ(timeline.bucket_events, 4u);
  EXPECT_EQ(timeline.first_event, (std::vector<std::size_t>{0, 4, 8}));
  EXPECT_EQ(timeline.requested.max, (std::vector<std::uint64_t>{9, 4, 2}));
  EXPECT_EQ(timeline.requested.min, (std::vector<std::uint64_t>{1, 1, 0}));
  EXPECT_EQ(timeline.allocated.max, (std::vector<std::uint64_t>{18, 8, 4}));
  EXPECT_TRUE(timeline.reserved.max.empty());  // the allocator keeps no such figure
  const auto& mallocs = timeline.calls[static_cast<std::size_t>(DeviceCallKind::kMalloc)];
  ASSERT_EQ(mallocs.size(), 2u);
  EXPECT_EQ(mallocs[0], (std::pair<std::size_t, std::uint64_t>{0, 1}));
  EXPECT_EQ(mallocs[1], (std::pair<std::size_t, std::uint64_t>{2, 1}));
}

TEST(MemoryPage, EscapesEveryNameAndEmbedsTheData) {
  TraceReport report;
  report.name = "</script><script>alert(1)</script>&";
  report.events = 3;
  RunContext context;
  context.version = "0.1.0";
  const std::string json = memory_page_json(context, {report}, {"dir/<b>.csv"});
  const std::string page = render_memory_page(json);
  EXPECT_EQ(page.find("<script>alert"), std::string::npos);
  EXPECT_EQ(page.find("<b>.csv"), std::string::npos);
  EXPECT_NE(page.find("\\u003c/script\\u003e\\u003cscript\\u003ealert(1)"), std::string::npos);
  EXPECT_EQ(page.find("__CUDACACHE_MEMORY_DATA__"), std::string::npos);
  // No external resources: nothing is fetched from anywhere.
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg"));
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find(" src="), std::string::npos);
}

TEST(MemoryVizPath, KeepsFileNamesPlain) {
  EXPECT_EQ(memory_viz_path("out", "bert", "cudacache:max_split_size_mb:128,x:1"),
            "out/bert.cudacache_max_split_size_mb_128_x_1.pickle");
  EXPECT_EQ(memory_viz_path("out", "../x", "cub"), "out/_.._x.cub.pickle");
  EXPECT_EQ(memory_viz_path("out", "synthetic: training (2 steps)", "cub"),
            "out/synthetic_training_2_steps.cub.pickle");
}

const char* const kTwoStreams =
    "op,id,size,stream\n"
    "alloc,0,1000,0\n"
    "alloc,1,3000,1\n"
    "free,0,1000,0\n"
    "alloc,2,3145728,1\n"
    "empty_cache,,,\n"
    "free,1,3000,1\n"
    "alloc,3,5000000,0\n"
    "free,2,3145728,1\n";

class Recording : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { CUDACACHE_REQUIRE_CUDASIM(); }
};

// The alloc and free rows of a trace, ids renumbered in order of first appearance.
std::vector<std::string> rows_without_empty_cache(const Trace& trace) {
  std::vector<std::string> rows;
  std::vector<std::uint64_t> ids;
  for (const TraceEvent& event : trace.events) {
    if (event.op == TraceOp::kEmptyCache) continue;
    auto at = std::find(ids.begin(), ids.end(), event.id);
    if (at == ids.end()) at = ids.insert(ids.end(), event.id);
    rows.push_back((event.op == TraceOp::kAlloc ? "alloc," : "free,") +
                   std::to_string(at - ids.begin()) + "," + std::to_string(event.size) + "," +
                   std::to_string(event.stream));
  }
  return rows;
}

TEST_P(Recording, TheSnapshotConvertsBackToTheSameTrace) {
  const Trace trace = parse_trace_csv(kTwoStreams, "two.csv");
  const ReplayResult result =
      replay_trace(trace, GetParam(), std::nullopt, {}, ReplayRecording{true, 4, true});
  ASSERT_TRUE(result.snapshot.has_value());
  ASSERT_TRUE(result.timeline.has_value());
  EXPECT_EQ(result.timeline->events, trace.events.size());
  EXPECT_EQ(result.timeline->requested.max.size(), 4u);
  EXPECT_EQ(*std::max_element(result.timeline->requested.max.begin(),
                              result.timeline->requested.max.end()),
            trace.peak_requested_bytes);
  ASSERT_FALSE(result.timeline->reserved.max.empty());
  EXPECT_GE(
      *std::max_element(result.timeline->reserved.max.begin(), result.timeline->reserved.max.end()),
      trace.peak_requested_bytes);

  const std::string bytes = snapshot_pickle(*result.snapshot);
  const SnapshotConversion back =
      convert_snapshot(*parse_pickle(bytes, "replay.pickle"), 0, "replay.pickle");
  EXPECT_EQ(back.prelude_rows, 0u);
  EXPECT_EQ(rows_without_empty_cache(back.trace), rows_without_empty_cache(trace));

  // Segment entries balance: what is mapped at the end is what the segments hold.
  std::int64_t reserved = 0;
  for (const SnapshotEntry& entry : result.snapshot->trace) {
    if (entry.action == "segment_alloc" || entry.action == "segment_map") reserved += entry.size;
    if (entry.action == "segment_free" || entry.action == "segment_unmap") reserved -= entry.size;
  }
  std::int64_t held = 0;
  for (const SnapshotSegment& segment : result.snapshot->segments) held += segment.total_size;
  EXPECT_EQ(reserved, held);
  EXPECT_GT(held, 0);  // the last allocation is still live when the snapshot is taken
}

INSTANTIATE_TEST_SUITE_P(EveryAdapter, Recording,
                         ::testing::Values("nocache", "cub", "cudacache", "pytorch",
                                           "pytorch-expandable"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(RecordingOff, APlainReplayRecordsNothing) {
  CUDACACHE_REQUIRE_CUDASIM();
  const Trace trace = parse_trace_csv(kTwoStreams, "two.csv");
  const ReplayResult result = replay_trace(trace, "cudacache", std::nullopt);
  EXPECT_FALSE(result.timeline.has_value());
  EXPECT_FALSE(result.snapshot.has_value());
}

}  // namespace
}  // namespace cudacache::replay
