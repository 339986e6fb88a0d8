// Fidelity of the default policy: replaying real PyTorch traces must reproduce PyTorch's own
// peak reserved memory to the byte. The traces directory comes from the CMake cache variable
// CUDACACHE_TRACES_DIR; the tests skip when it is absent.
#include "test_support.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace cudacache {
namespace {

using testing::pytorch_native;

struct ReplayResult {
  std::int64_t peak_reserved = 0;
  std::size_t rows = 0;
};

// CSV rows: op,id,size,stream (see traces/README.md).
ReplayResult replay(const std::filesystem::path& csv) {
  ReplayResult result;
  std::ifstream in(csv);
  EXPECT_TRUE(in.good()) << csv;
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "op,id,size,stream");
  std::map<long, cudaStream_t> streams{{0, nullptr}};
  std::map<long, std::pair<void*, std::size_t>> live;
  {
    DeviceAllocator allocator(0, pytorch_native());
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      std::istringstream fields(line);
      std::string op, id_text, size_text, stream_text;
      std::getline(fields, op, ',');
      std::getline(fields, id_text, ',');
      std::getline(fields, size_text, ',');
      std::getline(fields, stream_text, ',');
      const long id = std::stol(id_text);
      const auto size = static_cast<std::size_t>(std::stoull(size_text));
      const long stream_id = std::stol(stream_text);
      if (!streams.contains(stream_id)) {
        cudaStream_t created = nullptr;
        EXPECT_EQ(cudaStreamCreate(&created), cudaSuccess);
        streams[stream_id] = created;
      }
      ++result.rows;
      if (op == "alloc") {
        EXPECT_FALSE(live.contains(id)) << "row " << result.rows;
        live[id] = {allocator.allocate(size, streams[stream_id]), size};
      } else if (op == "free") {
        const auto it = live.find(id);
        EXPECT_NE(it, live.end()) << "row " << result.rows;
        if (it == live.end()) continue;
        allocator.deallocate(it->second.first, size);
        live.erase(it);
      } else {
        ADD_FAILURE() << "unknown op " << op;
      }
    }
    result.peak_reserved = allocator.stats().reserved_bytes[kAllPools].peak;
    for (auto& [id, entry] : live) allocator.deallocate(entry.first);
  }
  for (auto& [id, stream] : streams) {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  return result;
}

void expect_peak(const char* name, std::int64_t pytorch_peak_reserved) {
  if (!cudasim_available()) GTEST_SKIP() << "needs the cudasim runtime";
  const std::filesystem::path csv =
      std::filesystem::path(CUDACACHE_TRACES_DIR) / (std::string(name) + ".csv");
  if (!std::filesystem::exists(csv)) {
    GTEST_SKIP() << "trace " << csv << " not found; set -DCUDACACHE_TRACES_DIR=<dir with the "
                 << "shared traces> to run this fidelity check";
  }
  const ReplayResult result = replay(csv);
  EXPECT_GT(result.rows, 0u);
  EXPECT_EQ(result.peak_reserved, pytorch_peak_reserved) << name;
}

TEST(TraceFidelity, DecomflPeakReservedMatchesPyTorch) {
  expect_peak("decomfl_zo_federated_opt_finetune", 1897922560);
}

TEST(TraceFidelity, DitTextDiffusionPeakReservedMatchesPyTorch) {
  expect_peak("dit_text_diffusion_train_oom", 23397924864);
}

}  // namespace
}  // namespace cudacache
