// The C ABI of libcudacache.so, bad input included. Each test runs in its own process
// (gtest_discover_tests, one ctest test per case), so each starts with a fresh process-wide
// allocator and fresh options: run them through ctest, not as one gtest binary.
#include <cudacache/cudacache.h>

#include <cudasim.h>
#include <gtest/gtest.h>

#include "require_cudasim.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

// Tests only, not in the public header (allocator/c_api.cpp).
extern "C" void cudacache_testing_reset(void);

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

class CApi : public ::testing::Test {
 protected:
  // Each case starts from a process where cudacache was never used, as CTest runs it, also
  // when the whole binary runs in one process.
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    unsetenv("CUDACACHE_CONF");
    cudacache_testing_reset();
  }
  void TearDown() override {
    unsetenv("CUDACACHE_CONF");
    cudacache_testing_reset();
  }
  static std::string stats_json() {
    const int needed = cudacache_memory_stats_json(0, nullptr, 0);
    EXPECT_GT(needed, 0);
    std::string text(static_cast<std::size_t>(needed) + 1, '\0');
    EXPECT_EQ(cudacache_memory_stats_json(0, text.data(), text.size()), needed);
    text.resize(static_cast<std::size_t>(needed));
    return text;
  }
  // The allocator state that must not change on bad input.
  static std::string state() {
    const int needed = cudacache_snapshot_json(0, nullptr, 0);
    std::string text(static_cast<std::size_t>(needed) + 1, '\0');
    cudacache_snapshot_json(0, text.data(), text.size());
    return stats_json() + text;
  }
};

TEST_F(CApi, PluggableMallocAndFree) {
  void* p = cudacache_malloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(cudacache_memory_allocated(0), 1024u);
  EXPECT_EQ(cudacache_memory_reserved(0), 2 * kMiB);
  cudacache_free(p, 1000, 0, nullptr);
  EXPECT_EQ(cudacache_memory_allocated(0), 0u);
  EXPECT_EQ(cudacache_max_memory_allocated(0), 1024u);
  EXPECT_EQ(cudacache_max_memory_reserved(0), 2 * kMiB);
  EXPECT_EQ(cudacache_reset_peak_memory_stats(0), CUDACACHE_OK);
  EXPECT_EQ(cudacache_max_memory_allocated(0), 0u);
  cudacache_empty_cache();
  EXPECT_EQ(cudacache_memory_reserved(0), 0u);
  cudasim_counters counters{};
  ASSERT_EQ(cudasim_get_counters(0, &counters), 0);
  EXPECT_EQ(counters.in_use_bytes, 0u);
}

TEST_F(CApi, CurrentDeviceIsMinusOne) {
  void* p = nullptr;
  ASSERT_EQ(cudacache_allocate(&p, 4096, -1, nullptr), CUDACACHE_OK);
  EXPECT_EQ(cudacache_memory_allocated(-1), 4096u);
  EXPECT_EQ(cudacache_deallocate(p), CUDACACHE_OK);
}

TEST_F(CApi, SizeZeroIsNullAndFreeingNullIsANoOp) {
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(cudacache_allocate(&p, 0, 0, nullptr), CUDACACHE_OK);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cudacache_malloc(0, 0, nullptr), nullptr);
  cudacache_free(nullptr, 0, 0, nullptr);
  EXPECT_EQ(cudacache_deallocate(nullptr), CUDACACHE_OK);
  EXPECT_EQ(cudacache_memory_reserved(0), 0u);
}

