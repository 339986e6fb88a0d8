// Runtime functions that PyTorch's libraries import but that the simulator cannot provide
// (CUDA graphs and stream capture, kernels and modules, IPC, managed memory,
// memory pools, occupancy, profiler). They exist so that those libraries load (Python loads
// them with RTLD_NOW, which resolves every import up front); each call fails loudly instead:
// it prints "cudasim: NAME is not supported" to stderr and returns cudaErrorNotSupported.
// Likewise the driver functions that PyTorch's c10::cuda::DriverAPI insists on finding by name
// (it asserts on a missing one) but never calls for plain allocation: shareable handles (IPC),
// multicast, green contexts; they return CUDA_ERROR_NOT_SUPPORTED.
// A function implemented for real belongs in the file of its concern, not here.
//
// Signatures are those of the toolkit's cuda_runtime_api.h / cuda_profiler_api.h / cuda.h,
// which the compiler checks against these definitions.
#include <cuda_profiler_api.h>

#include <cstdio>

#include "state.h"

namespace {

cudaError_t not_supported(const char* name) {
  std::fprintf(stderr, "cudasim: %s is not supported (the simulator cannot run it)\n", name);
  return cudasim::finish(cudaErrorNotSupported);
}

CUresult driver_not_supported(const char* name) {
  std::fprintf(stderr, "cudasim: %s is not supported (the simulator cannot run it)\n", name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

extern "C" {

// Driver functions (reached by name: entry_points.cpp).

CUresult cuMemExportToShareableHandle(void*, CUmemGenericAllocationHandle,
                                      CUmemAllocationHandleType, unsigned long long) {
  return driver_not_supported("cuMemExportToShareableHandle");
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle*, void*,
                                        CUmemAllocationHandleType) {
  return driver_not_supported("cuMemImportFromShareableHandle");
}

CUresult cuMulticastCreate(CUmemGenericAllocationHandle*, const CUmulticastObjectProp*) {
  return driver_not_supported("cuMulticastCreate");
}

CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle, CUdevice) {
  return driver_not_supported("cuMulticastAddDevice");
}

CUresult cuMulticastBindMem(CUmemGenericAllocationHandle, size_t, CUmemGenericAllocationHandle,
                            size_t, size_t, unsigned long long) {
  return driver_not_supported("cuMulticastBindMem");
}

CUresult cuMulticastUnbind(CUmemGenericAllocationHandle, CUdevice, size_t, size_t) {
  return driver_not_supported("cuMulticastUnbind");
}

CUresult cuDeviceGetDevResource(CUdevice, CUdevResource*, CUdevResourceType) {
  return driver_not_supported("cuDeviceGetDevResource");
}

CUresult cuDevSmResourceSplitByCount(CUdevResource*, unsigned int*, const CUdevResource*,
                                     CUdevResource*, unsigned int, unsigned int) {
  return driver_not_supported("cuDevSmResourceSplitByCount");
}

CUresult cuDevResourceGenerateDesc(CUdevResourceDesc*, CUdevResource*, unsigned int) {
  return driver_not_supported("cuDevResourceGenerateDesc");
}

CUresult cuGreenCtxCreate(CUgreenCtx*, CUdevResourceDesc, CUdevice, unsigned int) {
  return driver_not_supported("cuGreenCtxCreate");
}

CUresult cuGreenCtxDestroy(CUgreenCtx) { return driver_not_supported("cuGreenCtxDestroy"); }

CUresult cuGreenCtxStreamCreate(CUstream*, CUgreenCtx, unsigned int, int) {
  return driver_not_supported("cuGreenCtxStreamCreate");
}

CUresult cuCtxFromGreenCtx(CUcontext*, CUgreenCtx) {
  return driver_not_supported("cuCtxFromGreenCtx");
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle*, void*) {
  return driver_not_supported("cuMemRetainAllocationHandle");
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp*,
                                                CUmemGenericAllocationHandle) {
  return driver_not_supported("cuMemGetAllocationPropertiesFromHandle");
}

CUresult cuMemsetD32Async(CUdeviceptr, unsigned int, size_t, CUstream) {
  return driver_not_supported("cuMemsetD32Async");
}

CUresult cuStreamWriteValue32(CUstream, CUdeviceptr, cuuint32_t, unsigned int) {
  return driver_not_supported("cuStreamWriteValue32");
}

// Runtime functions.

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t*, int) {
  return not_supported("cudaDeviceGetDefaultMemPool");
}

cudaError_t cudaDeviceGetGraphMemAttribute(int, enum cudaGraphMemAttributeType, void*) {
  return not_supported("cudaDeviceGetGraphMemAttribute");
}

cudaError_t cudaDeviceGetPCIBusId(char*, int, int) {
  return not_supported("cudaDeviceGetPCIBusId");
}

cudaError_t cudaDeviceSetGraphMemAttribute(int, enum cudaGraphMemAttributeType, void*) {
  return not_supported("cudaDeviceSetGraphMemAttribute");
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes*, const void*) {
  return not_supported("cudaFuncGetAttributes");
}

cudaError_t cudaFuncSetAttribute(const void*, enum cudaFuncAttribute, int) {
  return not_supported("cudaFuncSetAttribute");
}

cudaError_t cudaGetSymbolAddress(void**, const void*) {
  return not_supported("cudaGetSymbolAddress");
}

cudaError_t cudaGraphAddNode(cudaGraphNode_t*, cudaGraph_t, const cudaGraphNode_t*,
                             const cudaGraphEdgeData*, size_t, struct cudaGraphNodeParams*) {
  return not_supported("cudaGraphAddNode");
}

cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle*, cudaGraph_t, unsigned int,
                                             unsigned int) {
  return not_supported("cudaGraphConditionalHandleCreate");
}

cudaError_t cudaGraphDestroy(cudaGraph_t) { return not_supported("cudaGraphDestroy"); }

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return not_supported("cudaGraphExecDestroy"); }

