// cudacache::thrust_allocator (include/cudacache/thrust_allocator.hpp) under nvcc: a
// thrust::device_vector's storage comes from cudacache and goes back to it. On cudasim, where
// kernels cannot run, the vector only reserves; on a GPU (tests/gpu runs this test there too)
// it also fills, sorts and reads back through Thrust's algorithms.
#include <cudasim.h>
#include <cudacache/thrust_allocator.hpp>

#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <new>

namespace {

std::int64_t allocated_now() {
  return cudacache::memory_stats(0).allocated_bytes[cudacache::kAllPools].current;
}

}  // namespace

int main() {
  const bool on_cudasim = cudasim_available() != 0;
  constexpr int kCount = 1 << 20;
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 1;
  {
    cudacache::thrust_allocator<int> allocator(stream, 0);
    thrust::device_vector<int, cudacache::thrust_allocator<int>> values(allocator);
    values.reserve(kCount);
    if (allocated_now() != std::int64_t{kCount} * 4) {
      std::printf("thrust: %lld bytes allocated after reserve\n",
                  static_cast<long long>(allocated_now()));
      return 2;
    }
    if (values.get_allocator().stream() != stream) return 3;
    if (!on_cudasim) {
      values.resize(kCount);
      thrust::sequence(values.begin(), values.end());
      thrust::sort(values.begin(), values.end(), thrust::greater<int>());
      if (values[0] != kCount - 1 || values[kCount - 1] != 0) return 4;
    }
  }
  if (allocated_now() != 0) return 5;
  // A type aligned beyond every block's 512 bytes is refused by name, not given a block that
  // breaks its alignment; a count past PTRDIFF_MAX bytes is bad_array_new_length.
  struct alignas(1024) Aligned1024 {
    char bytes[1024];
  };
  try {
    cudacache::thrust_allocator<Aligned1024>(stream, 0).allocate(1);
    return 6;
  } catch (const cudacache::Error& error) {
    if (error.status() != CUDACACHE_INVALID_ARGUMENT) return 7;
  }
  cudacache::thrust_allocator<double> doubles(stream, 0);
  if (doubles.max_size() != static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(double)) return 8;
  try {
    doubles.allocate(doubles.max_size() + 1);
    return 9;
  } catch (const std::bad_array_new_length&) {
  }
  if (allocated_now() != 0) return 10;
  cudaStreamDestroy(stream);
  std::printf("thrust ok runtime=%s\n", on_cudasim ? "cudasim" : "gpu");
  return 0;
}
