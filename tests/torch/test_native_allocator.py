"""PyTorch's own CUDA caching allocator running on cudasim: the allocator-facing surface of
torch.cuda works there (devices, tensors, streams, record_stream, statistics, snapshots,
empty_cache, out-of-memory, expandable segments); kernels do not."""

import unittest

import torchsim
from torchsim import GiB, MiB, run_scenario
from torchsim import assert_record_stream_delayed_reuse, record_stream_scenario


class NativeAllocatorOnCudasim(unittest.TestCase):
    def test_devices(self):
        r = run_scenario("""
            props = torch.cuda.get_device_properties(1)
            report({"available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
                    "name": torch.cuda.get_device_name(0), "total": props.total_memory,
                    "capability": list(torch.cuda.get_device_capability(0))})
            """, devices=2, capacity="24GiB")
        self.assertTrue(r["available"])
        self.assertEqual(r["count"], 2)
        self.assertEqual(r["name"], "cudasim")
        self.assertEqual(r["total"], 24 * GiB)
        self.assertEqual(r["capability"], [9, 0])

    def test_empty_del_and_empty_cache(self):
        r = run_scenario("""
            x = torch.empty(1000, device="cuda")           # 4000 B -> one 4096 B block
            after_alloc = [torch.cuda.memory_allocated(), torch.cuda.memory_reserved(),
                           cudasim_counters()["in_use_bytes"]]
            big = torch.empty(50 * 2**20, dtype=torch.uint8, device="cuda")
            with_big = [torch.cuda.memory_allocated(), torch.cuda.memory_reserved()]
            del x, big
            after_del = [torch.cuda.memory_allocated(), torch.cuda.memory_reserved()]
            torch.cuda.empty_cache()
            after_empty = [torch.cuda.memory_reserved(), cudasim_counters()["in_use_bytes"]]
            stats = torch.cuda.memory_stats()
            report({"after_alloc": after_alloc, "with_big": with_big, "after_del": after_del,
                    "after_empty": after_empty, "peak": torch.cuda.max_memory_allocated(),
                    "device_allocs": stats["num_device_alloc"],
                    "device_frees": stats["num_device_free"],
                    "counters": cudasim_counters()})
            """, controls=True)
        self.assertEqual(r["after_alloc"], [4096, 2 * MiB, 2 * MiB])  # small pool: 2 MiB segment
        self.assertEqual(r["with_big"], [4096 + 50 * MiB, 2 * MiB + 50 * MiB])  # 2 MiB rounding
        self.assertEqual(r["after_del"], [0, 52 * MiB])  # cached, not returned
        self.assertEqual(r["after_empty"], [0, 0])
        self.assertEqual(r["peak"], 4096 + 50 * MiB)
        self.assertEqual((r["device_allocs"], r["device_frees"]), (2, 2))
        self.assertEqual((r["counters"]["mallocs"], r["counters"]["frees"]), (2, 2))

    def test_record_stream_delays_reuse_until_the_stream_completes(self):
        r = run_scenario(record_stream_scenario("""
            report({"old": old, "while_held": while_held, "after": after,
                    "allocated": torch.cuda.memory_allocated()})
            """), controls=True)
        assert_record_stream_delayed_reuse(self, r)
        self.assertEqual(r["allocated"], 2048)

    def test_streams_keep_separate_blocks(self):
        r = run_scenario("""
            s = torch.cuda.Stream()
            a = torch.empty(1024, device="cuda"); pa = a.data_ptr(); del a
            with torch.cuda.stream(s):
                b = torch.empty(1024, device="cuda")
            report({"reused_across_streams": b.data_ptr() == pa,
                    "segments": torch.cuda.memory_stats()["segment.all.current"]})
            """)
        self.assertFalse(r["reused_across_streams"])  # blocks never move between streams
        self.assertEqual(r["segments"], 2)

    def test_out_of_memory_is_torch_out_of_memory_error(self):
        r = run_scenario("""
            keep = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
            try:
                torch.empty(1024, 1024, 1024, 64, device="cuda")
                error = None
            except torch.OutOfMemoryError as e:
                error = str(e)
            after = torch.empty(1024, device="cuda")
            report({"error": error, "num_ooms": torch.cuda.memory_stats()["num_ooms"],
                    "allocated": torch.cuda.memory_allocated()})
            """, capacity="1GiB")
        self.assertIsNotNone(r["error"])
        self.assertIn("CUDA out of memory. Tried to allocate 256.00 GiB", r["error"])
        self.assertIn("total capacity of 1024.00 MiB", r["error"])
        self.assertEqual(r["num_ooms"], 1)
        self.assertEqual(r["allocated"], 256 * MiB + 4096)

    def test_snapshot_and_history(self):
        r = run_scenario("""
            torch.cuda.memory._record_memory_history(max_entries=1000)
            x = torch.empty(3 * 2**20, dtype=torch.uint8, device="cuda")
            y = torch.empty(100, dtype=torch.uint8, device="cuda")
            del y
            snap = torch.cuda.memory._snapshot()
            actions = [e["action"] for e in snap["device_traces"][0]]
            segments = sorted((s["segment_type"], s["total_size"], s["allocated_size"])
                              for s in snap["segments"])
            report({"actions": actions, "segments": segments})
            """)
        self.assertEqual(r["segments"], [["large", 20 * MiB, 3 * MiB], ["small", 2 * MiB, 0]])
        self.assertEqual(r["actions"], ["segment_alloc", "alloc", "segment_alloc", "alloc",
                                        "free_requested", "free_completed"])

    def test_expandable_segments_use_the_driver_vmm(self):
        r = run_scenario("""
            x = torch.empty(50 * 2**20, dtype=torch.uint8, device="cuda")
            reserved = torch.cuda.memory_reserved()
            snap = torch.cuda.memory._snapshot()
            expandable = [s["is_expandable"] for s in snap["segments"]]
            mapped = cudasim_counters()
            del x
            torch.cuda.empty_cache()
            report({"reserved": reserved, "expandable": expandable, "mapped": mapped,
                    "after": cudasim_counters(), "reserved_after": torch.cuda.memory_reserved()})
            """, controls=True, alloc_conf="expandable_segments:True")
        self.assertEqual(r["expandable"], [True])
        self.assertEqual(r["reserved"], 60 * MiB)  # 20 MiB pages in the large pool
        self.assertEqual(r["mapped"]["in_use_bytes"], 60 * MiB)
        self.assertEqual(r["mapped"]["maps"], 3)  # cuMemCreate + cuMemMap per page
        self.assertEqual(r["after"]["in_use_bytes"], 0)
        self.assertEqual(r["after"]["unmaps"], 3)
        self.assertEqual(r["reserved_after"], 0)

    def test_memset_and_copies_work_but_kernels_do_not(self):
        r = run_scenario("""
            zeros = torch.zeros(8, dtype=torch.int32, device="cuda").cpu().tolist()
            back = torch.arange(6).cuda().cpu().tolist()        # host->device->host copies
            try:
                torch.ones(8, device="cuda")
                kernel_error = None
            except RuntimeError as e:
                kernel_error = str(e)
            report({"zeros": zeros, "back": back, "kernel_error": kernel_error})
            """)
        self.assertEqual(r["zeros"], [0] * 8)      # a fill with 0 is a cudaMemsetAsync
        self.assertEqual(r["back"], list(range(6)))
        self.assertIsNotNone(r["kernel_error"])    # a fill with 1 launches a kernel
        self.assertIn("operation not supported", r["kernel_error"])
        self.assertIn("cudaLaunchKernel is not supported", r["_stderr"])

    def test_pinned_host_memory_and_copies_between_devices(self):
        r = run_scenario("""
            pinned = torch.arange(16, dtype=torch.float32).pin_memory()
            on0 = pinned.to("cuda:0", non_blocking=True)
            on1 = on0.to("cuda:1")                     # peer access + cudaMemcpyPeerAsync
            torch.cuda.synchronize()
            report({"is_pinned": pinned.is_pinned(), "back": on1.cpu().tolist(),
                    "allocated": [torch.cuda.memory_allocated(0),
                                  torch.cuda.memory_allocated(1)]})
            """, devices=2)
        self.assertTrue(r["is_pinned"])
        self.assertEqual(r["back"], [float(i) for i in range(16)])
        self.assertEqual(r["allocated"], [512, 512])


if __name__ == "__main__":
    torchsim.main()
