// Streams and events, including held streams and cross-stream waits.
#include <atomic>
#include <chrono>
#include <thread>

#include "sim_test.h"

namespace {

using StreamsEvents = SimTest;

void release_later(cudaStream_t stream, std::atomic<bool>* released) {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  released->store(true);
  cudasim_release_stream(stream);
}

TEST_F(StreamsEvents, CreateQueryDestroy) {
  cudaStream_t a = nullptr;
  cudaStream_t b = nullptr;
  cudaStream_t c = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&a));
  ASSERT_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaStreamCreateWithPriority(&c, cudaStreamDefault, -100));
  EXPECT_NE(a, b);
  unsigned flags = 7;
  ASSERT_CUDA(cudaStreamGetFlags(a, &flags));
  EXPECT_EQ(flags, 0u);
  ASSERT_CUDA(cudaStreamGetFlags(b, &flags));
  EXPECT_EQ(flags, static_cast<unsigned>(cudaStreamNonBlocking));
  int priority = 0;
  int least = 0;
  int greatest = 0;
  ASSERT_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  ASSERT_CUDA(cudaStreamGetPriority(c, &priority));
  EXPECT_EQ(priority, greatest);  // clamped
  ASSERT_CUDA(cudaStreamGetPriority(a, &priority));
  EXPECT_EQ(priority, 0);
  int device = -1;
  ASSERT_CUDA(cudaStreamGetDevice(a, &device));
  EXPECT_EQ(device, 0);
  ASSERT_CUDA(cudaStreamGetDevice(nullptr, &device));
  ASSERT_CUDA(cudaStreamGetFlags(cudaStreamPerThread, &flags));
  EXPECT_CUDA(cudaStreamQuery(a));
  EXPECT_CUDA(cudaStreamQuery(nullptr));
  EXPECT_CUDA(cudaStreamQuery(cudaStreamLegacy));
  EXPECT_CUDA(cudaStreamQuery(cudaStreamPerThread));
  EXPECT_EQ(cudaStreamCreateWithFlags(&a, 0x4), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamCreate(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamGetFlags(a, nullptr), cudaErrorInvalidValue);
  for (cudaStream_t s : {a, b, c}) ASSERT_CUDA(cudaStreamDestroy(s));
}

TEST_F(StreamsEvents, DestroyedAndBogusHandles) {
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&s));
  ASSERT_CUDA(cudaEventCreate(&e));
  ASSERT_CUDA(cudaStreamDestroy(s));
  ASSERT_CUDA(cudaEventDestroy(e));
  unsigned flags = 0;
  int value = 0;
  float ms = 0;
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamGetFlags(s, &flags), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamGetPriority(s, &value), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamGetDevice(s, &value), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventDestroy(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventSynchronize(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventRecord(e, nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventElapsedTime(&ms, e, e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamWaitEvent(nullptr, e, 0), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(nullptr), cudaErrorInvalidResourceHandle);
  int not_a_stream = 0;
  EXPECT_EQ(cudaStreamQuery(reinterpret_cast<cudaStream_t>(&not_a_stream)),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventQuery(reinterpret_cast<cudaEvent_t>(&not_a_stream)),
            cudaErrorInvalidResourceHandle);
  // A new stream never reuses the destroyed handle.
  cudaStream_t fresh = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&fresh));
  EXPECT_NE(fresh, s);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
  ASSERT_CUDA(cudaStreamDestroy(fresh));
}

TEST_F(StreamsEvents, NeverRecordedEventIsComplete) {
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaEventCreate(&e));
  EXPECT_CUDA(cudaEventQuery(e));
  EXPECT_CUDA(cudaEventSynchronize(e));
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, e, e), cudaErrorInvalidResourceHandle);
  ASSERT_CUDA(cudaEventDestroy(e));
}

