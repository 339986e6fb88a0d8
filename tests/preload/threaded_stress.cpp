// Stress: several threads, each with its own stream, allocate random sizes (cudaMalloc and
// cudaMallocAsync, some on the per-thread default stream), fill each block with a pattern
// unique to it, check that no other allocation overwrote it, and free in random order.
// Two live blocks sharing memory would show up as a pattern mismatch.
//
// Output: "threads=T operations=N ok" and exit status 0, or a FAIL line.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

struct Block {
  void* ptr = nullptr;
  std::size_t size = 0;
  std::uint32_t tag = 0;
  cudaStream_t stream = nullptr;
  bool async = false;
};

std::atomic<bool> g_failed{false};

void fail(const char* what, cudaError_t error) {
  std::printf("FAIL: %s: %s\n", what, cudaGetErrorName(error));
  g_failed = true;
}

std::uint64_t next(std::uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

// The first and last 64 words carry the tag.
bool write_tag(const Block& b) {
  std::vector<std::uint32_t> words(64, b.tag);
  const std::size_t bytes = std::min<std::size_t>(b.size / 4 * 4, 256);
  auto* base = static_cast<unsigned char*>(b.ptr);
  for (std::size_t offset : {std::size_t{0}, b.size / 4 * 4 - bytes}) {
    if (const cudaError_t e =
            cudaMemcpyAsync(base + offset, words.data(), bytes, cudaMemcpyHostToDevice, b.stream);
        e != cudaSuccess) {
      fail("write", e);
      return false;
    }
  }
  return cudaStreamSynchronize(b.stream) == cudaSuccess;
}

bool check_tag(const Block& b) {
  std::vector<std::uint32_t> words(64, 0);
  const std::size_t bytes = std::min<std::size_t>(b.size / 4 * 4, 256);
  const auto* base = static_cast<const unsigned char*>(b.ptr);
  for (std::size_t offset : {std::size_t{0}, b.size / 4 * 4 - bytes}) {
    if (const cudaError_t e =
            cudaMemcpy(words.data(), base + offset, bytes, cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      fail("read", e);
      return false;
    }
    for (std::size_t i = 0; i < bytes / 4; ++i) {
      if (words[i] != b.tag) {
        std::printf("FAIL: block %p tag %u overwritten (found %u)\n", b.ptr, b.tag, words[i]);
        g_failed = true;
        return false;
      }
    }
  }
  return true;
}

void worker(int id, int operations) {
  std::uint64_t state = 0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(id + 1);
  cudaStream_t own = nullptr;
  if (const cudaError_t e = cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);
      e != cudaSuccess) {
    fail("stream", e);
    return;
  }
  std::vector<Block> live;
  for (int op = 0; op < operations && !g_failed; ++op) {
    if (!live.empty() && (live.size() > 16 || next(state) % 2 == 0)) {
      const std::size_t victim = next(state) % live.size();
      Block b = live[victim];
      live[victim] = live.back();
      live.pop_back();
      if (!check_tag(b)) return;
      const cudaError_t e = b.async ? cudaFreeAsync(b.ptr, b.stream) : cudaFree(b.ptr);
      if (e != cudaSuccess) return fail("free", e);
      continue;
    }
    Block b;
    const std::uint64_t r = next(state);
    b.size = r % 8 == 0 ? (1 + r % 30) << 20 : 1 + r % (256 << 10);
    b.tag = static_cast<std::uint32_t>(id * 1000003 + op);
    const int kind = static_cast<int>(next(state) % 3);
    b.async = kind != 0;
    b.stream = kind == 1 ? own : (kind == 2 ? cudaStreamPerThread : nullptr);
    const cudaError_t e =
        b.async ? cudaMallocAsync(&b.ptr, b.size, b.stream) : cudaMalloc(&b.ptr, b.size);
    if (e != cudaSuccess) return fail("allocate", e);
    if (!write_tag(b)) return;
    live.push_back(b);
  }
  for (const Block& b : live) {
    if (!check_tag(b)) return;
    const cudaError_t e = b.async ? cudaFreeAsync(b.ptr, b.stream) : cudaFree(b.ptr);
    if (e != cudaSuccess) return fail("free", e);
  }
  cudaStreamSynchronize(own);
  cudaStreamDestroy(own);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 4;
  const int operations = argc > 2 ? std::atoi(argv[2]) : 2000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t, operations);
  for (std::thread& t : pool) t.join();
  if (g_failed) return 1;
  std::printf("threads=%d operations=%d ok\n", threads, operations);
  return 0;
}
