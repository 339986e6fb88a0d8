"""cudacache.torch.install() with real PyTorch on cudasim: allocation-only scenarios, answered
by cudacache through torch.cuda's own functions."""

import textwrap
import unittest

import torchsim
from torchsim import MiB, run_scenario
from torchsim import assert_record_stream_delayed_reuse, record_stream_scenario

INSTALL = """
import cudacache, cudacache.torch
cudacache.torch.install()
"""


def run_installed(code, **kwargs):
    return run_scenario(INSTALL + textwrap.dedent(code), **kwargs)


class CudacacheInstalledInPyTorch(unittest.TestCase):
    def test_install_before_cuda_init_and_too_late(self):
        r = run_scenario("""
            import cudacache.torch
            allocator = cudacache.torch.install()
            x = torch.empty(10, device="cuda")
            report({"installed": cudacache.torch.is_installed(),
                    "initialized": torch.cuda.is_initialized(),
                    "patched": torch.cuda.memory_allocated.__name__,
                    "allocated": torch.cuda.memory_allocated()})
            """)
        self.assertTrue(r["installed"])
        self.assertEqual(r["allocated"], 512)
        late = run_scenario("""
            import cudacache.torch
            torch.empty(10, device="cuda")
            try:
                cudacache.torch.install()
                error = None
            except cudacache.torch.InstallError as e:
                error = str(e)
            report({"error": error})
            """)
        self.assertIn("must run before PyTorch initializes CUDA", late["error"])

    def test_tensors_kept_alive_grow_memory_by_what_they_hold(self):
        r = run_installed("""
            kept, steps = [], []
            for step in range(5):
                kept.append(torch.empty(1000 * (step + 1), dtype=torch.float32, device="cuda"))
                kept.append(torch.empty(3 * 2**20 + step, dtype=torch.uint8, device="cuda"))
                temporary = torch.empty(2**20, dtype=torch.uint8, device="cuda")
                del temporary
                steps.append(torch.cuda.memory_allocated())
            report({"steps": steps, "peak": torch.cuda.max_memory_allocated(),
                    "cudacache": cudacache.memory_allocated()})
            """)
        expected, total = [], 0
        for step in range(5):
            total += -(-4000 * (step + 1) // 512) * 512 + -(-(3 * MiB + step) // 512) * 512
            expected.append(total)
        self.assertEqual(r["steps"], expected)
        self.assertEqual(r["cudacache"], expected[-1])
        self.assertEqual(r["peak"], expected[-1] + MiB)  # the last temporary on top

    def test_peak_around_a_large_temporary_and_reset(self):
        r = run_installed("""
            base = torch.empty(4 * 2**20, dtype=torch.uint8, device="cuda")
            big = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
            del big
            before = [torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(),
                      torch.cuda.max_memory_reserved()]
            torch.cuda.reset_peak_memory_stats()
            after = [torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(),
                     torch.cuda.max_memory_reserved(), torch.cuda.memory_reserved()]
            report({"before": before, "after": after})
            """)
        # cudacache's default policy: 4 MiB in a 20 MiB page; the 64 MiB temporary extends the
        # 16 MiB free after it by three more 20 MiB pages.
        self.assertEqual(r["before"], [4 * MiB, 68 * MiB, 80 * MiB])
        self.assertEqual(r["after"], [4 * MiB, 4 * MiB, 80 * MiB, 80 * MiB])  # cache kept

    def test_empty_cache_shrinks_reserved(self):
        r = run_installed("""
            keep = torch.empty(2**20 + 1, dtype=torch.uint8, device="cuda")
            temp = torch.empty(30 * 2**20, dtype=torch.uint8, device="cuda")
            del temp
            before = [torch.cuda.memory_reserved(), cudasim_counters()["in_use_bytes"]]
            torch.cuda.empty_cache()
            after = [torch.cuda.memory_reserved(), cudasim_counters()["in_use_bytes"],
                     torch.cuda.memory_allocated()]
            report({"before": before, "after": after})
            """, controls=True)
        # The 30 MiB temporary extends the first 20 MiB page by one more, which empty_cache
        # unmaps and releases.
        self.assertEqual(r["before"], [40 * MiB, 40 * MiB])
        self.assertEqual(r["after"], [20 * MiB, 20 * MiB, MiB + 512])

    def test_out_of_memory(self):
        # The pluggable ABI cannot raise: unguarded, the tensor gets a NULL pointer (checked
        # here, as the package documents); raise_on_oom() turns it into torch.OutOfMemoryError.
        r = run_installed("""
            silent = torch.empty(1024, 1024, 1024, 64, device="cuda")
            silent_ptr = silent.data_ptr()
            try:
                with cudacache.torch.raise_on_oom():
                    torch.empty(1024, 1024, 1024, 64, device="cuda")
                error = None
            except torch.OutOfMemoryError as e:
                error = [type(e).__name__, isinstance(e, cudacache.OutOfMemoryError), str(e)]
            x = torch.empty(1000, device="cuda")           # normal work goes on
            report({"silent_ptr": silent_ptr, "error": error, "ptr": x.data_ptr(),
                    "num_ooms": torch.cuda.memory_stats()["num_ooms"],
                    "allocated": torch.cuda.memory_allocated()})
            """, capacity="4GiB")
        self.assertEqual(r["silent_ptr"], 0)
        self.assertIsNotNone(r["error"])
        self.assertTrue(r["error"][1])
        self.assertIn("out of memory", r["error"][2].lower())
        self.assertNotEqual(r["ptr"], 0)
        self.assertEqual(r["num_ooms"], 2)
        self.assertEqual(r["allocated"], 4096)

    def test_stats_and_snapshot_answer_from_cudacache(self):
        r = run_installed("""
            x = torch.empty(5 * 2**20, dtype=torch.uint8, device="cuda")
            y = torch.empty(700, dtype=torch.uint8, device="cuda")
            stats = torch.cuda.memory_stats()
            snap = torch.cuda.memory._snapshot()
            segments = torch.cuda.memory_snapshot()
            report({"same": stats == cudacache.memory_stats(),
                    "allocated": stats["allocated_bytes.all.current"],
                    "large": stats["allocated_bytes.large_pool.current"],
                    "requested": stats["requested_bytes.all.current"],
                    "segments": sorted((s["segment_type"], s["total_size"])
                                       for s in snap["segments"]),
                    "same_segments": segments == snap["segments"],
                    "summary": "Allocated memory" in torch.cuda.memory_summary()})
            """)
        self.assertTrue(r["same"])
        self.assertEqual(r["allocated"], 5 * MiB + 1024)
        self.assertEqual(r["large"], 5 * MiB)
        self.assertEqual(r["requested"], 5 * MiB + 700)
        self.assertEqual(r["segments"], [["large", 20 * MiB], ["small", 2 * MiB]])
        self.assertTrue(r["same_segments"])
        self.assertTrue(r["summary"])

    def test_record_stream_delays_reuse(self):
        r = run_installed(record_stream_scenario("""
            report({"old": old, "while_held": while_held, "after": after})
            """), controls=True)
        assert_record_stream_delayed_reuse(self, r)

    def test_mem_pool_backed_by_cudacache(self):
        # PyTorch's native allocator stays current; one MemPool draws its segments from
        # cudacache through the pluggable ABI.
        r = run_scenario("""
            import cudacache
            if not hasattr(torch.cuda, "MemPool"):
                report({"skip": "this torch has no torch.cuda.MemPool"}); raise SystemExit
            plug = torch.cuda.memory.CUDAPluggableAllocator(
                str(cudacache.library_path() or cudacache.load_library()),
                "cudacache_malloc", "cudacache_free")
            pool = torch.cuda.MemPool(plug.allocator())
            with torch.cuda.use_mem_pool(pool):
                x = torch.empty(2**20, dtype=torch.uint8, device="cuda")
            outside = torch.empty(2**20, dtype=torch.uint8, device="cuda")
            in_pool = [cudacache.memory_allocated(), torch.cuda.memory_allocated()]
            del x, pool
            report({"in_pool": in_pool, "after": cudacache.memory_allocated()})
            """)
        if "skip" in r:
            self.skipTest(r["skip"])
        # The pool's 2 MiB small segment is one cudacache block; PyTorch counts both tensors.
        self.assertEqual(r["in_pool"], [2 * MiB, 2 * MiB])
        self.assertEqual(r["after"], 0)

    def test_memory_viz_renders_a_cudacache_snapshot(self):
        r = run_installed("""
            import os, pickle, tempfile
            from torch.cuda import _memory_viz
            keep = [torch.empty(n, dtype=torch.uint8, device="cuda")
                    for n in (100, 3 * 2**20, 25 * 2**20)]
            path = os.path.join(tempfile.mkdtemp(), "snapshot.pickle")
            cudacache.dump_snapshot(path)
            with open(path, "rb") as f:
                data = pickle.load(f)
            report({"segment_plot": len(_memory_viz.segment_plot(data)),
                    "trace_plot": len(_memory_viz.trace_plot(data)),
                    "segments_text": _memory_viz.segsum(data),
                    "trace_text": _memory_viz.trace(data)})
            """)
        self.assertGreater(r["segment_plot"], 1000)  # an HTML page
        self.assertGreater(r["trace_plot"], 1000)
        # 100 B in a 2 MiB page of the small pool's range; 3 MiB and 25 MiB in two 20 MiB
        # pages of the large pool's.
        self.assertIn("segments: 2\ntotal_reserved: 42.0MiB\ntotal_allocated: 28.0MiB\n",
                      r["segments_text"])
        self.assertIsInstance(r["trace_text"], str)  # rendered (empty while no history)


if __name__ == "__main__":
    torchsim.main()
