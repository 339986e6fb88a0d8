// Peer access between simulated devices and copies between them.
#include <vector>

#include "sim_test.h"

namespace {

class Peer : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    if (IsSkipped()) return;
    int count = 0;
    ASSERT_CUDA(cudaGetDeviceCount(&count));
    if (count < 2) GTEST_SKIP() << "needs CUDASIM_DEVICES >= 2";
  }
};

TEST_F(Peer, EnableAndDisable) {
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_CUDA(cudaDeviceEnablePeerAccess(1, 0));
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);  // itself
  EXPECT_EQ(cudaDeviceEnablePeerAccess(99, 0), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 1), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaDeviceEnablePeerAccess(0, 0));  // per direction
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_CUDA(cudaDeviceDisablePeerAccess(1));
  EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
  ASSERT_CUDA(cudaDeviceEnablePeerAccess(1, 0));
  ASSERT_CUDA(cudaDeviceReset());  // a reset forgets it
  ASSERT_CUDA(cudaDeviceEnablePeerAccess(1, 0));
  (void)cudaGetLastError();
}

TEST_F(Peer, CopiesBetweenDevices) {
  std::vector<int> host(256), back(256, 0);
  for (int i = 0; i < 256; ++i) host[static_cast<size_t>(i)] = i * 3;
  void* on0 = nullptr;
  void* on1 = nullptr;
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_CUDA(cudaMalloc(&on0, 1024));
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaMalloc(&on1, 1024));
  ASSERT_CUDA(cudaMemcpy(on0, host.data(), 1024, cudaMemcpyHostToDevice));
  cudaStream_t stream = nullptr;
  // Non-blocking: the legacy stream's copies below must not wait for the held stream.
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ASSERT_EQ(cudasim_hold_stream(stream), 0);
  ASSERT_CUDA(cudaMemcpyPeerAsync(on1, 1, on0, 0, 1024, stream));
  ASSERT_CUDA(cudaMemcpy(back.data(), on1, 1024, cudaMemcpyDeviceToHost));
  EXPECT_NE(back, host);  // enqueued on a held stream: not done yet
  ASSERT_EQ(cudasim_release_stream(stream), 0);
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  ASSERT_CUDA(cudaMemcpy(back.data(), on1, 1024, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, host);
  std::vector<int> zeros(256, 0);
  ASSERT_CUDA(cudaMemcpy(on0, zeros.data(), 1024, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpyPeer(on0, 0, on1, 1, 1024));
  ASSERT_CUDA(cudaMemcpy(back.data(), on0, 1024, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, host);
  EXPECT_EQ(cudaMemcpyPeer(on0, 0, on1, 7, 1024), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaMemcpyPeer(on0, 0, host.data(), 1, 1024), cudaErrorInvalidValue);  // not device
  (void)cudaGetLastError();
  ASSERT_CUDA(cudaStreamDestroy(stream));
  ASSERT_CUDA(cudaFree(on0));
  ASSERT_CUDA(cudaFree(on1));
}

}  // namespace
