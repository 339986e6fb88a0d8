#include "replayer.h"

#include <gtest/gtest.h>

#include "cudasim.h"
#include "require_cudasim.h"
#include "synthetic_workload.h"
#include "trace_csv.h"

namespace cudacache::replay {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kGiB = kMiB << 10;

class Replayer : public ::testing::Test {
 protected:
  void SetUp() override { CUDACACHE_REQUIRE_CUDASIM(); }
};

// 2.5 MiB + 1 MiB live together: 3.5 MiB requested. Sizes are multiples of 256 B, so
// cudasim's rounding adds nothing.
const char* const kTwoBlocks =
    "op,id,size,stream\nalloc,0,2621440,0\nalloc,1,1048576,0\nfree,0,2621440,0\nfree,1,1048576,0\n";

TEST_F(Replayer, NoCacheNeedsThePeakRoundedToTheResolution) {
  const Trace trace = parse_trace_csv(kTwoBlocks, "two.csv");
  const MinCapacity found = find_min_capacity(trace, "nocache", 80 * kGiB);
  ASSERT_TRUE(found.bytes);
  EXPECT_EQ(*found.bytes, 4 * kMiB);  // 3.5 MiB rounded up to 2 MiB steps
  EXPECT_GT(found.replays, 1u);
  // Checked directly: it completes there and fails one step below.
  EXPECT_FALSE(replay_trace(trace, "nocache", 4 * kMiB).oom);
  EXPECT_TRUE(replay_trace(trace, "nocache", 2 * kMiB).oom);
}

TEST_F(Replayer, ExactMultipleOfTheResolution) {
  const Trace trace =
      parse_trace_csv("op,id,size,stream\nalloc,0,4194304,0\nfree,0,4194304,0\n", "four.csv");
  EXPECT_EQ(find_min_capacity(trace, "nocache", 80 * kGiB).bytes, 4 * kMiB);
}

TEST_F(Replayer, CubPaysForItsBins) {
  // CUB rounds the 1 MiB request up to its 2 MiB bin: 4.5 MiB live, so 6 MiB.
  const Trace trace = parse_trace_csv(kTwoBlocks, "two.csv");
  EXPECT_EQ(find_min_capacity(trace, "cub", 80 * kGiB).bytes, 6 * kMiB);
}

TEST_F(Replayer, NoCapacityUpToTheLimitIsReported) {
  const Trace trace = parse_trace_csv(kTwoBlocks, "two.csv");
  const MinCapacity found = find_min_capacity(trace, "nocache", 2 * kMiB);
  EXPECT_FALSE(found.bytes);
}

TEST_F(Replayer, ProgressReachesTheEnd) {
  const Trace trace = parse_trace_csv(kTwoBlocks, "two.csv");
  std::size_t last_done = 0;
  std::size_t last_total = 0;
  replay_trace(trace, "nocache", 64 * kMiB, [&](std::size_t done, std::size_t total) {
    last_done = done;
    last_total = total;
  });
  EXPECT_EQ(last_done, 4u);
  EXPECT_EQ(last_total, 4u);
}

TEST(SyntheticWorkload, IsAValidTrainingTrace) {
  TransformerShape shape =
      TransformerShape::parse("layers:2,hidden:64,heads:2,seq:16,batch:2,vocab:100,steps:2");
  const Trace trace = make_transformer_training_trace(shape);
  EXPECT_EQ(trace.name,
            "synthetic: transformer training (2 layers, hidden 64, 2 heads, seq 16, batch 2, vocab "
            "100, 2 steps)");
  // Parameters and AdamW moments stay live to the end; everything else is freed each step.
  // fp32 embedding (vocab x hidden), per layer 12 h^2 + 13 h, final norm 2 h.
  const std::uint64_t parameter_bytes = (100 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64) * 4;
  std::uint64_t live = 0;
  for (const TraceEvent& event : trace.events) live += event.op == TraceOp::kAlloc ? event.size : 0;
  for (const TraceEvent& event : trace.events) live -= event.op == TraceOp::kFree ? event.size : 0;
  EXPECT_EQ(live, 3 * parameter_bytes);
  EXPECT_GT(trace.peak_requested_bytes, 3 * parameter_bytes);
  // A second step repeats the first one's pattern: more events, a peak at least as high.
  shape.steps = 1;
  const Trace one_step = make_transformer_training_trace(shape);
  EXPECT_LT(one_step.events.size(), trace.events.size());
  EXPECT_LE(one_step.peak_requested_bytes, trace.peak_requested_bytes);
}

TEST(SyntheticWorkload, RejectsBadSpecs) {
  EXPECT_THROW(TransformerShape::parse("layers:0"), std::invalid_argument);
  EXPECT_THROW(TransformerShape::parse("depth:3"), std::invalid_argument);
  EXPECT_THROW(TransformerShape::parse("layers"), std::invalid_argument);
  EXPECT_EQ(TransformerShape::parse("").layers, TransformerShape{}.layers);
}

// A steady training loop makes no device call once its optimizer state exists: ten steps make
// exactly the calls of two (cudasim's counts). The first step alone makes fewer: AdamW's
// moment buffers are created at its end, so the second step is the first to need them.
TEST_F(Replayer, SteadyTrainingLoopMakesNoDeviceCallAfterItsWarmUp) {
  TransformerShape shape = TransformerShape::parse("layers:4,hidden:256,seq:128,batch:4");
  for (const char* allocator : {"cudacache", "pytorch", "pytorch-expandable"}) {
    SCOPED_TRACE(allocator);
    shape.steps = 2;
    const ReplayResult one = replay_trace(make_transformer_training_trace(shape), allocator, {});
    shape.steps = 10;
    const ReplayResult ten = replay_trace(make_transformer_training_trace(shape), allocator, {});
    ASSERT_TRUE(one.device_calls && ten.device_calls);
    EXPECT_GT(one.device_calls->total(), 0u);
    EXPECT_EQ(*ten.device_calls, *one.device_calls);
  }
}

// torch.cat-style growth (each step allocates a slightly larger tensor and frees the old one):
// with plenty of room cudacache's default policy holds close to what is in use; PyTorch's native
// policy holds many times more.
TEST_F(Replayer, TensorsGrownStepByStepAreNotHeldManyTimesOver) {
  std::string csv = "op,id,size,stream\n";
  const std::uint64_t step_bytes = 6 * kMiB;
  std::uint64_t previous = 0;
  for (std::uint64_t i = 1; i <= 200; ++i) {
    csv += "alloc," + std::to_string(i) + "," + std::to_string(i * step_bytes) + ",0\n";
    if (previous != 0) {
      csv +=
          "free," + std::to_string(previous) + "," + std::to_string(previous * step_bytes) + ",0\n";
    }
    previous = i;
  }
  const Trace trace = parse_trace_csv(csv, "cat.csv");
  const std::uint64_t plenty = 64 * kGiB;  // the device has room (at 8 GiB it has not)
  const ReplayResult ours = replay_trace(trace, "cudacache", plenty);
  const ReplayResult native = replay_trace(trace, "pytorch", plenty);
  ASSERT_TRUE(ours.peak_reserved_bytes && native.peak_reserved_bytes);
  EXPECT_LE(static_cast<double>(*ours.peak_reserved_bytes),
            1.10 * static_cast<double>(trace.peak_requested_bytes));
  EXPECT_GT(*native.peak_reserved_bytes, 2 * *ours.peak_reserved_bytes);
}

}  // namespace
}  // namespace cudacache::replay
