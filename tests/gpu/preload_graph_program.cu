// A CUDA graph that allocates and frees a block stream-ordered, under libcudacache_preload.so:
// what cudasim cannot run (PRELOAD_CHECKS.md, check 10; Note [Stream capture] in
// preload/runtime_hooks.cpp). Built with plain nvcc (static runtime: the preload serves it
// through the driver hooks).
//
// The captured graph allocates a block, fills it with A slowly, copies it to `out` and frees
// it. Between launches of the graph, another stream allocates a block of the same size and
// fills it with B. Were the captured allocation served from the cache when captured (and its
// free put back there), that block would be the graph's own memory: the graph's copies would
// see B, or the other stream's block A.
//
// Output: "launches=N wrong=0", the same with and without the preload; exit status 1 when a
// byte is wrong or a call fails.
#include <cuda_runtime.h>

#include "preload_program_support.cuh"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using preload_check::check;
using preload_check::fill;

std::uint64_t count_not(const std::vector<unsigned char>& bytes, unsigned char value) {
  std::uint64_t wrong = 0;
  for (unsigned char byte : bytes) wrong += byte != value;
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  const int launches = argc > 1 ? std::atoi(argv[1]) : 50;
  constexpr std::size_t kBytes = std::size_t{8} << 20;
  constexpr unsigned char kA = 0xA1;
  constexpr unsigned char kB = 0xB2;
  cudaStream_t graph_stream = nullptr;
  cudaStream_t other = nullptr;
  if (!check(cudaStreamCreateWithFlags(&graph_stream, cudaStreamNonBlocking), "stream") ||
      !check(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), "stream")) {
    return 1;
  }
  // A block of kBytes in the cache, so that an allocation of that size would be a cache hit.
  void* warm = nullptr;
  void* out = nullptr;
  if (!check(cudaMallocAsync(&warm, kBytes, graph_stream), "cudaMallocAsync") ||
      !check(cudaFreeAsync(warm, graph_stream), "cudaFreeAsync") ||
      !check(cudaMalloc(&out, kBytes), "cudaMalloc") ||
      !check(cudaStreamSynchronize(graph_stream), "synchronize")) {
    return 1;
  }

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  void* inside = nullptr;
  if (!check(cudaStreamBeginCapture(graph_stream, cudaStreamCaptureModeGlobal), "begin capture") ||
      !check(cudaMallocAsync(&inside, kBytes, graph_stream), "captured cudaMallocAsync")) {
    return 1;
  }
  fill<<<64, 256, 0, graph_stream>>>(static_cast<unsigned char*>(inside), kA, kBytes, 20);
  if (!check(cudaGetLastError(), "captured launch") ||
      !check(cudaMemcpyAsync(out, inside, kBytes, cudaMemcpyDeviceToDevice, graph_stream),
             "captured copy") ||
      !check(cudaFreeAsync(inside, graph_stream), "captured cudaFreeAsync") ||
      !check(cudaStreamEndCapture(graph_stream, &graph), "end capture") ||
      !check(cudaGraphInstantiate(&exec, graph, 0), "instantiate")) {
    return 1;
  }

  std::vector<unsigned char> back(kBytes);
  std::uint64_t wrong = 0;
  for (int launch = 0; launch < launches; ++launch) {
    if (!check(cudaGraphLaunch(exec, graph_stream), "launch graph")) return 1;
    void* block = nullptr;  // while the graph runs
    if (!check(cudaMallocAsync(&block, kBytes, other), "cudaMallocAsync")) return 1;
    fill<<<64, 256, 0, other>>>(static_cast<unsigned char*>(block), kB, kBytes, 1);
    if (!check(cudaGetLastError(), "launch") ||
        !check(cudaStreamSynchronize(graph_stream), "synchronize graph") ||
        !check(cudaMemcpy(back.data(), out, kBytes, cudaMemcpyDeviceToHost), "copy out")) {
      return 1;
    }
    wrong += count_not(back, kA);
    if (!check(cudaMemcpyAsync(back.data(), block, kBytes, cudaMemcpyDeviceToHost, other),
               "copy block") ||
        !check(cudaStreamSynchronize(other), "synchronize other")) {
      return 1;
    }
    wrong += count_not(back, kB);
    if (!check(cudaFreeAsync(block, other), "cudaFreeAsync")) return 1;
  }
  if (!check(cudaGraphExecDestroy(exec), "exec destroy") ||
      !check(cudaGraphDestroy(graph), "graph destroy") || !check(cudaFree(out), "cudaFree") ||
      !check(cudaStreamDestroy(graph_stream), "stream destroy") ||
      !check(cudaStreamDestroy(other), "stream destroy") ||
      !check(cudaDeviceSynchronize(), "device synchronize")) {
    return 1;
  }
  std::printf("launches=%d wrong=%llu\n", launches, static_cast<unsigned long long>(wrong));
  return wrong == 0 ? 0 : 1;
}
