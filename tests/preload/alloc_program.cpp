// The allocation workload built by g++ against libcudart.so.13 (and, with
// CUDA_API_PER_THREAD_DEFAULT_STREAM, calling the _ptsz functions).
#include "alloc_workload.h"

int main(int argc, char** argv) { return workload::run(argc, argv); }
