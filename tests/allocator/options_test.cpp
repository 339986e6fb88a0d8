#include "options.h"
#include "size_policy.h"

#include <cudacache/cudacache.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace cudacache {
namespace {

std::string config_error(const std::string& config) {
  try {
    Options options(config);
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), CUDACACHE_CONFIG);
    return error.what();
  }
  ADD_FAILURE() << "no error for \"" << config << "\"";
  return {};
}

void expect_lists_keys(const std::string& message) {
  for (const char* key :
       {"max_split_size_mb", "roundup_power2_divisions", "garbage_collection_threshold",
        "per_process_memory_fraction", "expandable_segments", "record_history"}) {
    EXPECT_NE(message.find(key), std::string::npos) << message;
  }
}

TEST(Options, DefaultsArePyTorchsButThePolicyIsCudacaches) {
  const Options options;
  EXPECT_TRUE(options.policy.is_cudacache());
  EXPECT_TRUE(options.wants_pages());
  EXPECT_EQ(options.max_split_size(), SIZE_MAX);
  EXPECT_EQ(options.roundup_power2_divisions.for_size(5 << 20), 0u);
  EXPECT_FALSE(options.per_process_memory_fraction.is_set());
  EXPECT_EQ(options.garbage_collection_threshold.value, 0.0);
  EXPECT_FALSE(options.expandable_segments.enabled);
  EXPECT_EQ(options.record_history.max_entries, 0u);
  EXPECT_EQ(Options("").max_split_size(), SIZE_MAX);
}

TEST(Options, ParsesEveryKey) {
  const Options options(
      "max_split_size_mb:64, roundup_power2_divisions:4,garbage_collection_threshold:0.6,"
      "per_process_memory_fraction:0.5,expandable_segments:False,record_history:1000");
  EXPECT_EQ(options.max_split_size(), std::size_t{64} << 20);
  EXPECT_EQ(options.roundup_power2_divisions.for_size(1), 4u);
  EXPECT_EQ(options.roundup_power2_divisions.for_size(std::size_t{1} << 40), 4u);
  EXPECT_DOUBLE_EQ(options.garbage_collection_threshold.value, 0.6);
  EXPECT_DOUBLE_EQ(options.per_process_memory_fraction.value, 0.5);
  EXPECT_EQ(options.record_history.max_entries, 1000u);
}

TEST(Options, RoundupTableFollowsPyTorch) {
  const Options options("roundup_power2_divisions:[256:1,512:2,>:8]");
  const RoundupDivisions& table = options.roundup_power2_divisions;
  EXPECT_EQ(table.for_size(1 << 20), 1u);                 // below the first boundary
  EXPECT_EQ(table.for_size(std::size_t{300} << 20), 1u);  // [256 MiB, 512 MiB)
  EXPECT_EQ(table.for_size(std::size_t{600} << 20), 2u);  // [512 MiB, 1 GiB)
  EXPECT_EQ(table.for_size(std::size_t{2} << 30), 8u);    // above: ">"
  EXPECT_EQ(table.for_size(std::size_t{100} << 30), 8u);
}

TEST(Options, LaterKeysOverrideEarlierOnes) {
  Options options("max_split_size_mb:100");
  options.apply("max_split_size_mb:200");
  EXPECT_EQ(options.max_split_size(), std::size_t{200} << 20);
}

TEST(Options, AKeyGivenTwiceWithDifferentValuesIsRefusedNamingBoth) {
  const std::string message =
      config_error("max_split_size_mb:128,garbage_collection_threshold:0.5,max_split_size_mb:256");
  EXPECT_NE(message.find("key 'max_split_size_mb' is given twice with different values ('128' "
                         "and '256')"),
            std::string::npos)
      << message;
  const std::string flag = config_error("expandable_segments:True,expandable_segments:False");
  EXPECT_NE(flag.find("'True' and 'False'"), std::string::npos) << flag;
  EXPECT_NE(config_error("roundup_power2_divisions:[256:1,>:8],roundup_power2_divisions:4")
                .find("roundup_power2_divisions' is given twice"),
            std::string::npos);
}

