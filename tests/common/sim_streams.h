// Streams for tests on cudasim, released even when an assertion ends a test early:
// ScopedStream creates a stream and destroys it at the end of its scope; HeldStream keeps a
// stream's work pending (cudasim_hold_stream) until release() or the end of its scope, so that
// a failed test does not leave a stream held for the tests after it. C++17 (cpp_api_test).
#pragma once

#include <cuda_runtime_api.h>
#include <cudasim.h>
#include <gtest/gtest.h>

namespace cudacache::testing {

class ScopedStream {
 public:
  // cudaStreamCreate when flags is cudaStreamDefault.
  explicit ScopedStream(unsigned int flags = cudaStreamDefault) {
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream_, flags), cudaSuccess);
  }
  ~ScopedStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;

  cudaStream_t get() const { return stream_; }
  operator cudaStream_t() const { return stream_; }  // NOLINT: used where a stream is

 private:
  cudaStream_t stream_ = nullptr;
};

class HeldStream {
 public:
  explicit HeldStream(cudaStream_t stream) : stream_(stream) {
    held_ = cudasim_hold_stream(stream_) == 0;
    EXPECT_TRUE(held_) << "cudasim_hold_stream failed";
  }
  ~HeldStream() {
    if (held_) cudasim_release_stream(stream_);
  }
  HeldStream(const HeldStream&) = delete;
  HeldStream& operator=(const HeldStream&) = delete;

  // Completes the stream's work now; cudasim_release_stream's result (0 on success). May be
  // called from another thread, joined before the guard goes out of scope.
  int release() {
    held_ = false;
    return cudasim_release_stream(stream_);
  }

 private:
  cudaStream_t stream_;
  bool held_ = false;
};

}  // namespace cudacache::testing
