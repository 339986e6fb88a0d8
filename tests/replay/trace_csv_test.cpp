#include "trace_csv.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace cudacache::replay {
namespace {

constexpr const char* kSource = "t.csv";

// Parses `text` expecting a TraceError whose message contains every one of `parts`.
void expect_error(const std::string& text, std::initializer_list<std::string> parts) {
  try {
    parse_trace_csv(text, kSource);
    FAIL() << "no error for:\n" << text;
  } catch (const TraceError& error) {
    const std::string message = error.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

TEST(TraceCsv, ParsesEventsSlotsStreamsAndPeak) {
  const Trace trace = parse_trace_csv(
      "op,id,size,stream\n"
      "alloc,7,100,0\n"
      "alloc,3,50,2\n"
      "free,7,100,0\n"
      "empty_cache,,,\n"
      "alloc,7,30,1\n"
      "free,3,50,2\n",
      kSource);
  ASSERT_EQ(trace.events.size(), 6u);
  EXPECT_EQ(trace.alloc_count, 3u);
  EXPECT_EQ(trace.stream_count, 3u);
  EXPECT_EQ(trace.empty_cache_count, 1u);
  EXPECT_EQ(trace.peak_requested_bytes, 150u);
  EXPECT_EQ(trace.events[0].slot, 0u);
  EXPECT_EQ(trace.events[1].slot, 1u);
  EXPECT_EQ(trace.events[2].slot, 0u);  // frees the first alloc of id 7
  EXPECT_EQ(trace.events[3].op, TraceOp::kEmptyCache);
  EXPECT_EQ(trace.events[4].slot, 2u);  // id 7 again: a new allocation
  EXPECT_EQ(trace.events[5].slot, 1u);
  EXPECT_EQ(trace.events[1].stream, 2u);
}

TEST(TraceCsv, AcceptsCrLfAndAMissingFinalNewline) {
  const Trace trace = parse_trace_csv("op,id,size,stream\r\nalloc,0,8,0\r\nfree,0,8,0", kSource);
  EXPECT_EQ(trace.events.size(), 2u);
  EXPECT_EQ(trace.peak_requested_bytes, 8u);
}

TEST(TraceCsv, WriteThenParseIsTheSameTrace) {
  const std::string text =
      "op,id,size,stream\nalloc,0,1,0\nfree,0,1,0\nalloc,1,18446744073709551615,1\n"
      "empty_cache,,,\n";
  const Trace trace = parse_trace_csv(text, kSource);
  std::ostringstream out;
  write_trace_csv(trace, out);
  EXPECT_EQ(out.str(), text);
}

// Live requested bytes are summed for the trace's peak: a sum past 2^64 is an error, not a
// wrapped peak.
TEST(TraceCsv, LiveBytesBeyond64BitsAreAnError) {
  expect_error("op,id,size,stream\nalloc,0,1,0\nalloc,1,18446744073709551615,0\n",
               {"t.csv:3:", "exceed 2^64"});
}

TEST(TraceCsv, BadHeader) {
  expect_error("op,id,bytes,stream\nalloc,0,1,0\n", {"t.csv:1:", "bad header"});
}

// A file that starts with a UTF-8 byte order mark, as spreadsheets save CSV, reads as without.
TEST(TraceCsv, AByteOrderMarkIsSkipped) {
  const Trace trace =
      parse_trace_csv("\xEF\xBB\xBFop,id,size,stream\nalloc,0,1,0\nfree,0,1,0\n", kSource);
  ASSERT_EQ(trace.events.size(), 2u);
  EXPECT_EQ(trace.peak_requested_bytes, 1u);
}

TEST(TraceCsv, EmptyFile) { expect_error("", {"t.csv:1:", "empty file"}); }

TEST(TraceCsv, UnknownOp) {
  expect_error("op,id,size,stream\nalloc,0,1,0\nmalloc,1,1,0\n",
               {"t.csv:3:", "unknown op 'malloc'"});
}

TEST(TraceCsv, NonNumericSize) {
  expect_error("op,id,size,stream\nalloc,0,12x,0\n", {"t.csv:2:", "non-numeric size '12x'"});
}

// A field is shown escaped and cut short: control bytes in a message would act on the terminal,
// and a malformed line can be of any length.
TEST(TraceCsv, AFieldInAMessageIsEscapedAndCutShort) {
  expect_error("op,id,size,stream\nalloc,0,\x1b]0;x\x07\r5,0\n",
               {"t.csv:2:", "non-numeric size '\\x1b]0;x\\x07\\x0d5'"});
  const std::string long_size(100000, '9');
  try {
    parse_trace_csv("op,id,size,stream\nalloc,0," + long_size + ",0\n", kSource);
    FAIL() << "no error";
  } catch (const TraceError& error) {
    const std::string message = error.what();
    EXPECT_LT(message.size(), 200u) << message;
    EXPECT_NE(message.find("'" + std::string(64, '9') + "' (its first 64 of 100000 bytes)"),
              std::string::npos)
        << message;
  }
  std::string junk = "\x7f" + std::string(5000, 'A');
  try {
    parse_trace_csv(junk, kSource);
    FAIL() << "no error";
  } catch (const TraceError& error) {
    EXPECT_NE(std::string(error.what()).find("bad header '\\x7fAAA"), std::string::npos)
        << error.what();
    EXPECT_LT(std::string(error.what()).size(), 200u);
  }
}

TEST(TraceCsv, NegativeSize) {
  expect_error("op,id,size,stream\nalloc,0,-5,0\n", {"t.csv:2:", "negative size"});
}

TEST(TraceCsv, NonNumericId) {
  expect_error("op,id,size,stream\nalloc,a,5,0\n", {"t.csv:2:", "non-numeric id"});
}

TEST(TraceCsv, SizeOverflow) {
  expect_error("op,id,size,stream\nalloc,0,18446744073709551616,0\n", {"t.csv:2:", "too large"});
}

TEST(TraceCsv, FreeOfUnknownId) {
  expect_error("op,id,size,stream\nalloc,0,5,0\nfree,1,5,0\n",
               {"t.csv:3:", "free of id 1", "not live"});
}

TEST(TraceCsv, DoubleFree) {
  expect_error("op,id,size,stream\nalloc,0,5,0\nfree,0,5,0\nfree,0,5,0\n",
               {"t.csv:4:", "not live"});
}

TEST(TraceCsv, AllocOfLiveId) {
  expect_error("op,id,size,stream\nalloc,4,5,0\nalloc,4,6,0\n",
               {"t.csv:3:", "alloc of id 4", "already live"});
}

TEST(TraceCsv, FreeSizeDiffersFromAlloc) {
  expect_error("op,id,size,stream\nalloc,0,5,0\nfree,0,6,0\n",
               {"t.csv:3:", "size 6", "allocated with size 5"});
}

// Found in review: a free on another stream than its alloc's was taken, and its stream
// counted (free,1,512,1023 made a replay create 1,024 streams).
TEST(TraceCsv, FreeStreamDiffersFromAlloc) {
  expect_error("op,id,size,stream\nalloc,0,5,1\nfree,0,5,1023\n",
               {"t.csv:3:", "on stream 1023", "allocated on stream 1"});
}

TEST(TraceCsv, TruncatedLine) {
  expect_error("op,id,size,stream\nalloc,0,5,0\nalloc,1,5",
               {"t.csv:3:", "truncated line", "3 of 4 fields"});
  expect_error("op,id,size,stream\nalloc,0,5,\n", {"t.csv:2:", "missing stream"});
}

TEST(TraceCsv, TooManyFields) {
  expect_error("op,id,size,stream\nalloc,0,5,0,9\n", {"t.csv:2:", "too many fields"});
}

TEST(TraceCsv, EmptyLineInside) {
  expect_error("op,id,size,stream\n\nalloc,0,5,0\n", {"t.csv:2:", "empty line"});
}

TEST(TraceCsv, EmptyCacheWithFields) {
  expect_error("op,id,size,stream\nempty_cache,1,,\n", {"t.csv:2:", "empty_cache"});
}

TEST(TraceCsv, AbsurdStreamNumber) {
  expect_error("op,id,size,stream\nalloc,0,5,5000\n", {"t.csv:2:", "stream 5000"});
}

TEST(TraceCsv, MissingFileNamesThePath) {
  try {
    read_trace_csv("/nonexistent/dir/trace.csv");
    FAIL();
  } catch (const TraceError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/dir/trace.csv: cannot open"),
              std::string::npos);
  }
}

TEST(TraceCsv, FileIsNamedAfterItsStem) {
  const auto path = std::filesystem::temp_directory_path() / "replay_test_named_trace.csv";
  std::ofstream(path) << "op,id,size,stream\nalloc,0,5,0\n";
  EXPECT_EQ(read_trace_csv(path.string()).name, "replay_test_named_trace");
  std::filesystem::remove(path);
}

// The TraceError message of read_trace_bytes(path) ("" when it throws none).
std::string read_error(const std::string& path) {
  try {
    read_trace_bytes(path);
  } catch (const TraceError& error) {
    return error.what();
  }
  return "";
}

// Issue 13: a directory read as a file used to come back empty ("empty file").
TEST(TraceCsv, DirectoryIsNamedAsOne) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("replay_test_trace_dir_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  EXPECT_EQ(read_error(dir.string()), dir.string() + ": is a directory (expected a file)");
  try {
    read_trace_csv(dir.string());
    ADD_FAILURE() << "no error for a directory";
  } catch (const TraceError& error) {
    EXPECT_NE(std::string(error.what()).find(": is a directory"), std::string::npos)
        << error.what();
  }
  EXPECT_THROW(read_file_bytes(dir.string()), TraceError);
  std::filesystem::remove_all(dir);
}

// Issue 13: a gzipped CSV used to fail as a garbled header.
TEST(TraceCsv, GzipIsRefusedWithHowToDecompress) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("replay_test_gzip_" + std::to_string(::getpid()) + ".csv.gz");
  // A gzip member header (magic 1f 8b, deflate, no flags, Unix) and the start of its data.
  std::ofstream(path, std::ios::binary)
      << std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xcb\x2f\xd0\xc9", 14);
  const std::string message = read_error(path.string());
  EXPECT_NE(message.find(path.string() + ": gzip-compressed"), std::string::npos) << message;
  EXPECT_NE(message.find("gunzip -k " + path.string()), std::string::npos) << message;
  EXPECT_EQ(message.find("bad header"), std::string::npos) << message;
  std::filesystem::remove(path);
  // A file starting with only one of the two magic bytes is not taken for gzip.
  const auto plain = std::filesystem::temp_directory_path() /
                     ("replay_test_not_gzip_" + std::to_string(::getpid()) + ".csv");
  std::ofstream(plain, std::ios::binary) << "\x1f"
                                         << "op,id,size,stream\n";
  EXPECT_EQ(read_error(plain.string()), "");
  std::filesystem::remove(plain);
}

TEST(TraceCsv, DashNamesStdin) {
  EXPECT_EQ(input_display_name("-"), "<stdin>");
  EXPECT_EQ(input_display_name("a/b.csv"), "a/b.csv");
  EXPECT_EQ(trace_name_from_path("-"), "stdin");
}

}  // namespace
}  // namespace cudacache::replay
