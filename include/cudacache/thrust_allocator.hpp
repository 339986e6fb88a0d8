// cudacache::thrust_allocator<T>: Thrust's device allocator over cudacache, so that
//   thrust::device_vector<float, cudacache::thrust_allocator<float>> v(n);
// and the temporary storage of Thrust's algorithms (thrust::cuda::par(alloc).on(stream)) come
// from cudacache's cache. Compile with nvcc (Thrust's CUDA backend). Allocations are on the
// allocator's stream of its device (-1: the current device at each allocation).
#pragma once

#include <cudacache/cudacache.hpp>

#include <thrust/device_malloc_allocator.h>
#include <thrust/device_ptr.h>

#include <cstddef>
#include <limits>
#include <new>
#include <string>

namespace cudacache {

template <typename T>
class thrust_allocator : public thrust::device_malloc_allocator<T> {
 public:
  using base = thrust::device_malloc_allocator<T>;
  using value_type = T;
  using pointer = typename base::pointer;  // thrust::device_ptr<T>
  using size_type = typename base::size_type;

  template <typename U>
  struct rebind {
    using other = thrust_allocator<U>;
  };

  explicit thrust_allocator(cudaStream_t stream = nullptr, int device = -1) noexcept
      : stream_(stream), device_(device) {}
  template <typename U>
  thrust_allocator(const thrust_allocator<U>& other) noexcept  // NOLINT: rebinding is implicit
      : stream_(other.stream()), device_(other.device()) {}

  // Requests are at most PTRDIFF_MAX bytes: a larger count is std::bad_array_new_length.
  size_type max_size() const noexcept {
    return static_cast<size_type>(std::numeric_limits<std::ptrdiff_t>::max()) / sizeof(T);
  }
  pointer allocate(size_type count) {
    if (count > max_size()) throw std::bad_array_new_length();
    // Every block is aligned to 512 bytes: a type aligned beyond that is refused, not given
    // memory that breaks its alignment (memory_resource.hpp's check, as device_allocator).
    if constexpr (alignof(T) > 512) {
      throw Error(CUDACACHE_INVALID_ARGUMENT, "cudacache: alignment " + std::to_string(alignof(T)) +
                                                  " is not a power of two up to 512");
    }
    void* memory = device_ == -1 ? cudacache::allocate(count * sizeof(T), stream_)
                                 : cudacache::allocate(count * sizeof(T), device_, stream_);
    return pointer(static_cast<T*>(memory));
  }
  void deallocate(pointer ptr, size_type /*count*/) noexcept {
    cudacache_deallocate(thrust::raw_pointer_cast(ptr));
  }

  cudaStream_t stream() const noexcept { return stream_; }
  int device() const noexcept { return device_; }

  friend bool operator==(const thrust_allocator& a, const thrust_allocator& b) noexcept {
    return a.stream_ == b.stream_ && a.device_ == b.device_;
  }
  friend bool operator!=(const thrust_allocator& a, const thrust_allocator& b) noexcept {
    return !(a == b);
  }

 private:
  cudaStream_t stream_;
  int device_;
};

}  // namespace cudacache
