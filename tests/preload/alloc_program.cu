// The allocation workload as nvcc builds an ordinary CUDA program (-cudart shared). The
// kernel is compiled and registered but never launched (cudasim cannot run kernels).
#include "alloc_workload.h"

__global__ void fill(unsigned char* data, unsigned char value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = value;
}

int main(int argc, char** argv) { return workload::run(argc, argv); }