TEST(Options, AKeyGivenTwiceWithTheSameValueIsAccepted) {
  // The same value as its option prints it: 064 is 64, true is True.
  const Options options(
      "max_split_size_mb:64,max_split_size_mb:064,expandable_segments:true,"
      "expandable_segments:True,roundup_power2_divisions:[256:1,>:8],"
      "roundup_power2_divisions:[256:1,>:8]");
  EXPECT_EQ(options.max_split_size(), std::size_t{64} << 20);
  EXPECT_TRUE(options.expandable_segments.enabled);
  EXPECT_EQ(options.roundup_power2_divisions.for_size(std::size_t{2} << 30), 8u);
}

TEST(Options, ConfigStringRoundTrips) {
  const Options options(
      "max_split_size_mb:64,roundup_power2_divisions:[256:1,512:2,>:8],"
      "per_process_memory_fraction:0.25,record_history:7");
  const Options again(options.to_config_string());
  EXPECT_EQ(again.to_config_string(), options.to_config_string());
  EXPECT_EQ(again.max_split_size(), options.max_split_size());
  EXPECT_EQ(again.roundup_power2_divisions.divisions, options.roundup_power2_divisions.divisions);
}

// Found by fuzz_options: the defaults printed roundup_power2_divisions:0, which the parser
// refuses (as PyTorch does), so the configuration string the allocator logs and
// --print-config shows could not be given back to it. 0 and 1 mean the same rounding.
TEST(Options, TheDefaultsPrintAStringThatParses) {
  const Options defaults;
  const std::string printed = defaults.to_config_string();
  EXPECT_NE(printed.find("roundup_power2_divisions:1,"), std::string::npos) << printed;
  const Options again(printed);
  EXPECT_EQ(again.to_config_string(), printed);
  for (const std::size_t size : {std::size_t{1000}, std::size_t{5} << 20, std::size_t{1} << 33}) {
    EXPECT_EQ(round_size(size, again.roundup_power2_divisions),
              round_size(size, defaults.roundup_power2_divisions));
  }
}

// Found by fuzz_options: numbers were printed with a stream's six digits, so
// garbage_collection_threshold:0.99999999999996 printed as 1, which the parser refuses, and
// fractions lost their last digits. They now print as the shortest text that reads back the same.
// A fraction of -0 is 0, and prints as 0 (it printed back as "-0").
TEST(Options, AFractionOfMinusZeroIsZero) {
  const Options options("per_process_memory_fraction:-0");
  EXPECT_FALSE(std::signbit(options.per_process_memory_fraction.value));
  EXPECT_NE(options.to_config_string().find("per_process_memory_fraction:0,"), std::string::npos)
      << options.to_config_string();
}

TEST(Options, FractionsPrintInFullAndParseBackToTheSameValue) {
  const Options options(
      "garbage_collection_threshold:0.99999999999996,per_process_memory_fraction:0.123456789012");
  const std::string printed = options.to_config_string();
  EXPECT_NE(printed.find("garbage_collection_threshold:0.99999999999996,"), std::string::npos)
      << printed;
  EXPECT_NE(printed.find("per_process_memory_fraction:0.123456789012,"), std::string::npos)
      << printed;
  const Options again(printed);
  EXPECT_EQ(again.garbage_collection_threshold.value, options.garbage_collection_threshold.value);
  EXPECT_EQ(again.per_process_memory_fraction.value, options.per_process_memory_fraction.value);
  EXPECT_NE(Options("garbage_collection_threshold:0.8")
                .to_config_string()
                .find("garbage_collection_threshold:0.8,"),
            std::string::npos);
}

TEST(Options, DescribeDocumentsEveryOption) {
  const std::string text = Options("max_split_size_mb:64").describe();
  expect_lists_keys(text);
  EXPECT_NE(text.find("max_split_size_mb = 64 (default unlimited)"), std::string::npos) << text;
  EXPECT_NE(text.find("driver-VMM pages"), std::string::npos);
  EXPECT_NE(text.find("_record_memory_history(max_entries=N)"), std::string::npos);
}

TEST(Options, UnknownKeyIsNamedWithValidKeys) {
  const std::string message = config_error("max_split_size_mb:64,garbage_colection:0.5");
  EXPECT_NE(message.find("unknown key 'garbage_colection'"), std::string::npos) << message;
  expect_lists_keys(message);
}

