// A driver function as tests reach it: through cudaGetDriverEntryPointByVersion, as real programs
// do (nothing links libcuda). Fails the calling test (fatally) when it is missing; wrap the call
// in ASSERT_NO_FATAL_FAILURE.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

// `version`: the CUDA version whose signature the caller expects (cuCtxCreate's four-argument
// form is found from 12.5 on; the VMM functions' from 10.2).
template <typename F>
void load_driver_function(const char* name, F* out, unsigned int version = 12000) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  ASSERT_EQ(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &status),
            cudaSuccess);
  ASSERT_EQ(status, cudaDriverEntryPointSuccess) << name;
  ASSERT_NE(fn, nullptr) << name;
  *out = reinterpret_cast<F>(fn);
}
