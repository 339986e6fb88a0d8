#include "command_line.h"

#include <gtest/gtest.h>

#include "replay_allocator.h"

namespace cudacache::replay {
namespace {

CommandLine parse(std::vector<const char*> args) {
  args.insert(args.begin(), "cudacache-replay");
  return parse_command_line(static_cast<int>(args.size()), args.data());
}

TEST(CommandLine, Defaults) {
  const CommandLine line = parse({});
  EXPECT_TRUE(line.traces.empty());
  EXPECT_EQ(line.allocators, default_allocator_names());
  EXPECT_FALSE(line.capacity_bytes);
  EXPECT_FALSE(line.min_capacity);
}

TEST(CommandLine, CapacityFactorIsAPositiveNumber) {
  EXPECT_DOUBLE_EQ(*parse({"--capacity-factor", "1.02"}).capacity_factor, 1.02);
  EXPECT_FALSE(parse({}).capacity_factor);
  for (const char* bad : {"0", "-1", "abc", "1.5x", "inf", "nan", ""}) {
    EXPECT_THROW(parse({"--capacity-factor", bad}), UsageError) << bad;
  }
  EXPECT_THROW(parse({"--capacity", "1GiB", "--capacity-factor", "2"}), UsageError);
}

TEST(CommandLine, CudacacheConfigsKeepTheirCommas) {
  if (!cudacache_adapter_built()) GTEST_SKIP() << "built without the cudacache adapter";
  const CommandLine line =
      parse({"--allocators",
             "cudacache:max_split_size_mb:128,roundup_power2_divisions:4,cub,nocache", "t.csv"});
  ASSERT_EQ(line.allocators.size(), 3u);
  EXPECT_EQ(line.allocators[0], "cudacache:max_split_size_mb:128,roundup_power2_divisions:4");
  EXPECT_EQ(line.allocators[1], "cub");
  EXPECT_EQ(line.allocators[2], "nocache");
  EXPECT_EQ(line.traces, std::vector<std::string>{"t.csv"});
}

// Every allocator name ends a cudacache config: a comma before one starts the next allocator.
TEST(CommandLine, AllocatorNamesEndACudacacheConfig) {
  if (!cudacache_adapter_built()) GTEST_SKIP() << "built without the cudacache adapter";
  const CommandLine line =
      parse({"--allocators",
             "cudacache:max_split_size_mb:128,pytorch,cudacache:max_split_size_mb:"
             "64,roundup_power2_divisions:2,nocache"});
  EXPECT_EQ(line.allocators,
            (std::vector<std::string>{"cudacache:max_split_size_mb:128", "pytorch",
                                      "cudacache:max_split_size_mb:64,roundup_power2_divisions:2",
                                      "nocache"}));
}

// Needs cudacache's expandable_segments:True (validated when the command line is parsed).
TEST(CommandLine, PytorchExpandableIsAnAllocatorName) {
  if (!cudacache_adapter_built()) GTEST_SKIP() << "built without the cudacache adapter";
  const CommandLine line =
      parse({"--allocators", "cudacache:max_split_size_mb:128,pytorch-expandable,cub"});
  EXPECT_EQ(line.allocators, (std::vector<std::string>{"cudacache:max_split_size_mb:128",
                                                       "pytorch-expandable", "cub"}));
}

TEST(CommandLine, ByteSizes) {
  EXPECT_EQ(parse_byte_size("24GiB"), 24ull << 30);
  EXPECT_EQ(parse_byte_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_byte_size("8GB"), 8000000000ull);
  EXPECT_EQ(parse_byte_size("1234"), 1234u);
  EXPECT_THROW(parse_byte_size("GiB"), UsageError);
  EXPECT_THROW(parse_byte_size("-1GiB"), UsageError);
  EXPECT_THROW(parse_byte_size("99999999999TiB"), UsageError);
}

TEST(CommandLine, ConvertNeedsAnOutputAndNothingElse) {
  const CommandLine line = parse({"--convert", "s.pickle", "-o", "s.csv", "--device", "2"});
  EXPECT_EQ(line.convert_path, "s.pickle");
  EXPECT_EQ(line.output_path, "s.csv");
  EXPECT_EQ(line.device, 2);
  EXPECT_THROW(parse({"--convert", "s.pickle"}), UsageError);
  EXPECT_THROW(parse({"--convert", "s.pickle", "-o", "s.csv", "t.csv"}), UsageError);
  EXPECT_THROW(parse({"-o", "s.csv"}), UsageError);
  EXPECT_THROW(parse({"--device", "x"}), UsageError);
}

TEST(CommandLine, EverythingAfterDoubleDashIsATrace) {
  const CommandLine line = parse({"--", "--weird-name.csv"});
  EXPECT_EQ(line.traces, std::vector<std::string>{"--weird-name.csv"});
}

}  // namespace
}  // namespace cudacache::replay
