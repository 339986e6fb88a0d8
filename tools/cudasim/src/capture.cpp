// Stream capture queries. The simulator never captures (cudaStreamBeginCapture is not
// supported, see unsupported.cpp), so every valid stream reports
// cudaStreamCaptureStatusNone, but a stream a test marked with cudasim_set_stream_capturing
// (cudaStreamCaptureStatusActive); the thread's capture interaction mode is kept and exchanged
// as CUDA does (it starts as cudaStreamCaptureModeGlobal).
#include <cstring>

#include "state.h"

namespace cudasim {

namespace {

cudaStreamCaptureMode& thread_capture_mode() {
  thread_local cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  return mode;
}

// A valid stream's capture status (cudasim_set_stream_capturing), or the stream's error.
cudaError_t check_stream(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  StreamId id = 0;
  const cudaError_t e = resolve_stream(s, stream, DefaultStream::Legacy, &id);
  if (e != cudaSuccess) return e;
  const auto found = s.streams.find(id);
  *status = found != s.streams.end() && found->second.capturing ? cudaStreamCaptureStatusActive
                                                                : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

}  // namespace

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  if (pCaptureStatus == nullptr) return finish(cudaErrorInvalidValue);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (const cudaError_t e = check_stream(stream, &status); e != cudaSuccess) return finish(e);
  *pCaptureStatus = status;
  return cudaSuccess;
}

// Outside a capture only the status is meaningful; the other outputs are cleared.
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                     cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out,
                                     const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) {
  if (captureStatus_out == nullptr) return finish(cudaErrorInvalidValue);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (const cudaError_t e = check_stream(stream, &status); e != cudaSuccess) return finish(e);
  *captureStatus_out = status;
  if (id_out != nullptr) *id_out = 0;
  if (graph_out != nullptr) *graph_out = nullptr;
  if (dependencies_out != nullptr) *dependencies_out = nullptr;
  if (edgeData_out != nullptr) *edgeData_out = nullptr;
  if (numDependencies_out != nullptr) *numDependencies_out = 0;
  return cudaSuccess;
}

// The mode is read as an int first: callers may pass any value, and loading an invalid one
// through the enum type is undefined.
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr) return finish(cudaErrorInvalidValue);
  int wanted = 0;
  static_assert(sizeof(wanted) == sizeof(*mode));
  std::memcpy(&wanted, mode, sizeof(wanted));
  if (wanted != cudaStreamCaptureModeGlobal && wanted != cudaStreamCaptureModeThreadLocal &&
      wanted != cudaStreamCaptureModeRelaxed) {
    return finish(cudaErrorInvalidValue);
  }
  *mode = thread_capture_mode();
  thread_capture_mode() = static_cast<cudaStreamCaptureMode>(wanted);
  return cudaSuccess;
}

}  // extern "C"
