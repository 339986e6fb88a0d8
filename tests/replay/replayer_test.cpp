#include "replayer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

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

// A limit that is no multiple of the resolution is itself the last device tried: the trace
// completes on 5 MiB (the replay on --capacity 5MiB says so), and the search used to round the
// limit down to 4 MiB and report "not found".
TEST_F(Replayer, ALimitBetweenTwoStepsIsTriedItself) {
  const Trace trace = parse_trace_csv("op,id,size,stream\nalloc,0,4194560,0\nfree,0,4194560,0\n",
                                      "four-and-a-bit.csv");
  ASSERT_FALSE(replay_trace(trace, "nocache", 5 * kMiB).oom);
  EXPECT_EQ(find_min_capacity(trace, "nocache", 5 * kMiB).bytes, 5 * kMiB);
  EXPECT_EQ(find_min_capacity(trace, "nocache", 80 * kGiB).bytes, 6 * kMiB);
  EXPECT_FALSE(find_min_capacity(trace, "nocache", 4 * kMiB + 1).bytes);
}

// Note [Smallest device]: the search over a predicate, with no replay. A device is "completes"
// from 204 MiB on but for the sizes in `fails`; the peak is 200 MiB.
struct FakeDevice {
  std::vector<std::uint64_t> fails;  // MiB
  std::size_t calls = 0;
  bool operator()(std::uint64_t bytes) {
    ++calls;
    const std::uint64_t mib = bytes / kMiB;
    return mib >= 204 && std::find(fails.begin(), fails.end(), mib) == fails.end();
  }
};

MinCapacity search(FakeDevice& device, std::uint64_t limit = 80 * kGiB) {
  return find_min_capacity([&](std::uint64_t bytes) { return device(bytes); }, 200 * kMiB, limit);
}

TEST(MinCapacitySearch, AMonotonicDeviceGivesTheFirstThatCompletes) {
  FakeDevice device;
  const MinCapacity found = search(device);
  EXPECT_EQ(found.bytes, 204 * kMiB);
  EXPECT_EQ(found.replays, device.calls);
}

TEST(MinCapacitySearch, ADeviceThatFailsAboveTheBisectedOneIsNoAnswer) {
  // Bisection lands on 204 MiB; 206 and 210 MiB fail: the answer is the first size from which
  // every checked one completes.
  FakeDevice device{{206, 210}};
  EXPECT_EQ(search(device).bytes, 212 * kMiB);
}

TEST(MinCapacitySearch, EveryStepOfTheWindowIsChecked) {
  // 8 steps (16 MiB) above 204 MiB are checked (0.5 % of 102 steps is less): a failure on the
  // eighth counts, one on the tenth is outside the window (the ninth, 222 MiB, is a size the
  // bisection itself tries).
  EXPECT_EQ(verified_steps(102), 8u);
  FakeDevice eighth{{204 + 2 * 8}};
  EXPECT_EQ(search(eighth).bytes, (204 + 2 * 9) * kMiB);
  FakeDevice tenth{{204 + 2 * 10}};
  EXPECT_EQ(search(tenth).bytes, 204 * kMiB);
  // Larger devices check 0.5 % of their steps: 20,000 steps (40 GiB), 100.
  EXPECT_EQ(verified_steps(20000), 100u);
}