TEST_F(CApi, BadInputIsRejectedWithoutStateChange) {
  void* live = cudacache_malloc(5000, 0, nullptr);
  ASSERT_NE(live, nullptr);
  const std::string before = state();
  void* out = nullptr;
  int dummy = 0;
  struct Case {
    const char* what;
    cudacache_status expected;
    const char* message;
    std::function<cudacache_status()> call;
  };
  const std::vector<Case> cases = {
      {"SIZE_MAX", CUDACACHE_INVALID_ARGUMENT, "larger than the maximum",
       [&] { return cudacache_allocate(&out, SIZE_MAX, 0, nullptr); }},
      {"overflowing size", CUDACACHE_INVALID_ARGUMENT, "larger than the maximum",
       [&] { return cudacache_allocate(&out, SIZE_MAX - 100, 0, nullptr); }},
      {"NULL out", CUDACACHE_INVALID_ARGUMENT, "out is NULL",
       [&] { return cudacache_allocate(nullptr, 64, 0, nullptr); }},
      {"device 7", CUDACACHE_INVALID_DEVICE, "invalid device ordinal 7",
       [&] { return cudacache_allocate(&out, 64, 7, nullptr); }},
      {"device -2", CUDACACHE_INVALID_DEVICE, "invalid device ordinal -2",
       [&] { return cudacache_allocate(&out, 64, -2, nullptr); }},
      {"unknown pointer", CUDACACHE_UNKNOWN_POINTER, "did not allocate",
       [&] { return cudacache_deallocate(&dummy); }},
      {"interior pointer", CUDACACHE_UNKNOWN_POINTER, "did not allocate",
       [&] { return cudacache_deallocate(static_cast<char*>(live) + 512); }},
      {"record_stream unknown", CUDACACHE_UNKNOWN_POINTER, "record_stream",
       [&] { return cudacache_record_stream(&dummy, nullptr); }},
      {"bogus stream", CUDACACHE_INVALID_ARGUMENT, "not a valid CUDA stream",
       [&] { return cudacache_allocate(&out, 64, 0, reinterpret_cast<cudaStream_t>(&dummy)); }},
      {"unknown hook", CUDACACHE_INVALID_ARGUMENT, "unknown handle",
       [&] { return cudacache_unregister_retry_hook(12345); }},
      {"configure NULL", CUDACACHE_INVALID_ARGUMENT, "config is NULL",
       [&] { return cudacache_configure(nullptr); }},
      {"history device 7", CUDACACHE_INVALID_DEVICE, "invalid device ordinal 7",
       [&] { return cudacache_record_history(7, 10); }},
      {"history device -2", CUDACACHE_INVALID_DEVICE, "invalid device ordinal -2",
       [&] { return cudacache_record_history(-2, 10); }},
      {"history SIZE_MAX entries", CUDACACHE_INVALID_ARGUMENT, "above the maximum 100000000",
       [&] { return cudacache_record_history(0, SIZE_MAX); }},
      {"history stacks 7", CUDACACHE_INVALID_ARGUMENT, "stacks must be",
       [&] { return cudacache_record_history_stacks(0, 10, 7); }},
      {"watch 1 step", CUDACACHE_INVALID_ARGUMENT, "rising_steps must be 0 (stop) or 2 to 1000",
       [&] { return cudacache_watch_growth(0, 1, CUDACACHE_STACKS_CPP, 0); }},
      {"watch 1001 steps", CUDACACHE_INVALID_ARGUMENT, "not 1001",
       [&] { return cudacache_watch_growth(0, 1001, CUDACACHE_STACKS_CPP, 0); }},
      {"watch stacks -1", CUDACACHE_INVALID_ARGUMENT, "stacks must be",
       [&] { return cudacache_watch_growth(0, 3, -1, 0); }},
      {"watch flags", CUDACACHE_INVALID_ARGUMENT, "unknown flags 6",
       [&] { return cudacache_watch_growth(0, 3, CUDACACHE_STACKS_CPP, 6); }},
      {"watch device 7", CUDACACHE_INVALID_DEVICE, "invalid device ordinal 7",
       [&] { return cudacache_watch_growth(7, 3, CUDACACHE_STACKS_CPP, 0); }},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.call(), c.expected) << c.what;
    EXPECT_NE(std::string(cudacache_last_error()).find(c.message), std::string::npos)
        << c.what << ": " << cudacache_last_error();
    EXPECT_EQ(out, nullptr) << c.what;
    EXPECT_EQ(state(), before) << c.what;
  }
  EXPECT_EQ(cudacache_malloc(-1, 0, nullptr), nullptr);
  EXPECT_NE(std::string(cudacache_last_error()).find("negative size"), std::string::npos);
  EXPECT_EQ(state(), before);
  EXPECT_EQ(cudacache_memory_stats_json(9, nullptr, 0), -1);
  EXPECT_NE(std::string(cudacache_last_error()).find("invalid device"), std::string::npos);
  EXPECT_EQ(cudacache_memory_allocated(9), 0u);
  EXPECT_EQ(cudacache_history_csv(9, nullptr, 0), -1);
  EXPECT_NE(std::string(cudacache_last_error()).find("invalid device ordinal 9"),
            std::string::npos);
  EXPECT_EQ(cudacache_snapshot_json(0, nullptr, 64), -1);  // was the length, as if len were 0
  EXPECT_NE(std::string(cudacache_last_error())
                .find("cudacache_snapshot_json: buf is NULL but len is 64"),
            std::string::npos)
      << cudacache_last_error();
  cudacache_free(live, 5000, 0, nullptr);
}

