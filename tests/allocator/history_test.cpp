// Allocation history (history.h): the ring, the vocabulary and order of entries, and their
// export as snapshot JSON (device_traces) and as a replay CSV (history_csv.h).
#include "history_csv.h"
#include "json_test_reader.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace cudacache {
namespace {

using testing::HeldStream;
using testing::pytorch_native;
using testing::ScopedStream;

using replay::testing::Json;
using replay::testing::JsonReader;

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::vector<std::string> actions(const std::vector<HistoryEntry>& entries) {
  std::vector<std::string> names;
  for (const HistoryEntry& entry : entries) names.emplace_back(history_action_name(entry.action));
  return names;
}

std::uintptr_t address_of(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); }
std::uintptr_t handle_of(cudaStream_t stream) { return reinterpret_cast<std::uintptr_t>(stream); }

TEST(History, OffByDefaultRecordsNothing) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native());
  void* p = allocator.allocate(1000, nullptr);
  allocator.deallocate(p);
  allocator.empty_cache();
  EXPECT_TRUE(allocator.history().empty());
  EXPECT_NE(allocator.snapshot_json().find("\"device_traces\":[[]]"), std::string::npos);
  EXPECT_EQ(allocator.history_csv(), "op,id,size,stream\n");
}

TEST(History, RingKeepsTheNewestEntries) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native());
  allocator.record_history(5);
  std::vector<std::uintptr_t> addresses;
  // 1 segment_alloc, then alloc + free_requested + free_completed per round: 1 + 3 x 4 = 13.
  for (int round = 0; round < 4; ++round) {
    void* p = allocator.allocate(1000 + static_cast<std::size_t>(round), nullptr);
    addresses.push_back(address_of(p));
    allocator.deallocate(p);
  }
  const std::vector<HistoryEntry> entries = allocator.history();
  ASSERT_EQ(entries.size(), 5u);
  // The newest five of the 13: [free_requested(2), free_completed(2), alloc(3),
  // free_requested(3), free_completed(3)].
  EXPECT_EQ(actions(entries), (std::vector<std::string>{"free_requested", "free_completed", "alloc",
                                                        "free_requested", "free_completed"}));
  EXPECT_EQ(entries[0].size, 1002u);
  EXPECT_EQ(entries[2].size, 1003u);
  EXPECT_EQ(entries[2].block_size, 1024u);
  for (std::size_t i = 1; i < entries.size(); ++i) {
    EXPECT_LE(entries[i - 1].time_us, entries[i].time_us);
  }

  // Stopping keeps the entries; starting again drops them.
  allocator.record_history(0);
  allocator.deallocate(allocator.allocate(512, nullptr));
  EXPECT_EQ(allocator.history().size(), 5u);
  allocator.record_history(100);
  EXPECT_TRUE(allocator.history().empty());
  allocator.deallocate(allocator.allocate(512, nullptr));
  EXPECT_EQ(actions(allocator.history()),
            (std::vector<std::string>{"alloc", "free_requested", "free_completed"}));
}

TEST(History, OptionStartsRecordingAtCreation) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native("record_history:2"));
  void* p = allocator.allocate(3 * kMiB, nullptr);
  EXPECT_EQ(actions(allocator.history()), (std::vector<std::string>{"segment_alloc", "alloc"}));
  allocator.deallocate(p);
  EXPECT_EQ(actions(allocator.history()),
            (std::vector<std::string>{"free_requested", "free_completed"}));
}

