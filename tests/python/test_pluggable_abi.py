"""cudacache_malloc / cudacache_free driven exactly as PyTorch's CUDAPluggableAllocator does.

PyTorch loads the library with ctypes, takes the two symbols' addresses and calls them as
void* alloc(ssize_t size, int device, cudaStream_t stream) and
void free(void* ptr, ssize_t size, int device, cudaStream_t stream), passing back at free the
size, device and stream it recorded at allocation.
"""

import random
import unittest

import support
from support import MiB, round512
import cudacache


class PluggableAbiTest(support.AllocatorTestCase):
    def setUp(self):
        super().setUp()
        self.alloc_fn, self.free_fn = support.pluggable_functions()

    def test_size_zero_returns_null_and_free_of_null_is_a_no_op(self):
        before = cudacache.memory_stats(0)
        ptr = self.alloc_fn(0, 0, None)
        self.assertIsNone(ptr)  # ctypes turns a NULL void* into None
        self.free_fn(ptr, 0, 0, None)
        after = cudacache.memory_stats(0)
        self.assertEqual(after["allocation.all.allocated"], before["allocation.all.allocated"])
        self.assertEqual(after["reserved_bytes.all.current"], before["reserved_bytes.all.current"])
        self.assertEqual(after["num_ooms"], before["num_ooms"])

    def test_allocation_on_a_stream_is_freed_with_that_stream(self):
        stream = self.runtime.create_stream()
        try:
            base = cudacache.memory_allocated(0)
            ptr = self.alloc_fn(1000, 0, stream)
            self.assertIsNotNone(ptr)
            self.assertEqual(ptr % 512, 0)
            self.assertEqual(cudacache.memory_allocated(0), base + 1024)
            segment = next(s for s in cudacache.memory_snapshot()
                           if s["address"] <= ptr < s["address"] + s["total_size"])
            self.assertEqual(segment["stream"], stream)
            self.free_fn(ptr, 1000, 0, stream)
            self.assertEqual(cudacache.memory_allocated(0), base)
        finally:
            self.runtime.synchronize()
            self.runtime.destroy_stream(stream)

    def test_memory_holds_data(self):
        ptr = self.alloc_fn(4096, 0, None)
        try:
            payload = bytes(random.Random(7).getrandbits(8) for _ in range(4096))
            self.runtime.copy_to_device(ptr, payload)
            self.assertEqual(self.runtime.copy_from_device(ptr, 4096), payload)
        finally:
            self.free_fn(ptr, 4096, 0, None)

    def test_live_allocations_never_overlap(self):
        rng = random.Random(1234)
        sizes = [rng.choice([1, 100, 511, 512, 513, 4000, 70000, 1 * MiB + 1, 3 * MiB])
                 for _ in range(200)]
        base = cudacache.memory_allocated(0)
        live = [(self.alloc_fn(size, 0, None), size) for size in sizes]
        try:
            self.assertTrue(all(ptr is not None for ptr, _ in live))
            ranges = sorted((ptr, ptr + round512(size)) for ptr, size in live)
            for (_, end), (start, _) in zip(ranges, ranges[1:]):
                self.assertLessEqual(end, start)
            # memory_allocated counts whole blocks: 512-rounded, and a large-pool block is not
            # split when less than 1 MiB would remain (PyTorch's rule), so it can be larger.
            blocks = {b["address"]: b["size"] for s in cudacache.memory_snapshot()
                      for b in s["blocks"] if b["state"] == "active_allocated"}
            for ptr, size in live:
                self.assertGreaterEqual(blocks[ptr], round512(size))
                self.assertLessEqual(blocks[ptr], round512(size) + (MiB if size > MiB else 0))
            self.assertEqual(cudacache.memory_allocated(0),
                             base + sum(blocks[ptr] for ptr, _ in live))
        finally:
            rng.shuffle(live)
            for ptr, size in live:
                self.free_fn(ptr, size, 0, None)
        self.assertEqual(cudacache.memory_allocated(0), base)

    def test_each_device_has_its_own_memory(self):
        self.runtime.require_devices(2)
        base = [cudacache.memory_allocated(d) for d in (0, 1)]
        self.runtime.set_device(1)
        stream = self.runtime.create_stream()
        try:
            ptr1 = self.alloc_fn(3000, 1, stream)
            self.assertIsNotNone(ptr1)
            self.assertEqual(cudacache.memory_allocated(1), base[1] + 3072)
            self.assertEqual(cudacache.memory_allocated(0), base[0])
            self.assertEqual(cudacache.memory_allocated(None), base[1] + 3072)  # current: 1
            segments = [s for s in cudacache.memory_snapshot() if s["device"] == 1]
            self.assertTrue(any(s["address"] <= ptr1 < s["address"] + s["total_size"]
                                for s in segments))
            self.runtime.set_device(0)
            ptr0 = self.alloc_fn(3000, 0, None)
            self.assertEqual(cudacache.memory_allocated(0), base[0] + 3072)
            self.free_fn(ptr1, 3000, 1, stream)
            self.free_fn(ptr0, 3000, 0, None)
            self.assertEqual([cudacache.memory_allocated(d) for d in (0, 1)], base)
        finally:
            self.runtime.set_device(1)
            self.runtime.synchronize()
            self.runtime.destroy_stream(stream)
            self.runtime.set_device(0)

    def test_failure_returns_null_and_sets_the_error(self):
        before = cudacache.memory_stats(0)["num_ooms"]
        ptr = self.alloc_fn(1 << 40, 0, None)  # 1 TiB
        self.assertIsNone(ptr)
        self.assertEqual(cudacache.memory_stats(0)["num_ooms"], before + 1)
        self.assertIn("out of memory", cudacache.last_error().lower())

    def test_free_with_wrong_size_is_refused_and_reported(self):
        ptr = self.alloc_fn(2048, 0, None)
        base = cudacache.memory_allocated(0)
        error_before = cudacache.last_error()
        self.free_fn(ptr, 4096, 0, None)
        self.assertNotEqual(cudacache.last_error(), error_before)
        self.assertNotEqual(cudacache.last_error(), "")
        self.assertEqual(cudacache.memory_allocated(0), base)  # still allocated
        self.free_fn(ptr, 2048, 0, None)
        self.assertEqual(cudacache.memory_allocated(0), base - 2048)


if __name__ == "__main__":
    unittest.main()