TEST_F(CApi, HistoryIsRecordedOnRequestAndExported) {
  void* before = cudacache_malloc(100, 0, nullptr);  // not recorded: live before the start
  ASSERT_EQ(cudacache_record_history(-1, 1000), CUDACACHE_OK);
  void* p = cudacache_malloc(1000, 0, nullptr);
  cudacache_free(p, 1000, 0, nullptr);
  cudacache_empty_cache();
  const int needed = cudacache_history_csv(0, nullptr, 0);
  ASSERT_GT(needed, 0);
  std::string csv(static_cast<std::size_t>(needed) + 1, '\0');
  EXPECT_EQ(cudacache_history_csv(0, csv.data(), csv.size()), needed);
  csv.resize(static_cast<std::size_t>(needed));
  EXPECT_EQ(csv,
            "op,id,size,stream\n"
            "alloc,0,100,0\n"  // prelude: live, allocated before the recording
            "alloc,1,1000,0\n"
            "free,1,1000,0\n"
            "empty_cache,,,\n");
  char small[8];
  EXPECT_EQ(cudacache_history_csv(0, small, sizeof small), needed);
  EXPECT_EQ(std::string(small), csv.substr(0, sizeof small - 1));
  const std::string snapshot = state();
  EXPECT_NE(snapshot.find("{\"action\":\"alloc\",\"addr\":"), std::string::npos) << snapshot;
  EXPECT_NE(snapshot.find("\"action\":\"empty_cache\""), std::string::npos);
  ASSERT_EQ(cudacache_record_history(0, 0), CUDACACHE_OK);  // stop: entries stay
  cudacache_free(before, 100, 0, nullptr);
  EXPECT_EQ(cudacache_history_csv(0, nullptr, 0),
            needed - static_cast<int>(sizeof "alloc,0,100,0\n") + 1);
}

TEST_F(CApi, HistoryWithStacksCarriesFrames) {
  ASSERT_EQ(cudacache_record_history_stacks(0, 100, CUDACACHE_STACKS_CPP), CUDACACHE_OK);
  void* p = cudacache_malloc(1000, 0, nullptr);
  const std::string snapshot = state();
  // The frames of this test: the library's own frames (the C API, the allocator) left out.
  EXPECT_NE(snapshot.find("\"frames\":[{\"name\":"), std::string::npos) << snapshot;
  EXPECT_EQ(snapshot.find("cudacache_malloc"), std::string::npos) << snapshot;
  cudacache_free(p, 1000, 0, nullptr);
}

TEST_F(CApi, GrowthIsFoundAndReported) {
  ASSERT_EQ(cudacache_watch_growth(0, 2, CUDACACHE_STACKS_CPP, CUDACACHE_GROWTH_QUIET),
            CUDACACHE_OK);
  std::vector<void*> kept;
  std::vector<int> found;
  for (int step = 0; step < 3; ++step) {
    kept.push_back(cudacache_malloc(static_cast<ssize_t>(kMiB), 0, nullptr));
    found.push_back(cudacache_mark_step());
  }
  EXPECT_EQ(found, (std::vector<int>{0, 1, 0}));
  const int needed = cudacache_growth_report_json(0, nullptr, 0);
  ASSERT_GT(needed, 0);
  std::string report(static_cast<std::size_t>(needed) + 1, '\0');
  ASSERT_EQ(cudacache_growth_report_json(0, report.data(), report.size()), needed);
  EXPECT_NE(report.find("\"growing\":true"), std::string::npos) << report;
  EXPECT_NE(report.find("\"bytes\":2097152,\"blocks\":2,\"steps\":2"), std::string::npos) << report;
  EXPECT_EQ(cudacache_growth_report_json(9, nullptr, 0), -1);
  EXPECT_EQ(cudacache_watch_growth(0, 0, CUDACACHE_STACKS_NONE, 0), CUDACACHE_OK);  // stop
  for (void* p : kept) cudacache_free(p, static_cast<ssize_t>(kMiB), 0, nullptr);
  EXPECT_EQ(cudacache_mark_step(), 0);
}