TEST(History, CrossStreamFreeCompletesWhenTheStreamIsDone) {
  CUDACACHE_REQUIRE_CUDASIM();
  const ScopedStream side;
  DeviceAllocator allocator(0, pytorch_native());
  allocator.record_history(1000);
  void* a = allocator.allocate(5000, nullptr);
  allocator.record_stream(a, side);
  HeldStream held(side);
  allocator.deallocate(a);                     // free_requested only: side still runs
  void* b = allocator.allocate(700, nullptr);  // polls the event: not ready
  ASSERT_EQ(held.release(), 0);
  void* c = allocator.allocate(5000, nullptr);  // polls again: a completes first
  EXPECT_EQ(c, a);                              // and its block is reused
  allocator.deallocate(b);
  allocator.deallocate(c);

  const std::vector<HistoryEntry> entries = allocator.history();
  ASSERT_EQ(actions(entries),
            (std::vector<std::string>{"segment_alloc", "alloc", "free_requested", "alloc",
                                      "free_completed", "alloc", "free_requested", "free_completed",
                                      "free_requested", "free_completed"}));
  const std::uintptr_t segment = entries[0].address;
  EXPECT_EQ(entries[0].size, 2 * kMiB);
  EXPECT_EQ(entries[1].address, address_of(a));
  EXPECT_EQ(entries[1].address, segment);
  EXPECT_EQ(entries[1].size, 5000u);  // PyTorch's size: the requested bytes
  EXPECT_EQ(entries[1].block_size, 5120u);
  EXPECT_EQ(entries[2].address, address_of(a));
  EXPECT_EQ(entries[3].address, address_of(b));
  EXPECT_EQ(entries[3].size, 700u);
  EXPECT_EQ(entries[3].block_size, 1024u);
  EXPECT_EQ(entries[4].address, address_of(a));
  EXPECT_EQ(entries[4].size, 5000u);
  EXPECT_EQ(entries[5].address, address_of(a));
  for (const HistoryEntry& entry : entries) {
    EXPECT_EQ(entry.stream, 0u);  // allocation stream; the side stream is only a use
    EXPECT_GT(entry.time_us, 1'600'000'000'000'000);  // after September 2020, in microseconds
  }
}

TEST(History, EntriesNameTheAllocationStream) {
  CUDACACHE_REQUIRE_CUDASIM();
  const ScopedStream side;
  DeviceAllocator allocator(0, pytorch_native("record_history:10"));
  allocator.deallocate(allocator.allocate(100, side));
  const std::vector<HistoryEntry> entries = allocator.history();
  ASSERT_EQ(entries.size(), 4u);
  for (const HistoryEntry& entry : entries) EXPECT_EQ(entry.stream, handle_of(side));
}

TEST(History, FailedRequestRecordsAnOomEntry) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native("record_history:100"));
  void* kept = allocator.allocate(1000, nullptr);
  const std::size_t huge = std::size_t{1} << 40;
  EXPECT_THROW(allocator.allocate(huge, nullptr), OutOfMemoryError);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  const std::vector<HistoryEntry> entries = allocator.history();
  ASSERT_EQ(actions(entries), (std::vector<std::string>{"segment_alloc", "alloc", "oom"}));
  const HistoryEntry& oom = entries.back();
  EXPECT_EQ(oom.address, free_bytes);  // PyTorch's device_free
  EXPECT_EQ(oom.size, huge);           // rounded request (already a multiple of 2 MiB)
  EXPECT_EQ(oom.requested_size, huge);
  EXPECT_EQ(oom.stream, 0u);
  allocator.deallocate(kept);
}

TEST(History, EmptyCacheRecordsItsSegmentFrees) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native());
  void* small = allocator.allocate(1000, nullptr);
  void* large = allocator.allocate(12 * kMiB, nullptr);
  void* kept = allocator.allocate(3 * kMiB, nullptr);  // its 20 MiB segment stays
  allocator.record_history(100);
  allocator.deallocate(small);
  allocator.deallocate(large);
  allocator.empty_cache();
  const std::vector<HistoryEntry> entries = allocator.history();
  ASSERT_EQ(
      actions(entries),
      (std::vector<std::string>{"free_requested", "free_completed", "free_requested",
                                "free_completed", "segment_free", "segment_free", "empty_cache"}));
  std::size_t freed = 0;
  for (std::size_t i = 4; i < 6; ++i) {
    EXPECT_TRUE(entries[i].address == address_of(small) || entries[i].address == address_of(large));
    freed += entries[i].size;
  }
  EXPECT_EQ(freed, 2 * kMiB + 12 * kMiB);
  EXPECT_EQ(entries[6].size, freed);  // what the call released
  EXPECT_EQ(entries[6].address, 0u);
  allocator.deallocate(kept);
}

TEST(History, BadValuesAreErrors) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native());
  try {
    allocator.record_history(kMaxHistoryEntries + 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), CUDACACHE_INVALID_ARGUMENT);
    EXPECT_NE(std::string(error.what()).find("above the maximum 100000000"), std::string::npos)
        << error.what();
  }
  allocator.deallocate(allocator.allocate(512, nullptr));
  EXPECT_TRUE(allocator.history().empty());
  for (const char* config : {"record_history:-1", "record_history:abc",
                             "record_history:", "record_history:100000001", "record_history:1.5"}) {
    try {
      Options options(config);
      ADD_FAILURE() << config << " accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.status(), CUDACACHE_CONFIG) << config;
      EXPECT_NE(std::string(error.what()).find("record_history"), std::string::npos)
          << config << ": " << error.what();
    }
  }
  EXPECT_EQ(Options("record_history:100000000").record_history.max_entries, kMaxHistoryEntries);
}

