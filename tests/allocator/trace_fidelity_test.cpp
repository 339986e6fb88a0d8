// Fidelity of PyTorch's native policy: replaying real PyTorch traces must reproduce PyTorch's
// own peak reserved memory to the byte. The traces are read and replayed by cudacache-replay's
// library (trace_csv.h, replayer.h), as `cudacache-replay --allocator cudacache:policy:pytorch`
// does. The traces directory comes from the CMake cache variable CUDACACHE_TRACES_DIR; the
// tests skip when it is absent.
#include "test_support.h"

#include "replayer.h"
#include "trace_csv.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>

namespace cudacache {
namespace {

// The replay allocator: cudacache with the options of testing::pytorch_native().
constexpr const char* kPyTorchNative = "cudacache:policy:pytorch";

void expect_peak(const char* name, std::int64_t pytorch_peak_reserved) {
  CUDACACHE_REQUIRE_CUDASIM();
  const std::filesystem::path csv =
      std::filesystem::path(CUDACACHE_TRACES_DIR) / (std::string(name) + ".csv");
  if (!std::filesystem::exists(csv)) {
    GTEST_SKIP() << "trace " << csv << " not found; set -DCUDACACHE_TRACES_DIR=<dir with the "
                 << "shared traces> to run this fidelity check";
  }
  const replay::Trace trace = replay::read_trace_csv(csv.string());
  EXPECT_GT(trace.events.size(), 0u);
  const replay::ReplayResult result = replay::replay_trace(trace, kPyTorchNative, std::nullopt);
  EXPECT_FALSE(result.oom) << result.oom_message;
  EXPECT_EQ(result.events_replayed, trace.events.size());
  ASSERT_TRUE(result.peak_reserved_bytes.has_value());
  EXPECT_EQ(*result.peak_reserved_bytes, static_cast<std::uint64_t>(pytorch_peak_reserved)) << name;
}

TEST(TraceFidelity, DecomflPeakReservedMatchesPyTorch) {
  expect_peak("decomfl_zo_federated_opt_finetune", 1897922560);
}

TEST(TraceFidelity, DitTextDiffusionPeakReservedMatchesPyTorch) {
  expect_peak("dit_text_diffusion_train_oom", 23397924864);
}

}  // namespace
}  // namespace cudacache
