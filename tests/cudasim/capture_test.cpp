// Stream capture queries (the simulator never captures) and the runtime functions cudasim
// provides only so that libraries importing them load: each fails with cudaErrorNotSupported.
#include <cuda_profiler_api.h>

#include <cstring>

#include "sim_test.h"

namespace {

using Capture = SimTest;
using Unsupported = SimTest;

TEST_F(Capture, NoStreamIsCapturing) {
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  for (cudaStream_t s :
       {stream, static_cast<cudaStream_t>(nullptr), cudaStreamLegacy, cudaStreamPerThread}) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    ASSERT_CUDA(cudaStreamIsCapturing(s, &status));
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  }
  ASSERT_CUDA(cudaStreamDestroy(stream));
}

TEST_F(Capture, AStreamMarkedCapturingIsReportedSoUntilUnmarked) {
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  ASSERT_EQ(cudasim_set_stream_capturing(stream, 1), 0);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ASSERT_CUDA(cudaStreamIsCapturing(stream, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  status = cudaStreamCaptureStatusNone;
  ASSERT_CUDA(
      cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  ASSERT_CUDA(cudaStreamIsCapturing(nullptr, &status));  // the others are not
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  ASSERT_EQ(cudasim_set_stream_capturing(stream, 0), 0);
  ASSERT_CUDA(cudaStreamIsCapturing(stream, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_EQ(cudasim_set_stream_capturing(stream, 2), -1);
  ASSERT_CUDA(cudaStreamDestroy(stream));
  EXPECT_EQ(cudasim_set_stream_capturing(stream, 1), -1);  // destroyed
}

TEST_F(Capture, IsCapturingChecksArguments) {
  EXPECT_EQ(cudaStreamIsCapturing(nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  ASSERT_CUDA(cudaStreamDestroy(stream));
  cudaStreamCaptureStatus status{};
  EXPECT_NE(cudaStreamIsCapturing(stream, &status), cudaSuccess);  // destroyed
  (void)cudaGetLastError();
}

TEST_F(Capture, GetCaptureInfoClearsOutputs) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  unsigned long long id = 42;
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(0x1);
  const cudaGraphNode_t* dependencies = reinterpret_cast<const cudaGraphNode_t*>(0x1);
  const cudaGraphEdgeData* edges = reinterpret_cast<const cudaGraphEdgeData*>(0x1);
  size_t count = 7;
  ASSERT_CUDA(
      cudaStreamGetCaptureInfo(nullptr, &status, &id, &graph, &dependencies, &edges, &count));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_EQ(id, 0u);
  EXPECT_EQ(graph, nullptr);
  EXPECT_EQ(dependencies, nullptr);
  EXPECT_EQ(edges, nullptr);
  EXPECT_EQ(count, 0u);
  ASSERT_CUDA(cudaStreamGetCaptureInfo(nullptr, &status));  // optional outputs may be NULL
  EXPECT_EQ(cudaStreamGetCaptureInfo(nullptr, nullptr), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_F(Capture, ExchangeModeSwapsThePerThreadMode) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  ASSERT_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, cudaStreamCaptureModeGlobal);  // the initial mode
  mode = cudaStreamCaptureModeThreadLocal;
  ASSERT_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);
  // No such mode; stored as an int, since an enum holding it is not a valid value.
  const int invalid = 7;
  std::memcpy(&mode, &invalid, sizeof(invalid));
  EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaErrorInvalidValue);
  int left = 0;
  std::memcpy(&left, &mode, sizeof(left));
  EXPECT_EQ(left, invalid);  // unchanged on error
  mode = cudaStreamCaptureModeGlobal;
  EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(nullptr), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));  // restore Global
  EXPECT_EQ(mode, cudaStreamCaptureModeThreadLocal);
  (void)cudaGetLastError();
}

TEST_F(Unsupported, FailsLoudlyWithNotSupported) {
  testing::internal::CaptureStderr();
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaErrorNotSupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotSupported);
  void* managed = nullptr;
  EXPECT_EQ(cudaMallocManaged(&managed, 64, cudaMemAttachGlobal), cudaErrorNotSupported);
  EXPECT_EQ(cudaProfilerStart(), cudaErrorNotSupported);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaGraphDestroy(graph), cudaErrorNotSupported);
  (void)cudaGetLastError();
  ASSERT_CUDA(cudaStreamDestroy(stream));
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("cudasim: cudaStreamBeginCapture is not supported"), std::string::npos) << log;
  EXPECT_NE(log.find("cudasim: cudaMallocManaged is not supported"), std::string::npos) << log;
  EXPECT_NE(log.find("cudasim: cudaProfilerStart is not supported"), std::string::npos) << log;
}

}  // namespace
