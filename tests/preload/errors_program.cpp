// The error contract: out of memory, invalid arguments, unknown pointers and double frees
// must give the same return codes and the same cudaGetLastError / cudaPeekAtLastError
// sequence with and without the preload. Run with CUDASIM_CAPACITY=64MiB.
//
// Every line printed is a call and what it returned; the test compares the whole output.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

namespace {

void show(const char* what, cudaError_t error) {
  std::printf("%-44s %s\n", what, cudaGetErrorName(error));
}

void show_last_errors() {
  show("  cudaPeekAtLastError", cudaPeekAtLastError());
  show("  cudaGetLastError", cudaGetLastError());
  show("  cudaGetLastError again", cudaGetLastError());
}

}  // namespace

int main() {
  show("cudaFree(NULL)", cudaFree(nullptr));
  show_last_errors();

  // Fill the device with 16 MiB blocks until it refuses.
  std::vector<void*> blocks;
  cudaError_t error = cudaSuccess;
  while (blocks.size() < 64) {
    void* p = nullptr;
    error = cudaMalloc(&p, 16 << 20);
    if (error != cudaSuccess) break;
    blocks.push_back(p);
  }
  std::printf("16 MiB blocks before out of memory: %zu\n", blocks.size());
  show("cudaMalloc(16 MiB) on a full device", error);
  show_last_errors();

  void* p = nullptr;
  show("cudaMalloc(1 TiB)", cudaMalloc(&p, size_t{1} << 40));
  show_last_errors();
  show("cudaMallocAsync(1 TiB)", cudaMallocAsync(&p, size_t{1} << 40, nullptr));
  show_last_errors();

  // An error the program has not read yet survives a successful allocation.
  if (!blocks.empty()) {
    cudaFree(blocks.back());
    blocks.pop_back();
  }
  show("cudaMalloc(NULL, 16)", cudaMalloc(nullptr, 16));
  show("cudaMalloc(1 MiB) with an error pending", cudaMalloc(&p, 1 << 20));
  if (p != nullptr) blocks.push_back(p);
  show_last_errors();

  show("cudaMalloc(&p, 0)", cudaMalloc(&p, 0));
  std::printf("  p is %s\n", p == nullptr ? "NULL" : "not NULL");
  show_last_errors();

  int on_stack = 0;
  show("cudaFree(host pointer)", cudaFree(&on_stack));
  show_last_errors();
  show("cudaFreeAsync(host pointer)", cudaFreeAsync(&on_stack, nullptr));
  show_last_errors();

  for (void* block : blocks) cudaFree(block);
  void* q = nullptr;
  show("cudaMalloc(1 MiB) after freeing all", cudaMalloc(&q, 1 << 20));
  show("cudaFree", cudaFree(q));
  show("cudaFree again (double free)", cudaFree(q));
  show_last_errors();
  show("cudaMalloc(40 MiB)", cudaMalloc(&q, 40 << 20));
  show("cudaFreeAsync", cudaFreeAsync(q, nullptr));
  show("cudaFreeAsync again (double free)", cudaFreeAsync(q, nullptr));
  show_last_errors();
  show("cudaDeviceSynchronize", cudaDeviceSynchronize());
  return 0;
}