cudaError_t cudaGraphGetNodes(cudaGraph_t, cudaGraphNode_t*, size_t*) {
  return not_supported("cudaGraphGetNodes");
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t*, cudaGraph_t, unsigned long long) {
  return not_supported("cudaGraphInstantiate");
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t*, cudaGraph_t, unsigned long long) {
  return not_supported("cudaGraphInstantiateWithFlags");
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) {
  return not_supported("cudaGraphLaunch");
}

cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t, cudaGraphNode_t*, cudaGraphEdgeData*,
                                         size_t*) {
  return not_supported("cudaGraphNodeGetDependencies");
}

cudaError_t cudaGraphRetainUserObject(cudaGraph_t, cudaUserObject_t, unsigned int, unsigned int) {
  return not_supported("cudaGraphRetainUserObject");
}

cudaError_t cudaIpcCloseMemHandle(void*) { return not_supported("cudaIpcCloseMemHandle"); }

cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t*, cudaEvent_t) {
  return not_supported("cudaIpcGetEventHandle");
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t*, void*) {
  return not_supported("cudaIpcGetMemHandle");
}

cudaError_t cudaIpcOpenEventHandle(cudaEvent_t*, cudaIpcEventHandle_t) {
  return not_supported("cudaIpcOpenEventHandle");
}

cudaError_t cudaIpcOpenMemHandle(void**, cudaIpcMemHandle_t, unsigned int) {
  return not_supported("cudaIpcOpenMemHandle");
}

cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t, enum cudaFuncAttribute, int, int) {
  return not_supported("cudaKernelSetAttributeForDevice");
}

cudaError_t cudaLaunchCooperativeKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  return not_supported("cudaLaunchCooperativeKernel");
}

cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t, void*) {
  return not_supported("cudaLaunchHostFunc");
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t*, const void*, void**) {
  return not_supported("cudaLaunchKernelExC");
}