TEST(History, SnapshotJsonCarriesTheTraceInPyTorchSchema) {
  CUDACACHE_REQUIRE_CUDASIM();
  const ScopedStream side;
  DeviceAllocator allocator(0, pytorch_native("record_history:100"));
  void* a = allocator.allocate(5000, side);
  void* b = allocator.allocate(3 * kMiB, nullptr);
  allocator.deallocate(a);
  EXPECT_THROW(allocator.allocate(std::size_t{1} << 40, nullptr), OutOfMemoryError);
  allocator.empty_cache();

  const Json snapshot = JsonReader(allocator.snapshot_json()).read();
  ASSERT_TRUE(snapshot.has("segments"));
  const Json& traces = snapshot.at("device_traces");
  ASSERT_EQ(traces.type, Json::Type::kArray);
  ASSERT_EQ(traces.array.size(), 1u);  // one list: this device
  const std::vector<Json>& trace = traces.array[0].array;
  const std::vector<HistoryEntry> entries = allocator.history();
  ASSERT_EQ(trace.size(), entries.size());
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const Json& entry = trace[i];
    const std::string action = entry.at("action").text;
    EXPECT_EQ(action, history_action_name(entries[i].action));
    const char* address_key = action == "oom" ? "device_free" : "addr";
    EXPECT_EQ(entry.at(address_key).type, Json::Type::kNumber) << action;
    EXPECT_EQ(entry.at(address_key).number, static_cast<double>(entries[i].address));
    EXPECT_EQ(entry.at("size").number, static_cast<double>(entries[i].size));
    EXPECT_EQ(entry.at("stream").number, static_cast<double>(entries[i].stream));
    EXPECT_EQ(entry.at("time_us").type, Json::Type::kNumber);
    EXPECT_EQ(entry.at("frames").type, Json::Type::kArray);
    EXPECT_TRUE(entry.at("frames").array.empty());
    const bool block_event =
        action == "alloc" || action == "free_requested" || action == "free_completed";
    EXPECT_EQ(entry.has("block_size"), block_event) << action;
    EXPECT_EQ(entry.has("requested_size"), action == "oom") << action;
    EXPECT_EQ(entry.has("addr"), action != "oom") << action;
  }
  const std::vector<std::string> names = actions(entries);
  for (const char* expected : {"segment_alloc", "alloc", "free_requested", "free_completed",
                               "segment_free", "oom", "empty_cache"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
  allocator.deallocate(b);
}

// Recording, exporting and restarting while other threads allocate (run it under TSan too).
TEST(History, ConcurrentRecordingAndExport) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native("record_history:64"));
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&allocator, t] {
      for (int i = 0; i < 2000; ++i) {
        allocator.deallocate(
            allocator.allocate(512 * static_cast<std::size_t>(1 + (i + t) % 7), nullptr));
      }
    });
  }
  std::thread exporter([&] {
    for (std::size_t round = 0; !stop.load(); ++round) {
      EXPECT_LE(allocator.history().size(), 64u);
      EXPECT_EQ(allocator.history_csv().rfind("op,id,size,stream\n", 0), 0u);
      EXPECT_NE(allocator.snapshot_json().find("\"device_traces\":[["), std::string::npos);
      if (round % 16 == 0) allocator.record_history(round % 32 == 0 ? 0 : 64);
    }
  });
  for (std::thread& worker : workers) worker.join();
  stop = true;
  exporter.join();
  EXPECT_EQ(allocator.stats().allocation[kAllPools].current, 0);
}

// history_to_csv on hand-made entries: every rule of history_csv.h.
TEST(HistoryCsv, ConversionRules) {
  auto entry = [](HistoryAction action, std::uintptr_t address, std::size_t size,
                  std::uintptr_t stream) {
    HistoryEntry e;
    e.action = action;
    e.address = address;
    e.size = size;
    e.stream = stream;
    return e;
  };
  using A = HistoryAction;
  const std::vector<HistoryEntry> entries = {
      entry(A::kSegmentAlloc, 0x1000, 2 * kMiB, 0),
      entry(A::kFreeCompleted, 0x9000, 300, 0xbeef),  // allocated before the ring: prelude
      entry(A::kAlloc, 0x1000, 100, 0xabc),
      entry(A::kFreeRequested, 0x1000, 100, 0xabc),
      entry(A::kAlloc, 0x2000, 200, 0),
      entry(A::kFreeCompleted, 0x1000, 100, 0xabc),
      entry(A::kAlloc, 0x1000, 150, 0xabc),  // same address again: a new id
      entry(A::kOom, 12345, 4 * kMiB, 0),
      entry(A::kEmptyCache, 0, 0, 0),
      entry(A::kFreeCompleted, 0x1000, 150, 0xabc),
      entry(A::kSegmentFree, 0x1000, 2 * kMiB, 0),
  };
  const std::vector<LiveBlock> live = {{0x7000, 70, 0xbeef}, {0x2000, 200, 0}, {0x3000, 30, 0}};
  EXPECT_EQ(history_to_csv(entries, live),
            "op,id,size,stream\n"
            "alloc,0,300,1\n"  // prelude: the free of 0x9000
            "alloc,1,30,0\n"   // prelude: live blocks the ring never opened, by address
            "alloc,2,70,1\n"
            "free,0,300,1\n"
            "alloc,3,100,2\n"
            "alloc,4,200,0\n"
            "free,3,100,2\n"
            "alloc,5,150,2\n"
            "empty_cache,,,\n"
            "free,5,150,2\n");
}

}  // namespace
}  // namespace cudacache