TEST_F(StreamsEvents, HeldStreamKeepsEventsPending) {
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&s));
  ASSERT_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  ASSERT_EQ(cudasim_hold_stream(s), 0);
  ASSERT_CUDA(cudaEventRecord(e, s));
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not ready is not an error
  ASSERT_EQ(cudasim_release_stream(s), 0);
  EXPECT_CUDA(cudaEventQuery(e));
  EXPECT_CUDA(cudaStreamQuery(s));
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, e, e), cudaErrorInvalidResourceHandle);  // no timing
  ASSERT_CUDA(cudaEventDestroy(e));
  ASSERT_CUDA(cudaStreamDestroy(s));
}

TEST_F(StreamsEvents, SynchronizeBlocksUntilReleased) {
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&s));
  ASSERT_CUDA(cudaEventCreate(&e));
  ASSERT_EQ(cudasim_hold_stream(s), 0);
  ASSERT_CUDA(cudaEventRecord(e, s));
  std::atomic<bool> released{false};
  std::thread t(release_later, s, &released);
  ASSERT_CUDA(cudaEventSynchronize(e));
  EXPECT_TRUE(released.load());
  t.join();
  ASSERT_EQ(cudasim_hold_stream(s), 0);
  ASSERT_CUDA(cudaEventRecord(e, s));
  released = false;
  std::thread t2(release_later, s, &released);
  ASSERT_CUDA(cudaStreamSynchronize(s));
  EXPECT_TRUE(released.load());
  t2.join();
  ASSERT_CUDA(cudaEventDestroy(e));
  ASSERT_CUDA(cudaStreamDestroy(s));
}

TEST_F(StreamsEvents, WaitEventChains) {
  cudaStream_t a = nullptr;
  cudaStream_t b = nullptr;
  cudaStream_t c = nullptr;
  cudaEvent_t ea = nullptr;
  cudaEvent_t eb = nullptr;
  cudaEvent_t ec = nullptr;
  for (cudaStream_t* s : {&a, &b, &c})
    ASSERT_CUDA(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
  for (cudaEvent_t* e : {&ea, &eb, &ec}) ASSERT_CUDA(cudaEventCreate(e));
  ASSERT_EQ(cudasim_hold_stream(a), 0);
  ASSERT_CUDA(cudaEventRecord(ea, a));
  ASSERT_CUDA(cudaStreamWaitEvent(b, ea, 0));
  ASSERT_CUDA(cudaEventRecord(eb, b));
  ASSERT_CUDA(cudaStreamWaitEvent(c, eb, 0));
  ASSERT_CUDA(cudaEventRecord(ec, c));
  EXPECT_EQ(cudaEventQuery(eb), cudaErrorNotReady);
  EXPECT_EQ(cudaEventQuery(ec), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(b), cudaErrorNotReady);
  // Re-recording ea elsewhere does not free b: it waits for the recording it saw.
  ASSERT_CUDA(cudaEventRecord(ea, c));
  EXPECT_EQ(cudaEventQuery(eb), cudaErrorNotReady);
  ASSERT_EQ(cudasim_release_stream(a), 0);
  EXPECT_CUDA(cudaEventQuery(eb));
  EXPECT_CUDA(cudaEventQuery(ec));
  EXPECT_CUDA(cudaStreamQuery(c));
  EXPECT_EQ(cudaStreamWaitEvent(a, ea, 0x10), cudaErrorInvalidValue);
  for (cudaEvent_t e : {ea, eb, ec}) ASSERT_CUDA(cudaEventDestroy(e));
  for (cudaStream_t s : {a, b, c}) ASSERT_CUDA(cudaStreamDestroy(s));
}

TEST_F(StreamsEvents, WaitOnCompletedOrUnrecordedEventDoesNotBlock) {
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&s));
  ASSERT_CUDA(cudaEventCreate(&e));
  ASSERT_CUDA(cudaStreamWaitEvent(s, e, 0));
  EXPECT_CUDA(cudaStreamQuery(s));
  ASSERT_CUDA(cudaEventRecord(e, nullptr));
  ASSERT_CUDA(cudaStreamWaitEvent(s, e, 0));
  EXPECT_CUDA(cudaStreamQuery(s));
  ASSERT_CUDA(cudaEventDestroy(e));
  ASSERT_CUDA(cudaStreamDestroy(s));
}