TEST_F(CApi, HistoryFromTheEnvironment) {
  ASSERT_EQ(setenv("CUDACACHE_CONF", "record_history:3", 1), 0);
  void* p = cudacache_malloc(1000, 0, nullptr);
  cudacache_free(p, 1000, 0, nullptr);
  std::string csv(256, '\0');
  const int length = cudacache_history_csv(0, csv.data(), csv.size());
  ASSERT_GT(length, 0);
  csv.resize(static_cast<std::size_t>(length));
  // The newest 3 entries: alloc, free_requested, free_completed (segment_alloc dropped).
  EXPECT_EQ(csv, "op,id,size,stream\nalloc,0,1000,0\nfree,0,1000,0\n");
}

TEST_F(CApi, BadHistoryValueInTheEnvironmentIsAConfigError) {
  ASSERT_EQ(setenv("CUDACACHE_CONF", "record_history:-1", 1), 0);
  EXPECT_EQ(cudacache_record_history(0, 10), CUDACACHE_CONFIG);
  const std::string message = cudacache_last_error();
  EXPECT_NE(message.find("record_history"), std::string::npos) << message;
  EXPECT_NE(message.find("from 0 (off) to 100000000"), std::string::npos) << message;
}

TEST_F(CApi, FreeWithWrongSizeAndDoubleFreeAreErrors) {
  void* p = cudacache_malloc(5000, 0, nullptr);
  ASSERT_NE(p, nullptr);
  const std::string before = state();
  cudacache_free(p, 4999, 0, nullptr);
  EXPECT_NE(std::string(cudacache_last_error()).find("allocated with 5000 bytes"),
            std::string::npos)
      << cudacache_last_error();
  EXPECT_EQ(state(), before);
  cudacache_free(p, -5, 0, nullptr);
  EXPECT_NE(std::string(cudacache_last_error()).find("negative size"), std::string::npos);
  EXPECT_EQ(state(), before);
  cudacache_free(p, 5000, 0, nullptr);
  EXPECT_EQ(cudacache_memory_allocated(0), 0u);
  const std::string after = state();
  cudacache_free(p, 5000, 0, nullptr);  // double free
  EXPECT_NE(std::string(cudacache_last_error()).find("already freed"), std::string::npos)
      << cudacache_last_error();
  EXPECT_EQ(state(), after);
  EXPECT_EQ(cudacache_deallocate(p), CUDACACHE_UNKNOWN_POINTER);
}

TEST_F(CApi, OutOfMemoryReturnsNullWithMessage) {
  EXPECT_EQ(cudacache_malloc(static_cast<ssize_t>(std::size_t{256} << 30), 0, nullptr), nullptr);
  EXPECT_NE(std::string(cudacache_last_error()).find("Tried to allocate 256.00 GiB"),
            std::string::npos);
  void* p = nullptr;
  EXPECT_EQ(cudacache_allocate(&p, std::size_t{256} << 30, 0, nullptr), CUDACACHE_OUT_OF_MEMORY);
  EXPECT_NE(stats_json().find("\"num_ooms\":2"), std::string::npos);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  p = cudacache_malloc(1 << 20, 0, nullptr);
  EXPECT_NE(p, nullptr);
  cudacache_free(p, 1 << 20, 0, nullptr);
}

