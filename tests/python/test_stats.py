"""Statistics, empty_cache, configuration and out-of-memory through the Python API."""

import collections
import os
import subprocess
import sys
import unittest

import support
from support import MiB, round512
import cudacache

POOLS = ("all", "small_pool", "large_pool")
METRICS = ("current", "peak", "allocated", "freed")
# torch.cuda.memory_stats() keys (PyTorch 2.x), see REFERENCE.md.
PYTORCH_KEYS = (
    [f"{name}.{pool}.{metric}"
     for name in ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
                  "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")
     for pool in POOLS for metric in METRICS]
    + [f"{name}.{metric}" for name in ("oversize_allocations", "oversize_segments")
       for metric in METRICS]
    + ["num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
       "num_device_free", "max_split_size"])


class StatsTest(support.AllocatorTestCase):
    def test_memory_stats_has_pytorchs_keys_sorted_like_pytorch(self):
        stats = cudacache.memory_stats(0)
        self.assertIsInstance(stats, collections.OrderedDict)
        missing = sorted(set(PYTORCH_KEYS) - set(stats))
        self.assertEqual(missing, [])
        self.assertEqual(list(stats), sorted(stats))
        self.assertTrue(all(isinstance(value, int) for value in stats.values()))

    def test_allocated_is_the_sum_of_512_rounded_sizes(self):
        base = cudacache.memory_allocated(0)
        sizes = [1, 511, 512, 513, 1000, 4096, 65537, 1 * MiB - 1]
        for size in sizes:
            self.alloc(size)
        self.assertEqual(cudacache.memory_allocated(0), base + sum(round512(s) for s in sizes))
        stats = cudacache.memory_stats(0)
        self.assertEqual(stats["allocated_bytes.all.current"], cudacache.memory_allocated(0))
        self.assertEqual(stats["requested_bytes.all.current"], sum(sizes))
        self.assertEqual(stats["allocation.all.current"], len(sizes))

    def test_small_and_large_pools_are_counted_apart(self):
        self.alloc(1000)
        self.alloc(3 * MiB)
        stats = cudacache.memory_stats(0)
        self.assertEqual(stats["allocated_bytes.small_pool.current"], 1024)
        self.assertEqual(stats["allocated_bytes.large_pool.current"], 3 * MiB)
        self.assertEqual(stats["reserved_bytes.small_pool.current"], 2 * MiB)
        self.assertEqual(stats["reserved_bytes.large_pool.current"], 20 * MiB)
        # cudacache's default policy maps pages into reserved ranges: reserved bytes, not
        # segments, as PyTorch's expandable segments count them.
        self.assertEqual(stats["segment.all.current"], 0)
        self.assertEqual(stats["allocation.small_pool.current"], 1)
        self.assertEqual(stats["allocation.large_pool.current"], 1)

    def test_reserved_grows_by_pages_under_the_default_policy(self):
        # A 2 MiB page in the small pool; 20 MiB pages in the large pool while the device has
        # room, as many as the request needs.
        for size, mapped in ((1000, 2 * MiB), (5 * MiB, 20 * MiB), (11 * MiB, 20 * MiB),
                             (21 * MiB + 1, 40 * MiB)):
            with self.subTest(size=size):
                self.assertEqual(cudacache.memory_reserved(0), 0)
                ptr = self.alloc(size)
                self.assertEqual(cudacache.memory_reserved(0), mapped)
                self.free(ptr)
                cudacache.empty_cache()

    def test_reserved_grows_by_pytorchs_segment_sizes_under_policy_pytorch(self):
        # kSmallBuffer 2 MiB; kLargeBuffer 20 MiB below 10 MiB; else rounded up to 2 MiB.
        result = run_fresh(
            "cudacache.configure('policy:pytorch')\n"
            "for size in (1000, 5 << 20, 11 << 20, (21 << 20) + 1):\n"
            "    ptr = cudacache.raw_alloc(size, 0)\n"
            "    print(cudacache.memory_reserved(0), cudacache.memory_stats(0)['segment.all.current'])\n"
            "    cudacache.raw_free(ptr)\n"
            "    cudacache.empty_cache()\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split("\n")[:4],
                         [f"{segment} 1" for segment in (2 * MiB, 20 * MiB, 12 * MiB, 22 * MiB)])

    def test_peaks_follow_and_reset_to_current(self):
        cudacache.reset_peak_memory_stats(0)  # forget earlier tests' peaks
        self.assertEqual(cudacache.max_memory_allocated(0), 0)
        a = self.alloc(8 * MiB)
        b = self.alloc(4 * MiB)
        self.free(b)
        self.assertEqual(cudacache.memory_allocated(0), 8 * MiB)
        self.assertEqual(cudacache.max_memory_allocated(0), 12 * MiB)
        self.assertGreaterEqual(cudacache.max_memory_reserved(0), cudacache.memory_reserved(0))
        cudacache.reset_peak_memory_stats(0)
        self.assertEqual(cudacache.max_memory_allocated(0), 8 * MiB)
        self.assertEqual(cudacache.max_memory_reserved(0), cudacache.memory_reserved(0))
        stats = cudacache.memory_stats(0)
        self.assertEqual(stats["allocated_bytes.all.peak"], 8 * MiB)
        self.assertEqual(stats["allocation.all.peak"], 1)
        self.free(a)

    def test_reset_accumulated_zeroes_allocated_and_freed_only(self):
        ptr = self.alloc(4096)
        self.free(self.alloc(1024))
        stats = cudacache.memory_stats(0)
        self.assertGreaterEqual(stats["allocation.all.allocated"], 2)
        self.assertGreaterEqual(stats["allocation.all.freed"], 1)
        cudacache.reset_accumulated_memory_stats(0)
        stats = cudacache.memory_stats(0)
        self.assertEqual(stats["allocation.all.allocated"], 0)
        self.assertEqual(stats["allocation.all.freed"], 0)
        self.assertEqual(stats["allocated_bytes.all.allocated"], 0)
        self.assertEqual(stats["num_ooms"], 0)
        self.assertEqual(stats["allocated_bytes.all.current"], 4096)
        self.free(ptr)
        stats = cudacache.memory_stats(0)
        self.assertEqual(stats["allocation.all.freed"], 1)
        self.assertEqual(stats["allocated_bytes.all.freed"], 4096)

    def test_empty_cache_returns_unused_segments_only(self):
        kept = self.alloc(1000)  # keeps its 2 MiB small segment
        self.free(self.alloc(5 * MiB))  # its 20 MiB segment becomes unused
        self.assertEqual(cudacache.memory_reserved(0), 22 * MiB)
        frees_before = cudacache.memory_stats(0)["num_device_free"]
        cudacache.empty_cache()
        self.assertEqual(cudacache.memory_reserved(0), 2 * MiB)
        self.assertEqual(cudacache.memory_stats(0)["num_device_free"], frees_before + 1)
        self.assertEqual(cudacache.memory_allocated(0), 1024)
        self.free(kept)
        cudacache.empty_cache()
        self.assertEqual(cudacache.memory_reserved(0), 0)

    def test_device_argument_forms_name_the_same_device(self):
        class FakeTorchDevice:
            type, index = "cuda", 0

        self.alloc(3000)
        expected = cudacache.memory_allocated(0)
        self.assertEqual(expected, 3072)
        for device in (None, "cuda", "cuda:0", FakeTorchDevice()):
            with self.subTest(device=device):
                self.assertEqual(cudacache.memory_allocated(device), expected)
                self.assertEqual(cudacache.memory_stats(device)["allocated_bytes.all.current"],
                                 expected)

    # Found in review: a bad device gave a silent 0, an index of 2**31 or more wrapped to
    # device 0 in ctypes, and "cuda:1_0" was device 10.
    def test_bad_devices_raise_instead_of_answering_for_another(self):
        with self.assertRaises(cudacache.CudacacheError) as caught:
            cudacache.memory_allocated(99)
        self.assertIn("invalid device ordinal 99", str(caught.exception))
        for function in (cudacache.memory_reserved, cudacache.max_memory_allocated,
                         cudacache.max_memory_reserved):
            with self.subTest(function=function.__name__):
                with self.assertRaises(cudacache.CudacacheError):
                    function(99)
        for device in (2**31, 2**32, -1, "cuda:1_0", "cuda:+0", "cuda: 0 ", "cuda:abc"):
            with self.subTest(device=device):
                with self.assertRaises(ValueError):
                    cudacache.memory_allocated(device)
        with self.assertRaises(ValueError):
            cudacache.raw_alloc(10, device=2**32)
        self.assertEqual(cudacache.memory_allocated(0), 0)  # a real 0 is still an answer

    def test_sizes_and_streams_out_of_range_raise_instead_of_wrapping(self):
        for size in (2**64, 2**63, -1):
            with self.subTest(size=size):
                with self.assertRaises(ValueError) as caught:
                    cudacache.raw_alloc(size, 0)
                self.assertIn(str(size), str(caught.exception))
        with self.assertRaises(TypeError):
            cudacache.raw_alloc(1.5, 0)
        with self.assertRaises(TypeError):
            cudacache.raw_alloc(True, 0)

        class Index:  # numpy integers are ints this way
            def __index__(self):
                return 2048

        cudacache.raw_free(cudacache.raw_alloc(Index(), 0))
        ptr = self.alloc(4096)
        with self.assertRaises(ValueError):
            cudacache.record_stream(ptr, 2**64)
        self.assertEqual(cudacache.memory_allocated(0), 4096)

    def test_record_stream_may_leave_foreign_memory_alone(self):
        with self.assertRaises(cudacache.CudacacheError):
            cudacache.record_stream(0x1234, 0)
        self.assertIsNone(cudacache.record_stream(0x1234, 0, ignore_foreign=True))

    def test_out_of_memory_raises_the_typed_error(self):
        before = cudacache.memory_stats(0)["num_ooms"]
        with self.assertRaises(cudacache.OutOfMemoryError) as caught:
            cudacache.raw_alloc(1 << 40, 0)
        self.assertEqual(caught.exception.size, 1 << 40)
        self.assertEqual(caught.exception.device, 0)
        self.assertIn("out of memory", str(caught.exception).lower())
        self.assertEqual(cudacache.memory_stats(0)["num_ooms"], before + 1)
        self.assertEqual(self.alloc(512) % 512, 0)  # and the allocator still works

    def test_raw_free_of_an_unknown_pointer_raises(self):
        with self.assertRaises(cudacache.CudacacheError) as caught:
            cudacache.raw_free(0x1234)
        self.assertIn("CUDACACHE_UNKNOWN_POINTER", str(caught.exception))