TEST_F(StreamsEvents, LegacyStreamSynchronizesWithBlockingStreamsOnly) {
  cudaStream_t blocking = nullptr;
  cudaStream_t nonblocking = nullptr;
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&blocking));
  ASSERT_CUDA(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaEventCreate(&e));
  ASSERT_EQ(cudasim_hold_stream(nonblocking), 0);
  ASSERT_CUDA(cudaEventRecord(e, nonblocking));
  ASSERT_CUDA(cudaEventRecord(e, nullptr));
  EXPECT_CUDA(cudaEventQuery(e));  // the legacy stream ignores non-blocking streams
  ASSERT_EQ(cudasim_hold_stream(blocking), 0);
  ASSERT_CUDA(cudaEventRecord(e, blocking));
  ASSERT_CUDA(cudaEventRecord(e, nullptr));
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  ASSERT_EQ(cudasim_release_stream(blocking), 0);
  EXPECT_CUDA(cudaEventQuery(e));
  ASSERT_EQ(cudasim_release_stream(nonblocking), 0);
  ASSERT_CUDA(cudaEventDestroy(e));
  ASSERT_CUDA(cudaStreamDestroy(blocking));
  ASSERT_CUDA(cudaStreamDestroy(nonblocking));
}

TEST_F(StreamsEvents, ElapsedTime) {
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&s));
  ASSERT_CUDA(cudaEventCreate(&start));
  ASSERT_CUDA(cudaEventCreateWithFlags(&end, cudaEventBlockingSync));
  ASSERT_CUDA(cudaEventRecord(start, s));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_CUDA(cudaEventRecordWithFlags(end, s, 0));
  float ms = 0;
  ASSERT_CUDA(cudaEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 4.0f);
  EXPECT_LT(ms, 5000.0f);
  ASSERT_EQ(cudasim_hold_stream(s), 0);
  ASSERT_CUDA(cudaEventRecord(end, s));
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);
  ASSERT_EQ(cudasim_release_stream(s), 0);
  EXPECT_EQ(cudaEventElapsedTime(nullptr, start, end), cudaErrorInvalidValue);
  EXPECT_EQ(cudaEventRecordWithFlags(end, s, 0x40), cudaErrorInvalidValue);
  EXPECT_EQ(cudaEventCreateWithFlags(&start, 0x80), cudaErrorInvalidValue);
  EXPECT_EQ(cudaEventCreateWithFlags(&start, cudaEventInterprocess), cudaErrorInvalidValue);
  EXPECT_EQ(cudaEventCreate(nullptr), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaEventDestroy(start));
  ASSERT_CUDA(cudaEventDestroy(end));
  ASSERT_CUDA(cudaStreamDestroy(s));
}

TEST_F(StreamsEvents, DestroyingHeldStreamLetsItsWorkFinishOnRelease) {
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&s));
  ASSERT_CUDA(cudaEventCreate(&e));
  ASSERT_EQ(cudasim_hold_stream(s), 0);
  ASSERT_CUDA(cudaEventRecord(e, s));
  ASSERT_CUDA(cudaStreamDestroy(s));
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  ASSERT_EQ(cudasim_release_stream(s), 0);
  EXPECT_CUDA(cudaEventQuery(e));
  EXPECT_EQ(cudasim_release_stream(s), -1);  // gone now
  ASSERT_CUDA(cudaEventDestroy(e));
}

TEST_F(StreamsEvents, PerThreadDefaultStreamsAreDistinct) {
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaEventCreate(&e));
  ASSERT_EQ(cudasim_hold_stream(cudaStreamPerThread), 0);
  ASSERT_CUDA(cudaEventRecord(e, cudaStreamPerThread));
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  cudaError_t other = cudaErrorUnknown;
  std::thread([&] { other = cudaStreamQuery(cudaStreamPerThread); }).join();
  EXPECT_EQ(other, cudaSuccess);
  ASSERT_EQ(cudasim_release_stream(cudaStreamPerThread), 0);
  EXPECT_CUDA(cudaEventQuery(e));
  ASSERT_CUDA(cudaEventDestroy(e));
}

}  // namespace
