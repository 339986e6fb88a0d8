"""Shared helpers of the Python tests: the library, the CUDA runtime under it, cudasim controls.

Under CTest, CUDACACHE_LIBRARY names the built library and LD_LIBRARY_PATH puts cudasim's
libcudart.so.13 first. Run by hand without a built library, tests that need it skip.
"""

import ctypes
import os
import pathlib
import sys
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE_ROOT = REPO / "tools" / "python"
if str(PACKAGE_ROOT) not in sys.path:
    sys.path.insert(0, str(PACKAGE_ROOT))

import cudacache  # noqa: E402
from cudacache import _library  # noqa: E402

KiB = 1024
MiB = 1024 * KiB

# PyTorch's pluggable ABI, as torch.cuda.memory.CUDAPluggableAllocator calls it.
ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)
FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)


def round512(size):
    return max(512, (size + 511) // 512 * 512)


def library():
    """The loaded cudacache Library; skips the test when none is built (unless CTest set one)."""
    try:
        return _library.get()
    except cudacache.LibraryNotFoundError as error:
        if os.environ.get(_library.ENV_LIBRARY):
            raise
        reason = str(error).splitlines()[0]
        raise unittest.SkipTest(f"libcudacache.so not built: {reason}") from None


def pluggable_functions():
    """(alloc, free) as PyTorch gets them: raw addresses of the two symbols, cast to the ABI."""
    cdll = library().cdll
    alloc_address = ctypes.cast(cdll.cudacache_malloc, ctypes.c_void_p).value
    free_address = ctypes.cast(cdll.cudacache_free, ctypes.c_void_p).value
    return ALLOC_FN(alloc_address), FREE_FN(free_address)


class Runtime:
    """The CUDA runtime libcudacache runs on (cudasim here, NVIDIA's on a GPU machine)."""

    def __init__(self):
        self.cudart = library().cudart()

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what} failed with CUDA error {status}")

    def device_count(self):
        count = ctypes.c_int(0)
        self.check(self.cudart.cudaGetDeviceCount(ctypes.byref(count)), "cudaGetDeviceCount")
        return count.value

    def set_device(self, device):
        self.check(self.cudart.cudaSetDevice(device), "cudaSetDevice")

    def create_stream(self):
        stream = ctypes.c_void_p()
        self.check(self.cudart.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
        return stream.value

    def destroy_stream(self, stream):
        self.check(self.cudart.cudaStreamDestroy(ctypes.c_void_p(stream)), "cudaStreamDestroy")

    def synchronize(self):
        self.check(self.cudart.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    def copy_to_device(self, address, data):
        self.check(self.cudart.cudaMemcpy(ctypes.c_void_p(address), data,
                                          ctypes.c_size_t(len(data)), 1), "cudaMemcpy H2D")

    def copy_from_device(self, address, size):
        buffer = ctypes.create_string_buffer(size)
        self.check(self.cudart.cudaMemcpy(buffer, ctypes.c_void_p(address),
                                          ctypes.c_size_t(size), 2), "cudaMemcpy D2H")
        return buffer.raw

    def cudasim(self):
        """The cudasim test controls, or None on a real runtime."""
        return self.cudart if hasattr(self.cudart, "cudasim_set_capacity") else None

    def require_cudasim(self):
        sim = self.cudasim()
        if sim is None:
            raise unittest.SkipTest("needs cudasim's test controls (not on a real runtime)")
        sim.cudasim_set_capacity.argtypes = [ctypes.c_int, ctypes.c_size_t]
        sim.cudasim_get_capacity.argtypes = [ctypes.c_int]
        sim.cudasim_get_capacity.restype = ctypes.c_size_t
        return sim

    def require_devices(self, count):
        if self.device_count() < count:
            raise unittest.SkipTest(f"needs {count} devices (CUDASIM_DEVICES={count})")


class AllocatorTestCase(unittest.TestCase):
    """Starts each test on device 0 with an empty cache; frees what the test allocated."""

    def setUp(self):
        self.lib = library()
        self.runtime = Runtime()
        self.runtime.set_device(0)
        cudacache.empty_cache()
        self._live = []
        self.assertEqual(cudacache.memory_allocated(0), 0, "an earlier test leaked memory")

    def tearDown(self):
        for ptr in reversed(self._live):
            cudacache.raw_free(ptr)
        cudacache.empty_cache()

    def alloc(self, size, device=0, stream=0):
        """raw_alloc that the test's tearDown frees unless the test does."""
        ptr = cudacache.raw_alloc(size, device, stream)
        self._live.append(ptr)
        return ptr

    def free(self, ptr):
        self._live.remove(ptr)
        cudacache.raw_free(ptr)
