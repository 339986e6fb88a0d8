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

// Found in review: a device of 2^64 - 1 bytes was taken; cudasim cannot reserve address space
// for more than the host has, and every allocator with expandable segments then reported its
// first request as out of memory.
TEST(CommandLine, CapacityIsAtMostTheLargestSimulatedDevice) {
  EXPECT_EQ(*parse({"--capacity", "16TiB"}).capacity_bytes, kLargestSimulatedDevice);
  try {
    parse({"--capacity", "18446744073709551615"});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& error) {
    EXPECT_NE(std::string(error.what()).find("is above 16 TiB"), std::string::npos) << error.what();
  }
  EXPECT_THROW(parse({"--capacity", "17TiB"}), UsageError);
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

std::string usage_error(std::vector<const char*> args);

TEST(CommandLine, ConvertNeedsAnOutputAndNothingElse) {
  const CommandLine line = parse({"--convert", "s.pickle", "-o", "s.csv", "--device", "2"});
  EXPECT_EQ(line.convert_path, "s.pickle");
  EXPECT_EQ(line.output_path, "s.csv");
  EXPECT_EQ(line.device, 2);
  EXPECT_THROW(parse({"--convert", "s.pickle"}), UsageError);
  EXPECT_THROW(parse({"--convert", "s.pickle", "-o", "s.csv", "t.csv"}), UsageError);
  EXPECT_THROW(parse({"-o", "s.csv"}), UsageError);
  EXPECT_THROW(parse({"--device", "x"}), UsageError);
  // Replay options mean nothing to a conversion: refused, not ignored.
  for (std::vector<const char*> extra : {std::vector<const char*>{"--synthetic", "steps:1"},
                                         {"--capacity", "1GiB"},
                                         {"--capacity-factor", "1.5"},
                                         {"--allocators", "nocache"},
                                         {"--split-time"},
                                         {"--check-contents"},
                                         {"--real-gpu"}}) {
    std::vector<const char*> args{"--convert", "s.pickle", "-o", "s.csv"};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(usage_error(args), "--convert takes no traces and no replay options") << extra[0];
  }
}

TEST(CommandLine, CheckContentsRefusesPyTorchsOwnAllocators) {
  EXPECT_TRUE(parse({"--check-contents", "--allocators", "nocache,cub"}).check_contents);
  EXPECT_FALSE(parse({}).check_contents);
  EXPECT_EQ(usage_error({"--check-contents", "--allocators", "nocache,torch-native"}),
            "--check-contents checks the in-process allocators; torch-native replays in a "
            "PyTorch process");
}

TEST(CommandLine, EverythingAfterDoubleDashIsATrace) {
  const CommandLine line = parse({"--", "--weird-name.csv"});
  EXPECT_EQ(line.traces, std::vector<std::string>{"--weird-name.csv"});
}

// The message of the UsageError that parsing `args` throws ("" when it throws none).
std::string usage_error(std::vector<const char*> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& error) {
    return error.what();
  }
  return "";
}