def run_fresh(code):
    """Runs code in a new interpreter (nothing allocated yet) with the test environment."""
    env = dict(os.environ, PYTHONPATH=str(support.PACKAGE_ROOT))
    return subprocess.run([sys.executable, "-c", "import cudacache\n" + code], env=env,
                          capture_output=True, text=True, timeout=60)


class ConfigureTest(unittest.TestCase):
    def setUp(self):
        support.library()

    def test_valid_configuration_before_first_use_is_applied(self):
        result = run_fresh(
            "cudacache.configure('max_split_size_mb:64')\n"
            "print(cudacache.memory_stats(0)['max_split_size'])\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(int(result.stdout.split()[-1]), 64 * 1024 * 1024)

    def test_unknown_key_is_an_error_that_lists_the_valid_keys(self):
        result = run_fresh(
            "try:\n"
            "    cudacache.configure('no_such_key:1')\n"
            "except cudacache.ConfigurationError as error:\n"
            "    print(isinstance(error, ValueError), error)\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stdout.startswith("True "), result.stdout)
        self.assertIn("no_such_key", result.stdout)
        self.assertIn("max_split_size_mb", result.stdout)

    def test_configure_after_the_first_allocation_is_refused(self):
        result = run_fresh(
            "cudacache.raw_free(cudacache.raw_alloc(4096, 0))\n"
            "try:\n"
            "    cudacache.configure('max_split_size_mb:64')\n"
            "except cudacache.ConfigurationError as error:\n"
            "    print('refused:', error)\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("refused:", result.stdout)

    def test_a_nul_in_the_configuration_is_refused(self):
        with self.assertRaises(cudacache.ConfigurationError) as caught:
            cudacache.configure("max_split_size_mb:128\0junk")
        self.assertIn("NUL", str(caught.exception))

    def test_config_help_documents_every_option(self):
        help_text = cudacache.config_help()
        for key in ("max_split_size_mb", "roundup_power2_divisions",
                    "garbage_collection_threshold", "per_process_memory_fraction",
                    "expandable_segments"):
            self.assertIn(key, help_text)


if __name__ == "__main__":
    unittest.main()
