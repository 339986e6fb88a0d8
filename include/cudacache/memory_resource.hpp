// Adaptors so that code written for CCCL's and RMM's interfaces uses cudacache with no glue
// (C++17, header-only, over the C++ API in cudacache.hpp):
//
// - cudacache::memory_resource: a cuda::mr-style memory resource. It has the members CCCL's
//   cuda::mr::resource and cuda::mr::async_resource concepts ask for (allocate/deallocate with
//   size and alignment, allocate_async/deallocate_async with a stream, equality), and, where
//   CCCL's experimental memory resources are enabled (LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_
//   RESOURCE, included before this header), the cuda::mr::device_accessible property.
// - cudacache::device_allocator<T>: a std-style allocator (std::allocator_traits) of device
//   memory on one stream, for containers that never touch their elements on the host
//   (rmm::device_uvector-like buffers, thrust with thrust_allocator.hpp).
//
// Alignment: cudacache's blocks start on 512-byte boundaries (PyTorch's guarantee); a request
// for more, or for an alignment that is not a power of two, is an Error (INVALID_ARGUMENT).
#pragma once

#include <cudacache/cudacache.hpp>

#include <cstddef>
#include <limits>
#include <new>
#include <string>
#include <type_traits>

#if defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE) && __has_include(<cuda/memory_resource>)
#include <cuda/memory_resource>
#define CUDACACHE_HAS_CUDA_MR 1
#endif

namespace cudacache {

// The alignment every block has.
inline constexpr std::size_t kBlockAlignment = 512;

namespace detail {

inline void check_alignment(std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kBlockAlignment) {
    throw Error(CUDACACHE_INVALID_ARGUMENT, "cudacache: alignment " + std::to_string(alignment) +
                                                " is not a power of two up to " +
                                                std::to_string(kBlockAlignment));
  }
}

// A cudaStream_t, or a stream wrapper with get() (cuda::stream_ref, rmm::cuda_stream_view).
template <typename Stream>
cudaStream_t stream_handle(Stream stream) {
  if constexpr (std::is_convertible_v<Stream, cudaStream_t>) {
    return stream;
  } else {
    return stream.get();
  }
}

}  // namespace detail

class memory_resource {
 public:
  // The allocator of `device` (-1: the device current at each call).
  explicit memory_resource(int device = -1) noexcept : device_(device) {}

  // Synchronous: on the legacy default stream.
  void* allocate(std::size_t bytes, std::size_t alignment = kBlockAlignment) {
    return allocate_async(bytes, alignment, cudaStream_t{nullptr});
  }
  void deallocate(void* ptr, std::size_t /*bytes*/,
                  std::size_t /*alignment*/ = kBlockAlignment) noexcept {
    // noexcept, as cuda::mr asks: a pointer it never gave out or one already freed is refused,
    // nothing changes, and the reason is cudacache_last_error() on this thread.
    cudacache_deallocate(ptr);
  }

  // Stream-ordered: the block belongs to `stream` (reused by work on it without waiting).
  template <typename Stream>
  void* allocate_async(std::size_t bytes, std::size_t alignment, Stream stream) {
    detail::check_alignment(alignment);
    return device_ == -1 ? cudacache::allocate(bytes, detail::stream_handle(stream))
                         : cudacache::allocate(bytes, device_, detail::stream_handle(stream));
  }
  // Freed in the order of `stream`: a block allocated on another stream is reused only after
  // the work queued on `stream` so far completes (record_stream).
  template <typename Stream>
  void deallocate_async(void* ptr, std::size_t /*bytes*/, std::size_t /*alignment*/,
                        Stream stream) {
    if (ptr == nullptr) return;
    cudacache::record_stream(ptr, detail::stream_handle(stream));
    cudacache::deallocate(ptr);
  }

  int device() const noexcept { return device_; }
  friend bool operator==(const memory_resource& a, const memory_resource& b) noexcept {
    return a.device_ == b.device_;
  }
  friend bool operator!=(const memory_resource& a, const memory_resource& b) noexcept {
    return !(a == b);
  }
#if defined(CUDACACHE_HAS_CUDA_MR)
  friend void get_property(const memory_resource&, ::cuda::mr::device_accessible) noexcept {}
#endif

 private:
  int device_;
};

template <typename T>
class device_allocator {
 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  // On `stream` of `device` (-1: the current device at each allocation).
  explicit device_allocator(cudaStream_t stream = nullptr, int device = -1) noexcept
      : stream_(stream), device_(device) {}
  template <typename U>
  device_allocator(const device_allocator<U>& other) noexcept  // NOLINT: rebinding is implicit
      : stream_(other.stream()), device_(other.device()) {}

  // The most elements one allocation holds: requests are at most PTRDIFF_MAX bytes (a larger
  // count is std::bad_array_new_length, as from `new T[count]`, and containers check it first).
  static constexpr std::size_t max_size() noexcept {
    return static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) / sizeof(T);
  }
  T* allocate(std::size_t count) {
    if (count > max_size()) throw std::bad_array_new_length();
    // alignof(T) itself: a type aligned beyond every block's 512 bytes is refused (Error), not
    // given memory that breaks its alignment.
    return static_cast<T*>(
        memory_resource(device_).allocate_async(count * sizeof(T), alignof(T), stream_));
  }
  // noexcept, as std::allocator's: a bad pointer is refused as by memory_resource::deallocate.
  void deallocate(T* ptr, std::size_t /*count*/) noexcept { cudacache_deallocate(ptr); }

  cudaStream_t stream() const noexcept { return stream_; }
  int device() const noexcept { return device_; }

  template <typename U>
  friend bool operator==(const device_allocator& a, const device_allocator<U>& b) noexcept {
    return a.stream_ == b.stream() && a.device_ == b.device();
  }
  template <typename U>
  friend bool operator!=(const device_allocator& a, const device_allocator<U>& b) noexcept {
    return !(a == b);
  }

 private:
  cudaStream_t stream_;
  int device_;
};

}  // namespace cudacache