// Issue 13: every option that takes a value takes it as --opt=value too, with the same result.
TEST(CommandLine, EqualsFormMeansTheSameAsASeparateValue) {
  const std::vector<std::pair<std::string, std::string>> options{
      {"--allocators", "cub,nocache"},       {"--capacity", "3MiB"}, {"--json", "out.json"},
      {"--synthetic", "layers:2,hidden:64"}, {"--device", "3"},
  };
  std::vector<std::string> separate_args;
  std::vector<std::string> joined_args;
  for (const auto& [option, value] : options) {
    separate_args.insert(separate_args.end(), {option, value});
    joined_args.push_back(option + "=" + value);
  }
  auto parse_strings = [](const std::vector<std::string>& strings) {
    std::vector<const char*> args;
    for (const std::string& text : strings) args.push_back(text.c_str());
    return parse(args);
  };
  const CommandLine separate = parse_strings(separate_args);
  const CommandLine joined = parse_strings(joined_args);
  EXPECT_EQ(joined.allocators, (std::vector<std::string>{"cub", "nocache"}));
  EXPECT_EQ(joined.allocators, separate.allocators);
  EXPECT_EQ(joined.capacity_bytes, std::optional<std::uint64_t>(3u << 20));
  EXPECT_EQ(joined.capacity_bytes, separate.capacity_bytes);
  EXPECT_EQ(joined.json_path, std::optional<std::string>("out.json"));
  EXPECT_EQ(joined.json_path, separate.json_path);
  EXPECT_EQ(joined.synthetic_spec, std::optional<std::string>("layers:2,hidden:64"));
  EXPECT_EQ(joined.synthetic_spec, separate.synthetic_spec);
  EXPECT_EQ(joined.device, 3);
  EXPECT_EQ(joined.device, separate.device);

  EXPECT_DOUBLE_EQ(*parse({"--capacity-factor=1.5"}).capacity_factor, 1.5);
  const CommandLine convert = parse({"--convert=s.pickle", "--output=s.csv"});
  EXPECT_EQ(convert.convert_path, "s.pickle");
  EXPECT_EQ(convert.output_path, "s.csv");
  EXPECT_EQ(parse({"--convert=s.pickle", "-o", "s.csv"}).output_path, "s.csv");
  // A value given twice: the last one counts, as before.
  EXPECT_EQ(parse({"--json", "a.json", "--json=b.json"}).json_path, "b.json");
  // The tool's own checks still apply to the = form.
  EXPECT_NE(usage_error({"--capacity=12XB"}).find("invalid size suffix"), std::string::npos);
  EXPECT_NE(usage_error({"--device=x"}).find("--device needs a device number"), std::string::npos);
}

TEST(CommandLine, MissingValuesAndUnknownOptionsAreNamed) {
  EXPECT_NE(usage_error({"--json"}).find("option --json needs a value"), std::string::npos)
      << usage_error({"--json"});
  EXPECT_NE(usage_error({"--json="}).find("option --json needs a value"), std::string::npos)
      << usage_error({"--json="});
  EXPECT_NE(usage_error({"--capacity"}).find("option --capacity needs a value"), std::string::npos);
  EXPECT_EQ(usage_error({"--bogus"}), "unknown option '--bogus'");
  EXPECT_EQ(usage_error({"--bogus=3", "t.csv"}), "unknown option '--bogus'");
  EXPECT_EQ(usage_error({"-x"}), "unknown option '-x'");
  // After --, an option-like word is a trace, not an unknown option.
  EXPECT_EQ(usage_error({"--", "--bogus"}), "");
}

// An option's value is never the next option nor, for an empty --opt=, the next argument: CLI11
// took the trace after "--json=" as the JSON file, overwrote it and replayed the synthetic
// workload instead, and "--html --min-capacity" wrote the page to a file named --min-capacity.
TEST(CommandLine, AnEmptyValueNeverTakesTheNextArgument) {
  EXPECT_EQ(usage_error({"--json=", "t.csv"}), "option --json needs a value");
  EXPECT_EQ(usage_error({"--allocators=", "t.csv"}), "option --allocators needs a value");
  EXPECT_EQ(usage_error({"--html", "--min-capacity", "t.csv"}),
            "option --html needs a value, not the option '--min-capacity' (a value that starts "
            "with '-' goes as --html=--min-capacity)");
  EXPECT_NE(usage_error({"-o", "--json", "x"}).find("option -o needs a value, not the option"),
            std::string::npos);
  EXPECT_EQ(parse({"--json=-x.json", "t.csv"}).json_path, "-x.json");
  // A negative number is a value, refused by the option's own check with its own words.
  EXPECT_EQ(usage_error({"--device", "-1"}), "--device needs a device number, got '-1'");
  EXPECT_NE(usage_error({"--capacity-factor", "-1.5"}).find("--capacity-factor needs a number"),
            std::string::npos);
  // "-" is still a value (stdout), and after -- anything is a trace.
  EXPECT_EQ(parse({"--json", "-", "t.csv"}).json_path, "-");
  EXPECT_EQ(parse({"--", "--json="}).traces, std::vector<std::string>{"--json="});
}