TEST_F(CApi, JsonIsSnprintfStyle) {
  const std::string full = stats_json();
  char small[16];
  EXPECT_EQ(cudacache_memory_stats_json(0, small, sizeof small), static_cast<int>(full.size()));
  EXPECT_EQ(std::string(small), full.substr(0, sizeof small - 1));
  EXPECT_NE(full.find("\"allocated_bytes.all.current\":0"), std::string::npos);
  const int needed = cudacache_snapshot_json(0, nullptr, 0);
  std::string snapshot(static_cast<std::size_t>(needed) + 1, '\0');
  EXPECT_EQ(cudacache_snapshot_json(0, snapshot.data(), snapshot.size()), needed);
  EXPECT_EQ(snapshot.rfind("{\"segments\":[]", 0), 0u);
}

TEST_F(CApi, ConfigureBeforeFirstUseOnly) {
  EXPECT_EQ(cudacache_configure("max_split_size_mb:5"), CUDACACHE_CONFIG);
  EXPECT_NE(std::string(cudacache_last_error()).find("max_split_size_mb"), std::string::npos);
  EXPECT_EQ(cudacache_configure("max_split_size_mb:64"), CUDACACHE_OK);
  EXPECT_NE(std::string(cudacache_config_help()).find("max_split_size_mb = 64"), std::string::npos);
  void* p = cudacache_malloc(100 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(stats_json().find("\"oversize_allocations.current\":1"), std::string::npos);
  EXPECT_EQ(cudacache_configure("max_split_size_mb:128"), CUDACACHE_CONFIG);
  EXPECT_NE(std::string(cudacache_last_error()).find("before cudacache is first used"),
            std::string::npos)
      << cudacache_last_error();
  cudacache_free(p, 100 << 20, 0, nullptr);
}

// Issue 12, defect 3: recording the free's event on a stream the application had destroyed
// left cudaErrorInvalidResourceHandle for the application's next cudaGetLastError.
TEST_F(CApi, NoRuntimeErrorIsLeftForTheApplication) {
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreate(&side), cudaSuccess);
  void* p = cudacache_malloc(4096, 0, nullptr);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(cudacache_record_stream(p, side), CUDACACHE_OK);
  ASSERT_EQ(cudaStreamDestroy(side), cudaSuccess);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  cudacache_free(p, 4096, 0, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void* q = cudacache_malloc(4096, 0, nullptr);  // the allocator keeps working
  ASSERT_NE(q, nullptr);
  cudacache_free(q, 4096, 0, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// A later cudacache_configure() string overrides an earlier one's keys; only a key given twice
// in one string must say the same both times.
TEST_F(CApi, ALaterConfigureOverridesAnEarlierOnesKeys) {
  EXPECT_EQ(cudacache_configure("max_split_size_mb:64"), CUDACACHE_OK);
  EXPECT_EQ(cudacache_configure("max_split_size_mb:128"), CUDACACHE_OK) << cudacache_last_error();
  EXPECT_EQ(cudacache_configure("max_split_size_mb:32,max_split_size_mb:256"), CUDACACHE_CONFIG);
  EXPECT_NE(std::string(cudacache_last_error()).find("given twice with different values"),
            std::string::npos)
      << cudacache_last_error();
  void* p = cudacache_malloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr) << cudacache_last_error();
  EXPECT_NE(stats_json().find("\"max_split_size\":134217728"), std::string::npos);
  cudacache_free(p, 1000, 0, nullptr);
}

// Issue 12, defect 2: an empty configuration after a valid one used to store "...," and fail
// every later first use with "empty entry".
TEST_F(CApi, EmptyConfigurationChangesNothing) {
  EXPECT_EQ(cudacache_configure("max_split_size_mb:64"), CUDACACHE_OK);
  EXPECT_EQ(cudacache_configure(""), CUDACACHE_OK);
  EXPECT_EQ(cudacache_configure(" \t "), CUDACACHE_OK);
  void* p = cudacache_malloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr) << cudacache_last_error();
  EXPECT_NE(stats_json().find("\"max_split_size\":67108864"), std::string::npos);
  cudacache_free(p, 1000, 0, nullptr);
}

TEST_F(CApi, EnvironmentIsReadAtFirstUseAndConfigureOverridesIt) {
  ASSERT_EQ(setenv("CUDACACHE_CONF", "max_split_size_mb:32,record_history:5", 1), 0);
  EXPECT_EQ(cudacache_configure("max_split_size_mb:64"), CUDACACHE_OK);
  void* p = cudacache_malloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr);
  const std::string json = stats_json();
  EXPECT_NE(json.find("\"max_split_size\":67108864"), std::string::npos) << json;
  const std::string help = cudacache_config_help();
  EXPECT_NE(help.find("record_history = 5"), std::string::npos) << help;
  cudacache_free(p, 1000, 0, nullptr);
}