TEST(MinCapacitySearch, AFailureOnTheLimitItselfFindsNothing) {
  FakeDevice device{{212}};
  EXPECT_FALSE(search(device, 212 * kMiB).bytes);
  // Below the failure the limit cuts the check short: what completes up to it is the answer.
  FakeDevice below{{220}};
  EXPECT_EQ(search(below, 212 * kMiB).bytes, 204 * kMiB);
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

TEST_F(Replayer, SplitTimeSortsEventsByWhetherTheyCalledTheDevice) {
  // The same 4 MiB block twice: the caching allocator calls the device for the first
  // allocation only, nocache for every allocation and every free.
  const Trace trace = parse_trace_csv(
      "op,id,size,stream\nalloc,0,4194304,0\nfree,0,4194304,0\nalloc,1,4194304,0\n"
      "free,1,4194304,0\n",
      "twice.csv");
  ReplayRecording recording;
  recording.split_time = true;
  const ReplayResult caching = replay_trace(trace, "pytorch", 64 * kMiB, {}, recording);
  ASSERT_TRUE(caching.split_time);
  EXPECT_EQ(caching.split_time->calling_events, 1u);
  EXPECT_EQ(caching.split_time->other_events, 3u);
  EXPECT_GT(caching.split_time->calling_seconds, 0.0);
  const ReplayResult nocache = replay_trace(trace, "nocache", 64 * kMiB, {}, recording);
  ASSERT_TRUE(nocache.split_time);
  EXPECT_EQ(nocache.split_time->calling_events, 4u);
  EXPECT_EQ(nocache.split_time->other_events, 0u);
  EXPECT_EQ(nocache.split_time->other_seconds, 0.0);
  // Not asked for: not measured (a plain replay's loop reads no clock per event).
  EXPECT_FALSE(replay_trace(trace, "pytorch", 64 * kMiB).split_time);
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

// Shapes whose tensors would pass 16 TiB (their sizes wrapped around 2^64: more heads gave a
// smaller peak) or whose trace would pass 20,000,000 events (48 s and 8.7 GB for one) are
// refused by name.
TEST(SyntheticWorkload, RejectsShapesTooLargeToSimulate) {
  const auto message = [](const std::string& spec) {
    try {
      TransformerShape::parse(spec);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  EXPECT_NE(message("seq:1048576,batch:1048576,heads:1,hidden:1,vocab:1,layers:1,steps:1")
                .find("the attention scores (batch x heads x seq x seq x 2 bytes) would be larger "
                      "than 16 TiB"),
            std::string::npos);
  EXPECT_NE(message("batch:1048576,seq:1024,vocab:1048576,heads:1,hidden:1")
                .find("the logits (batch x seq x vocab x 2 bytes)"),
            std::string::npos);
  EXPECT_EQ(message("layers:1048576,steps:1"),
            "synthetic: 1048576 layers and 1 steps would make more than 20000000 events; give "
            "fewer");
  // Large but simulable shapes pass.
  EXPECT_EQ(message("layers:96,steps:100,hidden:12288,seq:2048,batch:1,heads:96"), "");
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

// An inference loop (nca3d_inference_cholec's, sizes / 8): each iteration allocates and frees
// temporaries of 155, 310 and 621 MiB, and two 155 MiB blocks it keeps until the same point of
// the next iteration. Placed like the temporaries, a kept block lands in the memory the next
// iteration's 621 MiB blocks need, which then take pages from elsewhere every iteration (a
// conveyor of unmaps and maps); placed by its predicted lifetime, in the hole its predecessor
// left, it does not: twenty iterations make the device calls of ten, holding at most 1.10 x
// the peak in use (Note [Lifetime classes]).
std::string kept_blocks_loop(int iterations) {
  const std::uint64_t unit = 1302528000 / 8;
  const std::uint64_t sizes[17] = {1332773376 / 8, unit,     unit, 2 * unit, 2 * unit, 4 * unit,
                                   4 * unit,       4 * unit, 256,  256,      4 * unit, unit,
                                   81408000 / 8,   unit,     unit, unit,     unit};
  // One iteration's events: allocate (+) or free (-) block k of this iteration, or (~) free
  // block k of the iteration before.
  const char* const steps[] = {"+0",  "+1",  "-1",  "+2",  "-0",  "+3",  "-2",  "+4",  "+5",
                               "-4",  "-3",  "+6",  "+7",  "+8",  "+9",  "-6",  "-8",  "-9",
                               "-5",  "+10", "+11", "-10", "-7",  "+12", "+13", "-11", "+14",
                               "-13", "-12", "+15", "-14", "~15", "+16", "~16"};
  std::string csv = "op,id,size,stream\nalloc,0," + std::to_string(unit) + ",0\n";
  for (int i = 0; i < iterations; ++i) {
    for (const char* step : steps) {
      const int k = std::stoi(step + 1);
      const int id = 1 + (step[0] == '~' ? i - 1 : i) * 17 + k;
      if (step[0] == '~' && i == 0) continue;
      csv += (step[0] == '+' ? "alloc," : "free,") + std::to_string(id) + "," +
             std::to_string(sizes[k]) + ",0\n";
    }
  }
  return csv;
}

TEST_F(Replayer, BlocksKeptForAnIterationDoNotMoveTheLoopsMemory) {
  const Trace ten = parse_trace_csv(kept_blocks_loop(10), "loop10.csv");
  const Trace twenty = parse_trace_csv(kept_blocks_loop(20), "loop20.csv");
  const std::uint64_t plenty = 64 * kGiB;
  const ReplayResult short_run = replay_trace(ten, "cudacache", plenty);
  const ReplayResult long_run = replay_trace(twenty, "cudacache", plenty);
  ASSERT_FALSE(short_run.oom || long_run.oom);
  ASSERT_TRUE(short_run.device_calls && long_run.device_calls && long_run.peak_reserved_bytes);
  EXPECT_EQ(*long_run.device_calls, *short_run.device_calls);
  EXPECT_LE(static_cast<double>(*long_run.peak_reserved_bytes),
            1.10 * static_cast<double>(twenty.peak_requested_bytes));
}

}  // namespace
}  // namespace cudacache::replay