// max_page_size_mb (Note [Why pages are created]): whole 2 MiB granules or 'unlimited', for
// cudacache's policy only; it prints back as it was given.
TEST(Options, MaxPageSizeIsWholeGranulesForCudacachesPolicyOnly) {
  EXPECT_FALSE(Options().max_page_size_mb.is_set());
  EXPECT_EQ(Options("max_page_size_mb:2").max_page_size_mb.bytes, std::size_t{2} << 20);
  EXPECT_EQ(Options("max_page_size_mb:1048576").max_page_size_mb.bytes, std::size_t{1} << 40);
  EXPECT_FALSE(Options("max_page_size_mb:unlimited").max_page_size_mb.is_set());
  const std::string printed = Options("max_page_size_mb:6").to_config_string();
  EXPECT_NE(printed.find("max_page_size_mb:6"), std::string::npos) << printed;
  EXPECT_EQ(Options(printed).max_page_size_mb.bytes, std::size_t{6} << 20);
  EXPECT_NE(Options().to_config_string().find("max_page_size_mb:unlimited"), std::string::npos);
  for (const char* config :
       {"max_page_size_mb:0", "max_page_size_mb:1", "max_page_size_mb:3", "max_page_size_mb:-2",
        "max_page_size_mb:2.0", "max_page_size_mb:1048578",
        "max_page_size_mb:", "max_page_size_mb:4MiB"}) {
    const std::string message = config_error(config);
    EXPECT_NE(message.find("for max_page_size_mb: expected an even integer number of MiB"),
              std::string::npos)
        << config << ": " << message;
  }
  // PyTorch's policies keep their pages: the option is refused there, however it is combined.
  for (const char* config :
       {"policy:pytorch,max_page_size_mb:4", "expandable_segments:True,max_page_size_mb:4"}) {
    const std::string message = config_error(config);
    EXPECT_NE(message.find("max_page_size_mb applies to cudacache's policy only"),
              std::string::npos)
        << config << ": " << message;
  }
  Options pytorch("policy:pytorch");
  EXPECT_THROW(pytorch.apply("max_page_size_mb:4"), Error);
  EXPECT_FALSE(pytorch.max_page_size_mb.is_set());  // unchanged by the refused string
  EXPECT_NO_THROW(Options("policy:pytorch,max_page_size_mb:unlimited"));
}

// cut_pages (Note [Cut pages]): True or False, for cudacache's policy only.
TEST(Options, CutPagesIsAFlagForCudacachesPolicyOnly) {
  EXPECT_FALSE(Options().cut_pages.enabled);
  EXPECT_TRUE(Options("cut_pages:True").cut_pages.enabled);
  EXPECT_TRUE(Options("cut_pages:true").cut_pages.enabled);
  EXPECT_FALSE(Options("cut_pages:False").cut_pages.enabled);
  EXPECT_TRUE(Options(Options("cut_pages:True").to_config_string()).cut_pages.enabled);
  for (const char* config : {"cut_pages:1", "cut_pages:", "cut_pages:yes", "cut_pages:TRUE"}) {
    const std::string message = config_error(config);
    EXPECT_NE(message.find("for cut_pages: expected True or False"), std::string::npos)
        << config << ": " << message;
  }
  for (const char* config :
       {"policy:pytorch,cut_pages:True", "expandable_segments:True,cut_pages:True"}) {
    const std::string message = config_error(config);
    EXPECT_NE(message.find("cut_pages applies to cudacache's policy only"), std::string::npos)
        << config << ": " << message;
  }
  Options pytorch("policy:pytorch");
  EXPECT_THROW(pytorch.apply("cut_pages:True"), Error);
  EXPECT_FALSE(pytorch.cut_pages.enabled);  // unchanged by the refused string
  EXPECT_NO_THROW(Options("policy:pytorch,cut_pages:False"));
}

TEST(Options, TheLargestSplitSizeIsAPositiveStat) {
  const Options options("max_split_size_mb:8796093022207");
  EXPECT_EQ(options.max_split_size(), std::size_t{8796093022207} << 20);
  EXPECT_GT(static_cast<std::int64_t>(options.max_split_size()), 0);
}

