// Peer access and copies between devices. All simulated devices share the host's memory, so
// every pair can access each other (cudaDeviceCanAccessPeer, devices.cpp); enabling access is
// bookkeeping with CUDA's errors, and a peer copy is an ordinary copy on the stream.
#include "api.h"

namespace cudasim {

namespace {

uint64_t peer_bit(int peer) { return uint64_t{1} << peer; }

}  // namespace

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  if (flags != 0) return finish(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  const int device = current_device();
  if (!valid_device(s, peerDevice)) return finish(cudaErrorInvalidDevice);
  if (peerDevice == device) return finish(cudaErrorInvalidDevice);
  uint64_t& enabled = s.devices[static_cast<size_t>(device)].peer_access;
  if ((enabled & peer_bit(peerDevice)) != 0) return finish(cudaErrorPeerAccessAlreadyEnabled);
  enabled |= peer_bit(peerDevice);
  return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!valid_device(s, peerDevice)) return finish(cudaErrorInvalidDevice);
  uint64_t& enabled = s.devices[static_cast<size_t>(current_device())].peer_access;
  if ((enabled & peer_bit(peerDevice)) == 0) return finish(cudaErrorPeerAccessNotEnabled);
  enabled &= ~peer_bit(peerDevice);
  return cudaSuccess;
}

// Both ranges must be device memory (checked when the copy is enqueued, as for
// cudaMemcpyDeviceToDevice); peer access need not be enabled, as in CUDA.
cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice,
                                size_t count, cudaStream_t stream) {
  if (!valid_device(state(), dstDevice) || !valid_device(state(), srcDevice)) {
    return finish(cudaErrorInvalidDevice);
  }
  return memcpy_async(dst, src, count, cudaMemcpyDeviceToDevice, stream, DefaultStream::Legacy,
                      false);
}

cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count) {
  if (!valid_device(state(), dstDevice) || !valid_device(state(), srcDevice)) {
    return finish(cudaErrorInvalidDevice);
  }
  return memcpy_async(dst, src, count, cudaMemcpyDeviceToDevice, nullptr, DefaultStream::Legacy,
                      true);
}

}  // extern "C"