// Found in review: each string was checked alone, so "policy:cudacache" then
// "expandable_segments:True" (or the environment's expandable segments, then
// "policy:cudacache") both returned OK, and every allocation then failed on the pair.
TEST_F(CApi, ConfigureRefusesAStringThatConflictsWithWhatCameBefore) {
  EXPECT_EQ(cudacache_configure("policy:cudacache"), CUDACACHE_OK);
  EXPECT_EQ(cudacache_configure("expandable_segments:True"), CUDACACHE_CONFIG);
  const std::string message = cudacache_last_error();
  EXPECT_NE(message.find("cudacache_configure(\"expandable_segments:True\") conflicts"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("earlier cudacache_configure strings \"policy:cudacache\""),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("cannot be combined"), std::string::npos) << message;
  void* p = cudacache_malloc(1000, 0, nullptr);  // the refused string was not kept
  ASSERT_NE(p, nullptr) << cudacache_last_error();
  EXPECT_NE(std::string(cudacache_config_help()).find("policy = cudacache"), std::string::npos);
  cudacache_free(p, 1000, 0, nullptr);
}

TEST_F(CApi, ConfigureRefusesAStringThatConflictsWithTheEnvironment) {
  ASSERT_EQ(setenv("CUDACACHE_CONF", "expandable_segments:True", 1), 0);
  EXPECT_EQ(cudacache_configure("policy:cudacache"), CUDACACHE_CONFIG);
  EXPECT_NE(std::string(cudacache_last_error()).find("CUDACACHE_CONF \"expandable_segments:True\""),
            std::string::npos)
      << cudacache_last_error();
  EXPECT_EQ(cudacache_configure("policy:pytorch"), CUDACACHE_OK);  // what the pair means
  void* p = cudacache_malloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr) << cudacache_last_error();
  cudacache_free(p, 1000, 0, nullptr);
}

TEST_F(CApi, BadEnvironmentFailsEveryCallWithTheReason) {
  cudasim_counters before{};
  ASSERT_EQ(cudasim_get_counters(0, &before), 0);
  ASSERT_EQ(setenv("CUDACACHE_CONF", "max_split_size_mb:4", 1), 0);
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(cudacache_allocate(&p, 4096, 0, nullptr), CUDACACHE_CONFIG);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(std::string(cudacache_last_error()).find("'4' for max_split_size_mb"),
            std::string::npos)
      << cudacache_last_error();
  EXPECT_EQ(cudacache_malloc(4096, 0, nullptr), nullptr);
  EXPECT_EQ(cudacache_memory_stats_json(0, nullptr, 0), -1);
  EXPECT_NE(std::string(cudacache_config_help()).find("Valid keys"), std::string::npos);
  cudasim_counters counters{};
  ASSERT_EQ(cudasim_get_counters(0, &counters), 0);
  EXPECT_EQ(counters.mallocs, before.mallocs);  // no device memory was touched
}

bool free_everything(const cudacache_oom_context* context) {
  auto* held = static_cast<std::vector<void*>*>(context->user_data);
  for (void* p : *held) cudacache_deallocate(p);
  held->clear();
  cudacache_empty_cache();
  return true;
}

TEST_F(CApi, RetryHookCanFreeThroughTheApi) {
  ASSERT_EQ(cudasim_set_capacity(0, 64 * kMiB), 0);
  std::vector<void*> held;
  for (int i = 0; i < 3; ++i) held.push_back(cudacache_malloc(16 << 20, 0, nullptr));
  const int handle = cudacache_register_retry_hook(free_everything, &held);
  ASSERT_GT(handle, 0);
  void* big = cudacache_malloc(40 << 20, 0, nullptr);
  EXPECT_NE(big, nullptr) << cudacache_last_error();
  EXPECT_TRUE(held.empty());
  EXPECT_EQ(cudacache_unregister_retry_hook(handle), CUDACACHE_OK);
  EXPECT_EQ(cudacache_register_retry_hook(nullptr, nullptr), -1);
  cudacache_free(big, 40 << 20, 0, nullptr);
}

