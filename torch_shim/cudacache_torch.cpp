// libcudacache_torch: see cudacache_torch.h.
//
// How an exception from the alloc function reaches Python (torch 2.15):
// CUDAPluggableAllocator::malloc calls alloc_fn_ (a std::function wrapping our function
// pointer) before it records anything, and allocate() / raw_alloc() call malloc() directly, so
// an exception thrown here leaves the pluggable allocator unchanged and unwinds through ATen to
// the Python binding, whose HANDLE_TH_ERRORS turns c10::OutOfMemoryError into
// torch.OutOfMemoryError (and any other c10::Error into RuntimeError) with
// what_without_backtrace() as the message.

#include "cudacache_torch.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <cudacache/cudacache.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <exception>
#include <functional>
#include <string>

#ifndef CUDACACHE_TORCH_BUILT_FOR
#error "CUDACACHE_TORCH_BUILT_FOR (the PyTorch version) must be defined by the build"
#endif

namespace {

using Pluggable = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
// What torch.cuda.memory.CUDAPluggableAllocator wraps (torch/csrc/cuda/Module.cpp).
using MallocFunction = void* (*)(size_t, int, cudaStream_t);

thread_local std::string last_error;

std::string cudacache_message(const char* fallback) {
  const char* message = cudacache_last_error();
  return (message != nullptr && message[0] != '\0') ? std::string(message) : std::string(fallback);
}

// alloc_fn_ is protected: read it through a derived class's pointer to member.
struct AllocFunctionReader : Pluggable {
  static const std::function<void*(size_t, int, cudaStream_t)>& of(const Pluggable& allocator) {
    return allocator.*(&AllocFunctionReader::alloc_fn_);
  }
};

void reset_hook() { cudacache_empty_cache(); }

void record_stream_hook(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return;  // an empty storage (PyTorch's allocator ignores it too)
  const cudacache_status status = cudacache_record_stream(ptr, stream);
  // Not cudacache's (a MemPool of another allocator): PyTorch's allocator ignores those too.
  if (status != CUDACACHE_OK && status != CUDACACHE_UNKNOWN_POINTER) {
    throw c10::Error(c10::SourceLocation{__func__, __FILE__, __LINE__},
                     cudacache_message("cudacache: record_stream failed"));
  }
}

}  // namespace

extern "C" {

void* cudacache_torch_malloc(ssize_t size, int device, cudaStream_t stream) {
  if (size < 0) {
    throw c10::ValueError(c10::SourceLocation{__func__, __FILE__, __LINE__},
                          "cudacache: negative allocation size " + std::to_string(size));
  }
  void* ptr = nullptr;
  const cudacache_status status =
      cudacache_allocate(&ptr, static_cast<size_t>(size), device, stream);
  if (status == CUDACACHE_OK) return ptr;
  std::string message = cudacache_message(cudacache_status_string(status));
  if (status == CUDACACHE_OUT_OF_MEMORY) {
    throw c10::OutOfMemoryError(c10::SourceLocation{__func__, __FILE__, __LINE__},
                                std::move(message));
  }
  throw c10::Error(c10::SourceLocation{__func__, __FILE__, __LINE__}, std::move(message));
}

void cudacache_torch_free(void* ptr, ssize_t size, int device, cudaStream_t stream) {
  // Never throws: PyTorch frees from deleters. cudacache logs and records any failure.
  cudacache_free(ptr, size, device, stream);
}

int cudacache_torch_register_hooks(void) {
  try {
    c10::cuda::CUDACachingAllocator::CUDAAllocator* current =
        c10::cuda::CUDACachingAllocator::get();
    auto* pluggable = dynamic_cast<Pluggable*>(current);
    if (pluggable == nullptr) {
      last_error = "cudacache_torch: PyTorch's current CUDA allocator is \"" +
                   (current != nullptr ? current->name() : std::string("none")) +
                   "\", not a CUDAPluggableAllocator (call "
                   "torch.cuda.memory.change_current_allocator first)";
      return -1;
    }
    const auto& alloc = AllocFunctionReader::of(*pluggable);
    const MallocFunction* target = alloc.target<MallocFunction>();
    const auto ours = reinterpret_cast<MallocFunction>(&cudacache_torch_malloc);
    const auto plain = reinterpret_cast<MallocFunction>(&cudacache_malloc);
    if (target == nullptr || (*target != ours && *target != plain)) {
      last_error =
          "cudacache_torch: the current CUDAPluggableAllocator does not allocate with "
          "cudacache_torch_malloc or cudacache_malloc of this process's libcudacache";
      return -1;
    }
    pluggable->set_reset_fn(&reset_hook);
    pluggable->set_record_stream_fn(&record_stream_hook);
    last_error.clear();
    return 0;
  } catch (const std::exception& error) {
    last_error = std::string("cudacache_torch: ") + error.what();
    return -1;
  }
}

const char* cudacache_torch_last_error(void) { return last_error.c_str(); }

const char* cudacache_torch_built_for(void) { return CUDACACHE_TORCH_BUILT_FOR; }

const void* cudacache_torch_backend(void) {
  return reinterpret_cast<const void*>(&cudacache_malloc);
}

}  // extern "C"