// An output never overwrites an input: a trace, the snapshot being converted, or the other
// output; --memory-viz refuses names whose pickles would overwrite each other.
TEST(CommandLine, NoOutputOverwritesAnInputOrAnotherOutput) {
  EXPECT_EQ(usage_error({"--json", "t.csv", "t.csv"}),
            "--json t.csv is also a TRACE's input: it would be overwritten");
  EXPECT_EQ(usage_error({"--html", "./t.csv", "t.csv"}),
            "--html ./t.csv is also a TRACE's input: it would be overwritten");
  EXPECT_EQ(usage_error({"--json", "out", "--html", "out", "t.csv"}),
            "--json and --html name the same file, out");
  EXPECT_EQ(usage_error({"--convert", "s.pickle", "-o", "s.pickle"}),
            "-o s.pickle is also --convert's input: it would be overwritten");
  EXPECT_EQ(parse({"--convert", "-", "-o", "-"}).output_path, "-");  // stdin and stdout
  EXPECT_EQ(usage_error({"--memory-viz", "d", "a/x.csv", "b/x.csv"}),
            "--memory-viz: traces a/x.csv and b/x.csv have one file name, and their pickles "
            "would overwrite each other");
  EXPECT_EQ(usage_error({"--memory-viz", "d", "--allocators", "nocache,nocache", "t.csv"}),
            "--memory-viz: allocator 'nocache' is named twice, and its pickles would overwrite "
            "each other");
  EXPECT_EQ(usage_error({"--memory-viz", "d", "a/x.csv", "b/y.csv"}), "");
  // "--json t.csv" with no TRACE took the trace for the output and overwrote it.
  EXPECT_EQ(usage_error({"--json", "t.csv"}),
            "--json t.csv names a trace, and no TRACE is given: the output file comes first "
            "(--json OUT t.csv)");
  EXPECT_NE(usage_error({"--html", "snap.pickle"}).find("names a trace"), std::string::npos);
  EXPECT_EQ(usage_error({"--json", "out.json"}), "");  // the synthetic workload's JSON
  EXPECT_EQ(usage_error({"--json", "out.csv", "--synthetic", "steps:1"}), "");
}

TEST(CommandLine, VersionAndHelpAreFlags) {
  EXPECT_TRUE(parse({"--version"}).version);
  EXPECT_FALSE(parse({}).version);
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_TRUE(parse({"-h"}).help);
  // Asking for the version or help is not spoilt by the rest of the line.
  EXPECT_TRUE(parse({"--version", "--convert", "x.pickle"}).version);
  // ... nor by an option after it that lacks its value (argparse answers such a line too),
  EXPECT_TRUE(parse({"--help", "--json"}).help);
  EXPECT_TRUE(parse({"t.csv", "-h", "--capacity="}).help);
  EXPECT_TRUE(parse({"--version", "--html"}).version);
  // while an option before it still needs its value, and after -- it is a trace.
  EXPECT_NE(usage_error({"--json", "--help"}).find("--json needs a value"), std::string::npos);
  EXPECT_FALSE(parse({"--", "--help"}).help);
  EXPECT_EQ(version_text(), "cudacache-replay " CUDACACHE_PROJECT_VERSION "\n");
  EXPECT_EQ(tool_version(), CUDACACHE_PROJECT_VERSION);
  const std::string usage = usage_text();
  EXPECT_NE(usage.find("--version"), std::string::npos);
  EXPECT_NE(usage.find("--opt=VALUE"), std::string::npos);
}

// "-" is stdin as a TRACE (once: stdin cannot be read twice) and stdout for --json and -o.
TEST(CommandLine, DashIsStdinOrStdout) {
  EXPECT_EQ(parse({"-"}).traces, std::vector<std::string>{"-"});
  EXPECT_EQ(parse({"a.csv", "-", "b.csv"}).traces,
            (std::vector<std::string>{"a.csv", "-", "b.csv"}));
  EXPECT_NE(usage_error({"-", "a.csv", "-"}).find("only once"), std::string::npos);
  const CommandLine json = parse({"--json", "-", "t.csv"});
  EXPECT_EQ(json.json_path, "-");
  EXPECT_EQ(json.traces, std::vector<std::string>{"t.csv"});
  EXPECT_EQ(parse({"--json=-"}).json_path, "-");
  const CommandLine convert = parse({"--convert", "-", "-o", "-"});
  EXPECT_EQ(convert.convert_path, "-");
  EXPECT_EQ(convert.output_path, "-");
  EXPECT_TRUE(convert.traces.empty());
}

}  // namespace
}  // namespace cudacache::replay