TEST(Options, MalformedValuesNameKeyAndValue) {
  struct Case {
    const char* config;
    const char* expected;
  };
  const Case cases[] = {
      {"max_split_size_mb:19", "'19' for max_split_size_mb"},
      {"max_split_size_mb:abc", "'abc' for max_split_size_mb"},
      {"max_split_size_mb:-5", "'-5' for max_split_size_mb"},
      {"max_split_size_mb:64MB", "'64MB' for max_split_size_mb"},
      {"max_split_size_mb:", "'' for max_split_size_mb"},
      // Issue 12, defect 6: accepted before, then shown negative in memory_stats().
      {"max_split_size_mb:17592186044415", "from 20 to 8796093022207"},
      {"roundup_power2_divisions:3", "'3' for roundup_power2_divisions"},
      {"roundup_power2_divisions:0", "'0' for roundup_power2_divisions"},
      {"roundup_power2_divisions:[256:3]", "for roundup_power2_divisions"},
      {"roundup_power2_divisions:[300:2]", "for roundup_power2_divisions"},
      {"roundup_power2_divisions:[256:2", "unbalanced '['"},
      {"roundup_power2_divisions:[256]", "for roundup_power2_divisions"},
      {"roundup_power2_divisions:[256:2,]", "for roundup_power2_divisions"},
      {"roundup_power2_divisions:[,256:2]", "for roundup_power2_divisions"},
      {"garbage_collection_threshold:0", "'0' for garbage_collection_threshold"},
      {"garbage_collection_threshold:1", "'1' for garbage_collection_threshold"},
      {"garbage_collection_threshold:1.5", "'1.5' for garbage_collection_threshold"},
      {"per_process_memory_fraction:1.01", "'1.01' for per_process_memory_fraction"},
      {"per_process_memory_fraction:-0.1", "'-0.1' for per_process_memory_fraction"},
      {"expandable_segments:yes", "'yes' for expandable_segments"},
      {"record_history:-1", "'-1' for record_history"},
      {"record_history:100000001", "'100000001' for record_history"},
      {"max_split_size_mb", "has no ':value'"},
      {"max_split_size_mb:64,,record_history:1", "empty entry"},
      {"]", "unbalanced ']'"},
  };
  for (const Case& c : cases) {
    const std::string message = config_error(c.config);
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.config << " -> " << message;
    expect_lists_keys(message);
  }
}

TEST(Options, ExpandableSegmentsAcceptsPyTorchSpellings) {
  EXPECT_TRUE(Options("expandable_segments:True").expandable_segments.enabled);
  EXPECT_TRUE(Options("expandable_segments:true").expandable_segments.enabled);
  Options options("expandable_segments:True");
  options.apply("expandable_segments:False");  // a later string overrides
  EXPECT_FALSE(options.expandable_segments.enabled);
  EXPECT_NE(config_error("expandable_segments:1").find("True or False"), std::string::npos);
}

// expandable_segments:True is PyTorch's option: alone it selects PyTorch's policy (a
// PYTORCH_CUDA_ALLOC_CONF string means what it means in PyTorch); beside policy:cudacache,
// in one string or across configurations, it is an error naming both.
TEST(Options, ExpandableSegmentsSelectsPyTorchsPolicy) {
  EXPECT_FALSE(Options("expandable_segments:True").policy.is_cudacache());
  EXPECT_FALSE(Options("policy:pytorch,expandable_segments:True").policy.is_cudacache());
  EXPECT_TRUE(Options("expandable_segments:False").policy.is_cudacache());
  for (const char* config :
       {"policy:cudacache,expandable_segments:True", "expandable_segments:True,policy:cudacache"}) {
    const std::string message = config_error(config);
    EXPECT_NE(message.find("policy:cudacache"), std::string::npos) << message;
    EXPECT_NE(message.find("policy:pytorch,expandable_segments:True"), std::string::npos)
        << message;
  }
  Options options("expandable_segments:True");
  EXPECT_THROW(options.apply("policy:cudacache"), Error);
  EXPECT_FALSE(options.policy.is_cudacache());
  EXPECT_TRUE(options.expandable_segments.enabled);
  options.apply("policy:cudacache,expandable_segments:False");
  EXPECT_TRUE(options.policy.is_cudacache());
}

TEST(Options, FailedApplyLeavesOptionsUnchanged) {
  Options options("max_split_size_mb:64");
  EXPECT_THROW(options.apply("max_split_size_mb:128,bogus:1"), Error);
  EXPECT_EQ(options.max_split_size(), std::size_t{64} << 20);
}

}  // namespace
}  // namespace cudacache
