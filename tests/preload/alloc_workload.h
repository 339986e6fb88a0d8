// An allocation-heavy CUDA program, written the way ordinary programs are: cudaMalloc, copy
// in, copy out, cudaFree, over and over, plus stream-ordered allocations on a few streams.
// Compiled three ways (nvcc -cudart shared, g++ against libcudart.so.13, g++ with per-thread
// default streams); run with and without the preload its output must be identical.
//
// Output: one line "rounds=N checksum=X" (X covers every byte read back).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace workload {

inline std::uint64_t next(std::uint64_t& state) {
  state = state * 6364136223846793005ULL + 1442695040888963407ULL;
  return state >> 17;
}

inline bool check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::printf("FAIL: %s: %s\n", what, cudaGetErrorName(error));
  return false;
}

// Writes a pattern at both ends of the block, reads it back, folds it into the checksum.
inline bool round_trip(void* device, std::size_t size, std::uint64_t seed, cudaStream_t stream,
                       bool async, std::uint64_t& checksum) {
  const std::size_t window = size < 4096 ? size : 4096;
  std::vector<unsigned char> out(window), back(window);
  for (std::size_t i = 0; i < window; ++i) out[i] = static_cast<unsigned char>(seed + i * 7);
  auto* bytes = static_cast<unsigned char*>(device);
  for (std::size_t offset : {std::size_t{0}, size - window}) {
    if (async) {
      if (!check(
              cudaMemcpyAsync(bytes + offset, out.data(), window, cudaMemcpyHostToDevice, stream),
              "copy in") ||
          !check(
              cudaMemcpyAsync(back.data(), bytes + offset, window, cudaMemcpyDeviceToHost, stream),
              "copy out") ||
          !check(cudaStreamSynchronize(stream), "synchronize")) {
        return false;
      }
    } else if (!check(cudaMemcpy(bytes + offset, out.data(), window, cudaMemcpyHostToDevice),
                      "copy in") ||
               !check(cudaMemcpy(back.data(), bytes + offset, window, cudaMemcpyDeviceToHost),
                      "copy out")) {
      return false;
    }
    for (unsigned char b : back) checksum = checksum * 1099511628211ULL + b;
  }
  return true;
}

inline std::size_t pick_size(std::uint64_t& state) {
  static constexpr std::size_t kSizes[] = {1000,    4096,    100000,   512 << 10,
                                           1 << 20, 3 << 20, 12 << 20, 24 << 20};
  return kSizes[next(state) % (sizeof kSizes / sizeof kSizes[0])] + next(state) % 4096;
}

inline int run(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 1000;
  constexpr int kLive = 8;
  constexpr int kStreams = 4;
  std::uint64_t state = 42;
  std::uint64_t checksum = 0;
  void* live[kLive] = {};
  std::size_t live_size[kLive] = {};

  // Plain cudaMalloc / cudaFree, a few blocks alive at a time.
  for (int i = 0; i < rounds; ++i) {
    const int slot = i % kLive;
    if (live[slot] != nullptr && !check(cudaFree(live[slot]), "cudaFree")) return 1;
    live_size[slot] = pick_size(state);
    if (!check(cudaMalloc(&live[slot], live_size[slot]), "cudaMalloc") ||
        !round_trip(live[slot], live_size[slot], state, nullptr, false, checksum)) {
      return 1;
    }
  }
  for (void*& p : live) {
    if (!check(cudaFree(p), "cudaFree")) return 1;
    p = nullptr;
  }

  // Stream-ordered allocations on non-blocking streams and on the default stream.
  cudaStream_t streams[kStreams] = {};
  for (int s = 1; s < kStreams; ++s) {
    if (!check(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking), "stream")) return 1;
  }
  for (int i = 0; i < rounds; ++i) {
    cudaStream_t stream = streams[i % kStreams];
    void* p = nullptr;
    const std::size_t size = pick_size(state);
    if (!check(cudaMallocAsync(&p, size, stream), "cudaMallocAsync") ||
        !round_trip(p, size, state, stream, true, checksum) ||
        !check(cudaFreeAsync(p, stream), "cudaFreeAsync")) {
      return 1;
    }
  }
  for (int s = 1; s < kStreams; ++s) {
    if (!check(cudaStreamSynchronize(streams[s]), "synchronize") ||
        !check(cudaStreamDestroy(streams[s]), "stream destroy")) {
      return 1;
    }
  }
  if (!check(cudaDeviceSynchronize(), "device synchronize")) return 1;
  std::printf("rounds=%d checksum=%llu\n", rounds, static_cast<unsigned long long>(checksum));
  return 0;
}

}  // namespace workload
