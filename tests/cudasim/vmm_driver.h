// The driver's VMM functions as the cudasim tests reach them: through
// cudaGetDriverEntryPointByVersion, as real programs do. Shared by vmm_test.cpp and
// call_counts_test.cpp.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "driver_function.h"

struct VmmDriver {
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
};

// Fails the calling test (fatally) when a function is missing.
inline void load_vmm_driver(VmmDriver* d) {
  load_driver_function("cuMemAddressReserve", &d->reserve);
  load_driver_function("cuMemAddressFree", &d->address_free);
  load_driver_function("cuMemCreate", &d->create);
  load_driver_function("cuMemRelease", &d->release);
  load_driver_function("cuMemMap", &d->map);
  load_driver_function("cuMemUnmap", &d->unmap);
  load_driver_function("cuMemSetAccess", &d->set_access);
  load_driver_function("cuMemGetAllocationGranularity", &d->granularity);
  load_driver_function("cuDeviceGetAttribute", &d->attribute);
}

// Pinned device memory on `device`.
inline CUmemAllocationProp device_memory(int device = 0) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

inline CUmemAccessDesc device_access(CUmemAccess_flags flags, int device = 0) {
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = device;
  a.flags = flags;
  return a;
}
