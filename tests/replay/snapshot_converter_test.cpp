#include "snapshot_converter.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>

#include "pickle_builder.h"
#include "pickle_reader.h"
#include "trace_csv.h"

namespace cudacache::replay {
namespace {

using testing::make_snapshot_pickle;
using testing::SnapshotEvent;
using testing::SnapshotSegment;

SnapshotConversion convert_bytes(const std::string& bytes, int device = 0) {
  return convert_snapshot(*parse_pickle(bytes, "s.pickle"), device, "s.pickle");
}

std::string csv_of(const Trace& trace) {
  std::ostringstream out;
  write_trace_csv(trace, out);
  return out.str();
}

TEST(SnapshotConverter, AppliesEveryRule) {
  const std::vector<SnapshotEvent> events{
      {"alloc", 0x1000, 100},
      {"free_requested", 0x1000, 100},  // ignored: the trace has free_completed events
      {"free_completed", 0x1000, 100},
      {"free_completed", 0x9000, 64},  // allocated before recording: prelude row
      {"alloc", 0x2000, 300, 0xabc},
      {"segment_alloc", 0x20000, 2 << 20},
      {"segment_free", 0x20000, 2 << 20},
      {"oom", 0, 1 << 30},
      {"alloc", 0x3000, 50, 0xdef},
      {"alloc", 0x3000, 60, 0xdef},  // no free in between: the newest is closed next
      {"free_completed", 0x3000, 60, 0xdef},
  };
  const std::vector<SnapshotSegment> segments{
      {0x2000,
       0,
       {{0x2000, 300},
        {0x5000, 1000},
        {0x6000, 5, "inactive"},
        {0x7000, 7, "active_pending_free"}}},
      {0x8000, 0x777, {{0x8000, 8}}},
  };
  const SnapshotConversion conversion = convert_bytes(make_snapshot_pickle(events, segments));
  EXPECT_EQ(csv_of(conversion.trace),
            "op,id,size,stream\n"
            "alloc,0,64,0\n"    // freed in the trace, in order of those frees
            "alloc,1,1000,0\n"  // live at the dump, in segment order; 0x2000 is open in the trace
            "alloc,2,7,0\n"     // active_pending_free is still live; inactive is not
            "alloc,3,8,1\n"     // stream 0x777 is used first, by a prelude row
            "alloc,4,100,0\n"
            "free,4,100,0\n"
            "free,0,64,0\n"
            "alloc,5,300,2\n"
            "alloc,6,50,3\n"
            "alloc,7,60,3\n"
            "free,7,60,3\n");
  EXPECT_EQ(conversion.free_action, "free_completed");
  EXPECT_EQ(conversion.prelude_rows, 4u);
  EXPECT_EQ(conversion.prelude_freed_in_trace, 1u);
  EXPECT_EQ(conversion.prelude_live_at_dump, 3u);
  EXPECT_EQ(conversion.segment_release_events, 1u);
  EXPECT_EQ(conversion.oom_events, 1u);
  EXPECT_EQ(conversion.realloc_without_free, 1u);
  EXPECT_EQ(conversion.open_at_end_not_in_segments, 1u);  // the 50 bytes at 0x3000
  // The 64-byte prelude block is freed before the 300, 50 and 60 byte allocations.
  EXPECT_EQ(conversion.trace.peak_requested_bytes, 1000u + 7 + 8 + 300 + 50 + 60);
}

TEST(SnapshotConverter, FallsBackToFreeRequested) {
  const SnapshotConversion conversion = convert_bytes(
      make_snapshot_pickle({{"alloc", 0x1000, 10}, {"free_requested", 0x1000, 10}}, {}));
  EXPECT_EQ(conversion.free_action, "free_requested");
  EXPECT_EQ(csv_of(conversion.trace), "op,id,size,stream\nalloc,0,10,0\nfree,0,10,0\n");
}

TEST(SnapshotConverter, AFreeRepeatsItsAllocSize) {
  const SnapshotConversion conversion = convert_bytes(
      make_snapshot_pickle({{"alloc", 0x1000, 10}, {"free_completed", 0x1000, 12}}, {}));
  EXPECT_EQ(conversion.alloc_free_size_mismatches, 1u);
  EXPECT_EQ(csv_of(conversion.trace), "op,id,size,stream\nalloc,0,10,0\nfree,0,10,0\n");
}

std::string conversion_error(const std::string& bytes, int device = 0) {
  try {
    convert_bytes(bytes, device);
  } catch (const TraceError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(SnapshotConverter, WrongTopLevelType) {
  testing::PickleBuilder b;
  b.empty_list().stop();
  const std::string message = conversion_error(b.bytes());
  EXPECT_NE(message.find("s.pickle: top level: wrong top-level type"), std::string::npos)
      << message;
  EXPECT_NE(message.find("got list"), std::string::npos) << message;
}

TEST(SnapshotConverter, MissingKeysAndDevices) {
  testing::PickleBuilder b;
  b.empty_dict().stop();
  EXPECT_NE(conversion_error(b.bytes()).find("missing key 'device_traces'"), std::string::npos);
  const std::string snapshot = make_snapshot_pickle({{"alloc", 1, 2}}, {});
  EXPECT_NE(conversion_error(snapshot, 1).find("no trace for device 1 (the snapshot has 1)"),
            std::string::npos);
}

TEST(SnapshotConverter, BadEventFieldNamesTheEvent) {
  testing::PickleBuilder b;
  b.empty_dict()
      .mark()
      .str("segments")
      .empty_list()
      .str("device_traces")
      .empty_list()
      .mark()
      .empty_list()
      .mark();
  b.empty_dict().mark().key_str("action", "alloc").key_str("addr", "oops").set_items();
  b.appends().appends().set_items().stop();
  const std::string message = conversion_error(b.bytes());
  EXPECT_NE(message.find("device_traces[0][0]: 'addr' is a str, expected an int"),
            std::string::npos)
      << message;
}

// A snapshot of a public repository held a frame's line as 2^64 - 1 (a 9-byte LONG1), and its
// conversion stopped there. Such an int converts where nothing reads it, and names its key
// where the converter needs the number.
TEST(SnapshotConverter, IntsOfMoreThan64BitsConvertUnlessNeeded) {
  // LONG1's operand: 9 bytes, 2^64 - 1.
  std::string max_u64(1, '\x09');
  max_u64.append(8, '\xff');
  max_u64.push_back('\0');
  const auto snapshot = [&](bool big_address) {
    testing::PickleBuilder b;
    b.empty_dict().mark().str("segments").empty_list();
    b.str("device_traces").empty_list().mark().empty_list().mark();
    b.empty_dict().mark().key_str("action", "alloc");
    b.str("addr");
    if (big_address) {
      b.op('\x8a').raw(max_u64);
    } else {
      b.integer(4096);
    }
    b.key_int("size", 1024).key_int("stream", 0);
    // frames: [{"filename": "fake_tensor.py", "line": 2^64 - 1, "name": "f"}]
    b.str("frames").empty_list().mark().empty_dict().mark().key_str("filename", "fake_tensor.py");
    b.str("line").op('\x8a').raw(max_u64);
    b.key_str("name", "f").set_items().appends();
    b.set_items();
    b.appends().appends().set_items().stop();
    return b.bytes();
  };
  const SnapshotConversion conversion = convert_bytes(snapshot(false));
  EXPECT_EQ(csv_of(conversion.trace), "op,id,size,stream\nalloc,0,1024,0\n");
  const std::string message = conversion_error(snapshot(true));
  EXPECT_NE(message.find("device_traces[0][0]: 'addr' is an int of more than 64 bits"),
            std::string::npos)
      << message;
}

// Found in review: the pickle memo lets one object be listed many times, and the converter
// did the work once per listing (one active block in 4,000 segments 4,000 times each: 16 M
// rows from 16 KB). An event, segment or block listed twice is refused, as is a second active
// block at one address.
TEST(SnapshotConverter, ObjectsListedTwiceAreRefused) {
  const auto snapshot_with = [](bool shared_event, bool shared_block) {
    testing::PickleBuilder b;
    b.empty_dict().mark().str("segments").empty_list().mark();
    // One segment whose blocks list one active block dict twice (memo 0), or two distinct ones.
    b.empty_dict().mark().key_int("device", 0).key_int("stream", 0).str("blocks");
    b.empty_list().mark();
    b.empty_dict().memoize().mark().key_str("state", "active_allocated").key_int("address", 4096);
    b.key_int("size", 512).set_items();
    if (shared_block) {
      b.raw(std::string("h\x00", 2));
    } else {
      b.empty_dict().mark().key_str("state", "active_allocated").key_int("address", 8192);
      b.key_int("size", 512).set_items();
    }
    b.appends().set_items().appends();
    b.str("device_traces").empty_list().mark().empty_list().mark();
    b.empty_dict().memoize().mark().key_str("action", "alloc").key_int("addr", 0x10000);
    b.key_int("size", 10).key_int("stream", 0).set_items();
    if (shared_event) {
      b.raw(std::string("h\x01", 2));
    } else {
      b.empty_dict().mark().key_str("action", "alloc").key_int("addr", 0x20000);
      b.key_int("size", 10).key_int("stream", 0).set_items();
    }
    b.appends().appends().set_items().stop();
    return b.bytes();
  };
  EXPECT_EQ(conversion_error(snapshot_with(false, false)), "(no error)");
  const std::string event = conversion_error(snapshot_with(true, false));
  EXPECT_NE(event.find("device_traces[0][1]: the same object as an earlier entry"),
            std::string::npos)
      << event;
  const std::string block = conversion_error(snapshot_with(false, true));
  EXPECT_NE(block.find("segments[0].blocks[1]: the same object as an earlier entry"),
            std::string::npos)
      << block;
}

TEST(SnapshotConverter, ASecondActiveBlockAtOneAddressIsRefused) {
  const std::vector<SnapshotSegment> segments{
      {0x2000, 0, {{0x2000, 300}}},
      {0x2000, 0, {{0x2000, 300}}},
  };
  const std::string message = conversion_error(make_snapshot_pickle({}, segments));
  EXPECT_NE(message.find("segments[1].blocks[0]: a second active block at address 8192"),
            std::string::npos)
      << message;
}

// The converter numbers stream handles in turn; the CSV reader refuses streams above 1023, so
// a snapshot with more made a CSV that could not be read back. Both now refuse it.
TEST(SnapshotConverter, MoreStreamsThanAReplayHoldsAreRefused) {
  std::vector<SnapshotEvent> events;
  for (std::int64_t i = 0; i < 1025; ++i) events.push_back({"alloc", 0x1000 * (i + 1), 8, i + 1});
  const std::string message = conversion_error(make_snapshot_pickle(events, {}));
  EXPECT_NE(message.find("stream 1024 is above the supported maximum 1023"), std::string::npos)
      << message;
}

// The real traces: each raw pickle must convert to its CSV byte for byte.
class RealTraceConversion : public ::testing::TestWithParam<const char*> {};

std::string meta_field(const std::string& meta, const std::string& key) {
  std::smatch match;
  const std::regex pattern("\"" + key + "\": (-?[0-9]+)");
  return std::regex_search(meta, match, pattern) ? match[1].str() : "(absent)";
}

TEST_P(RealTraceConversion, MatchesTheCsvByteForByte) {
  const std::filesystem::path dir = CUDACACHE_TRACES_DIR;
  const std::string name = GetParam();
  if (!std::filesystem::exists(dir / "raw" / (name + ".pickle"))) {
    GTEST_SKIP() << "traces not found in " << dir << " (set CUDACACHE_TRACES_DIR)";
  }
  const std::string meta = read_file_bytes((dir / (name + ".meta.json")).string());
  const int device = std::stoi(meta_field(meta, "device"));
  const SnapshotConversion conversion =
      convert_snapshot_file((dir / "raw" / (name + ".pickle")).string(), device);
  const std::string expected = read_file_bytes((dir / (name + ".csv")).string());
  const std::string actual = csv_of(conversion.trace);
  EXPECT_EQ(actual.size(), expected.size());
  EXPECT_TRUE(actual == expected) << "conversion of " << name << " differs from its CSV";
  EXPECT_EQ(conversion.trace.name, name);
  EXPECT_EQ(std::to_string(conversion.prelude_rows), meta_field(meta, "prelude_rows"));
  EXPECT_EQ(std::to_string(conversion.prelude_freed_in_trace),
            meta_field(meta, "prelude_freed_in_trace"));
  EXPECT_EQ(std::to_string(conversion.prelude_live_at_dump),
            meta_field(meta, "prelude_live_at_dump"));
  EXPECT_EQ(std::to_string(conversion.segment_release_events),
            meta_field(meta, "segment_release_events"));
  EXPECT_EQ(std::to_string(conversion.oom_events), meta_field(meta, "oom_events"));
  EXPECT_EQ(std::to_string(conversion.realloc_without_free),
            meta_field(meta, "realloc_without_free"));
  EXPECT_EQ(std::to_string(conversion.alloc_free_size_mismatches),
            meta_field(meta, "alloc_free_size_mismatches"));
  EXPECT_EQ(std::to_string(conversion.open_at_end_not_in_segments),
            meta_field(meta, "open_at_end_not_in_segments"));
  EXPECT_EQ(std::to_string(conversion.trace.peak_requested_bytes),
            meta_field(meta, "peak_allocated_requested_bytes"));
}

INSTANTIATE_TEST_SUITE_P(
    Traces, RealTraceConversion,
    ::testing::Values("bert_large_inference", "cs336_2.7b_forward", "cs336_lm_nothanmin",
                      "cs336_medium_ctx512_train_step", "cs336_small_ctx128_bs1_train_step",
                      "decomfl_zo_federated_opt_finetune", "dit_text_diffusion_train_oom",
                      "eor_latent_cnn_counterfactuals", "gcn_codegraph_train_gpu0",
                      "nca3d_inference_cholec", "qwen7b_layerwise_sparse_quant_calibration"),
    [](const auto& param_info) {
      std::string name = param_info.param;
      for (char& c : name)
        if (c == '.') c = '_';
      return name;
    });

TEST(RealTraceTruncation, CutSnapshotsFailWithAnOffset) {
  const std::filesystem::path path =
      std::filesystem::path(CUDACACHE_TRACES_DIR) / "raw" / "dit_text_diffusion_train_oom.pickle";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "traces not found in " << CUDACACHE_TRACES_DIR;
  const std::string bytes = read_file_bytes(path.string());
  for (std::size_t length : {std::size_t{1}, std::size_t{11}, bytes.size() / 3, bytes.size() - 1}) {
    try {
      parse_pickle(std::string_view(bytes).substr(0, length), "cut.pickle");
      ADD_FAILURE() << "no error at length " << length;
    } catch (const PickleError& error) {
      EXPECT_NE(std::string(error.what()).find("cut.pickle: byte offset "), std::string::npos)
          << error.what();
      EXPECT_NE(std::string(error.what()).find("truncated"), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace cudacache::replay