cudaError_t cudaLibraryGetGlobal(void**, size_t*, cudaLibrary_t, const char*) {
  return not_supported("cudaLibraryGetGlobal");
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t*, cudaLibrary_t, const char*) {
  return not_supported("cudaLibraryGetKernel");
}

cudaError_t cudaLibraryGetKernelCount(unsigned int*, cudaLibrary_t) {
  return not_supported("cudaLibraryGetKernelCount");
}

cudaError_t cudaLibraryGetManaged(void**, size_t*, cudaLibrary_t, const char*) {
  return not_supported("cudaLibraryGetManaged");
}

cudaError_t cudaLibraryGetUnifiedFunction(void**, cudaLibrary_t, const char*) {
  return not_supported("cudaLibraryGetUnifiedFunction");
}

cudaError_t cudaLibraryLoadData(cudaLibrary_t*, const void*, enum cudaJitOption*, void**,
                                unsigned int, enum cudaLibraryOption*, void**, unsigned int) {
  return not_supported("cudaLibraryLoadData");
}

cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t*, const char*, enum cudaJitOption*, void**,
                                    unsigned int, enum cudaLibraryOption*, void**, unsigned int) {
  return not_supported("cudaLibraryLoadFromFile");
}

cudaError_t cudaLibraryUnload(cudaLibrary_t) { return not_supported("cudaLibraryUnload"); }

cudaError_t cudaMallocManaged(void**, size_t, unsigned int) {
  return not_supported("cudaMallocManaged");
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, enum cudaMemPoolAttr, void*) {
  return not_supported("cudaMemPoolGetAttribute");
}

cudaError_t cudaMemPoolSetAccess(cudaMemPool_t, const struct cudaMemAccessDesc*, size_t) {
  return not_supported("cudaMemPoolSetAccess");
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, enum cudaMemPoolAttr, void*) {
  return not_supported("cudaMemPoolSetAttribute");
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) { return not_supported("cudaMemPoolTrimTo"); }

cudaError_t cudaMemcpy2DAsync(void*, size_t, const void*, size_t, size_t, size_t,
                              enum cudaMemcpyKind, cudaStream_t) {
  return not_supported("cudaMemcpy2DAsync");
}

cudaError_t cudaMemcpyToSymbol(const void*, const void*, size_t, size_t, enum cudaMemcpyKind) {
  return not_supported("cudaMemcpyToSymbol");
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int*, const void*, int, size_t) {
  return not_supported("cudaOccupancyMaxActiveBlocksPerMultiprocessor");
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int*, const void*, int, size_t,
                                                                   unsigned int) {
  return not_supported("cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
}

cudaError_t cudaProfilerStart() { return not_supported("cudaProfilerStart"); }

cudaError_t cudaProfilerStop() { return not_supported("cudaProfilerStop"); }

cudaError_t cudaStreamAddCallback(cudaStream_t, cudaStreamCallback_t, void*, unsigned int) {
  return not_supported("cudaStreamAddCallback");
}

cudaError_t cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode) {
  return not_supported("cudaStreamBeginCapture");
}

cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t, cudaGraph_t, const cudaGraphNode_t*,
                                          const cudaGraphEdgeData*, size_t,
                                          enum cudaStreamCaptureMode) {
  return not_supported("cudaStreamBeginCaptureToGraph");
}

cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t*) {
  return not_supported("cudaStreamEndCapture");
}

cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t, cudaGraphNode_t*,
                                                const cudaGraphEdgeData*, size_t, unsigned int) {
  return not_supported("cudaStreamUpdateCaptureDependencies");
}

cudaError_t cudaUserObjectCreate(cudaUserObject_t*, void*, cudaHostFn_t, unsigned int,
                                 unsigned int) {
  return not_supported("cudaUserObjectCreate");
}

cudaError_t cudaUserObjectRelease(cudaUserObject_t, unsigned int) {
  return not_supported("cudaUserObjectRelease");
}

}  // extern "C"