// The versioned stats struct: a caller built against an older, smaller struct gets its prefix
// filled and nothing past it; bad sizes and NULL are errors that name the problem.
TEST_F(CApi, StatsStructIsVersionedBySize) {
  void* p = cudacache_malloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr);
  cudacache_memory_stats stats;
  std::memset(&stats, 0x5A, sizeof stats);
  stats.size = offsetof(cudacache_memory_stats, segment);  // an "old" struct: allocation only
  ASSERT_EQ(cudacache_get_memory_stats(0, &stats), CUDACACHE_OK) << cudacache_last_error();
  EXPECT_EQ(stats.size, offsetof(cudacache_memory_stats, segment));
  EXPECT_EQ(stats.version, CUDACACHE_MEMORY_STATS_VERSION);
  EXPECT_EQ(stats.allocation[CUDACACHE_ALL_POOLS].current, 1);
  EXPECT_EQ(stats.allocation[CUDACACHE_SMALL_POOL].current, 1);
  EXPECT_EQ(stats.allocation[CUDACACHE_LARGE_POOL].current, 0);
  const auto* past = reinterpret_cast<const unsigned char*>(&stats.segment);
  EXPECT_EQ(past[0], 0x5A) << "written past the caller's size";

  stats.size = sizeof stats;
  ASSERT_EQ(cudacache_get_memory_stats(0, &stats), CUDACACHE_OK);
  EXPECT_EQ(stats.size, sizeof stats);
  EXPECT_EQ(stats.allocated_bytes[CUDACACHE_ALL_POOLS].current, 1024);
  EXPECT_EQ(stats.max_split_size, -1);

  stats.size = 4;
  EXPECT_EQ(cudacache_get_memory_stats(0, &stats), CUDACACHE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cudacache_last_error()).find("stats->size is 4"), std::string::npos);
  EXPECT_EQ(cudacache_get_memory_stats(0, nullptr), CUDACACHE_INVALID_ARGUMENT);
  EXPECT_NE(std::string(cudacache_last_error()).find("stats is NULL"), std::string::npos);
  stats.size = sizeof stats;
  EXPECT_EQ(cudacache_get_memory_stats(7, &stats), CUDACACHE_INVALID_DEVICE);
  cudacache_free(p, 1000, 0, nullptr);
}

// Found in review: the message of the last failure was a thread_local std::string, destroyed
// at exit before static destructors and atexit handlers run, so a failing call from one of
// them wrote into freed memory (AddressSanitizer's heap-use-after-free; a release build did not
// show it). The handler below exits with 3 when the call leaves no message.
TEST_F(CApi, AFailingCallFromAnExitHandlerStillLeavesItsMessage) {
  // A failure on this thread first, so that the message's storage was in use before exit.
  EXPECT_EQ(cudacache_deallocate(reinterpret_cast<void*>(0x1000)), CUDACACHE_UNKNOWN_POINTER);
  EXPECT_NE(std::strstr(cudacache_last_error(), "0x1000"), nullptr) << cudacache_last_error();
  std::atexit([] {
    if (cudacache_deallocate(reinterpret_cast<void*>(0x2000)) != CUDACACHE_UNKNOWN_POINTER ||
        std::strstr(cudacache_last_error(), "free of 0x2000, which cudacache did not allocate") ==
            nullptr) {
      std::fputs("c_api_test: the failing call at exit left no message\n", stderr);
      std::_Exit(3);
    }
  });
}

TEST_F(CApi, StatusStrings) {
  EXPECT_STREQ(cudacache_status_string(CUDACACHE_OK), "CUDACACHE_OK");
  EXPECT_STREQ(cudacache_status_string(CUDACACHE_OUT_OF_MEMORY), "CUDACACHE_OUT_OF_MEMORY");
  EXPECT_STREQ(cudacache_status_string(CUDACACHE_UNKNOWN_POINTER), "CUDACACHE_UNKNOWN_POINTER");
  EXPECT_STREQ(cudacache_status_string(CUDACACHE_CONFIG), "CUDACACHE_CONFIG");
}

}  // namespace
