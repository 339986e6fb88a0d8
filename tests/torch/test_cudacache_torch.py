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
    # 16 GiB unless a test says otherwise: cudacache's pages made with room are then PyTorch's
    # 20 MiB (1/512 of the device, from 10 GiB on), as these tests' figures assume.
    kwargs.setdefault("capacity", "16GiB")
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
            keep = torch.empty(2**21 + 1, dtype=torch.uint8, device="cuda")  # large pool
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
        self.assertEqual(r["after"], [20 * MiB, 20 * MiB, 2 * MiB + 512])

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


# install() with PYTORCH_CUDA_ALLOC_CONF (issue 13): reports what the scenario's install() did,
# the cudacache warnings it raised, cudacache's effective options and max_split_size.
INSTALL_WITH_SETTINGS = """
import warnings
import cudacache, cudacache.torch
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        cudacache.torch.install()
        error = None
    except Exception as e:
        error = [type(e).__name__, isinstance(e, ValueError), str(e)]
options = {line.split(" = ")[0].strip(): line.split(" = ")[1].split(" (default")[0]
           for line in cudacache.config_help().splitlines() if " = " in line}
result = {"error": error, "installed": cudacache.torch.is_installed(),
          "patched": cudacache.torch.patched_functions(),
          "cuda_initialized": torch.cuda.is_initialized(), "options": options,
          "warnings": [str(w.message) for w in caught if "cudacache" in str(w.message)]}
if error is None:
    x = torch.empty(3 * 2**20, dtype=torch.uint8, device="cuda")
    result["max_split_size"] = torch.cuda.memory_stats()["max_split_size"]
"""


def install_with_settings(then="", **kwargs):
    return run_scenario(INSTALL_WITH_SETTINGS + textwrap.dedent(then) + "report(result)\n",
                        **kwargs)


class PyTorchSettingsAtInstall(unittest.TestCase):
    def test_max_split_size_from_pytorch_cuda_alloc_conf(self):
        r = install_with_settings(alloc_conf="max_split_size_mb:128")
        self.assertIsNone(r["error"])
        self.assertEqual(r["max_split_size"], 128 * MiB)  # -1 when the variable is ignored
        self.assertEqual(r["options"]["max_split_size_mb"], "128")
        self.assertEqual(r["warnings"], [])

    def test_passed_keys_keep_pytorchs_meaning(self):
        # Whitespace as PyTorch's tokenizer drops it; expandable_segments:True selects PyTorch's
        # expandable segments (policy:pytorch), which cudasim maps on its VMM.
        r = install_with_settings(
            alloc_conf="expandable_segments:True, roundup_power2_divisions:[256:1,512:2,>:8],"
                       "garbage_collection_threshold:0.6,per_process_memory_fraction:0.5")
        self.assertIsNone(r["error"])
        self.assertEqual(r["options"]["policy"], "pytorch")
        self.assertEqual(r["options"]["expandable_segments"], "True")
        self.assertEqual(r["options"]["garbage_collection_threshold"], "0.6")
        self.assertEqual(r["options"]["per_process_memory_fraction"], "0.5")
        self.assertIn("512:2,1024:8", r["options"]["roundup_power2_divisions"])
        self.assertEqual(r["max_split_size"], -1)
        self.assertEqual(r["warnings"], [])

    def test_cudacache_conf_wins_over_pytorch_cuda_alloc_conf(self):
        r = install_with_settings(alloc_conf="max_split_size_mb:128",
                                  extra={"CUDACACHE_CONF": "max_split_size_mb:256"})
        self.assertIsNone(r["error"])
        self.assertEqual(r["max_split_size"], 256 * MiB)
        self.assertEqual(r["warnings"], [])
        # A policy:cudacache there wins over PyTorch's expandable segments, with a warning
        # (the two cannot be combined).
        r = install_with_settings(alloc_conf="expandable_segments:True,max_split_size_mb:128",
                                  extra={"CUDACACHE_CONF": "policy:cudacache"})
        self.assertIsNone(r["error"])
        self.assertEqual(r["options"]["policy"], "cudacache")
        self.assertEqual(r["options"]["expandable_segments"], "False")
        self.assertEqual(r["max_split_size"], 128 * MiB)
        self.assertEqual(len(r["warnings"]), 1)
        self.assertIn("'expandable_segments' is ignored", r["warnings"][0])
        self.assertIn("CUDACACHE_CONF", r["warnings"][0])

    def test_unknown_key_is_an_error_and_nothing_is_installed(self):
        r = install_with_settings(alloc_conf="max_split_size_mb:128,no_such_key:1")
        self.assertIsNotNone(r["error"])
        name, is_value_error, message = r["error"]
        self.assertTrue(is_value_error, r["error"])
        self.assertIn("unknown key 'no_such_key'", message)
        self.assertIn("PYTORCH_CUDA_ALLOC_CONF", message)
        self.assertFalse(r["installed"])
        self.assertEqual(r["patched"], [])
        self.assertFalse(r["cuda_initialized"])
        self.assertEqual(r["options"]["max_split_size_mb"], "unlimited")  # nothing applied
        # A cudacache option there is refused too: PyTorch rejects it in its variable.
        r = install_with_settings(alloc_conf="policy:pytorch")
        self.assertIn("'policy' is a cudacache option", r["error"][2])
        self.assertFalse(r["installed"])

    def test_pytorch_key_cudacache_cannot_honour_warns(self):
        r = install_with_settings(
            alloc_conf="release_lock_on_cudamalloc:True,max_split_size_mb:128,"
                       "pinned_use_background_threads:True")
        self.assertIsNone(r["error"])
        self.assertTrue(r["installed"])
        self.assertEqual(r["max_split_size"], 128 * MiB)
        # The pinned host memory key stays PyTorch's (its host allocator applies it): no word.
        self.assertEqual(len(r["warnings"]), 1, r["warnings"])
        self.assertIn("'release_lock_on_cudamalloc' is ignored", r["warnings"][0])

    def test_backend(self):
        # native is PyTorch's default: fine, and pinned memory (whose first use makes PyTorch
        # parse its variable) still works after the swap.
        r = install_with_settings(alloc_conf="backend:native", then="""
            result["pinned"] = torch.empty(1000).pin_memory().is_pinned()
            """)
        self.assertIsNone(r["error"])
        self.assertTrue(r["pinned"])
        self.assertEqual(r["warnings"], [])
        r = install_with_settings(alloc_conf="backend:cudaMallocAsync")
        self.assertEqual(r["error"][0], "InstallError")
        self.assertIn("backend:cudaMallocAsync", r["error"][2])
        self.assertFalse(r["installed"])


class AllocationSitesInPyTorch(unittest.TestCase):
    """Frames in the history and snapshots, and the growth detector, from torch programs."""

    def test_record_memory_history_records_python_frames(self):
        r = run_installed("""
            torch.cuda.memory._record_memory_history(context=None, max_entries=100)
            w = torch.empty(1000, device="cuda")
            without = [e["frames"] for e in torch.cuda.memory._snapshot()["device_traces"][0]]
            torch.cuda.memory._record_memory_history(stacks="python", max_entries=100)
            x = torch.empty(1000, device="cuda"); x_line = _sys._getframe().f_lineno
            def make(n):
                return torch.empty(n, device="cuda")  # the innermost frame
            y = make(3000); y_line = _sys._getframe().f_lineno
            snapshot = torch.cuda.memory._snapshot()
            alloc = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
            blocks = {b["address"]: b["frames"] for s in snapshot["segments"]
                      for b in s["blocks"] if b["state"] == "active_allocated"}
            import tempfile, pickle, os
            with tempfile.TemporaryDirectory() as temp:
                path = os.path.join(temp, "s.pickle")
                torch.cuda.memory._dump_snapshot(path)
                with open(path, "rb") as f:
                    dumped = pickle.load(f)
            torch.cuda.memory._record_memory_history(stacks="all", max_entries=100)
            z = torch.empty(5000, device="cuda"); z_line = _sys._getframe().f_lineno
            all_frames = [e["frames"] for e in torch.cuda.memory._snapshot()["device_traces"][0]
                          if e["action"] == "alloc"][0]
            report({"without": without, "alloc": [e["frames"] for e in alloc],
                    "x_block": blocks[x.data_ptr()], "w_block": blocks[w.data_ptr()],
                    "lines": [x_line, y_line, z_line], "dumped": dumped["device_traces"][0],
                    "all": all_frames})
            """)
        x_line, y_line, z_line = r["lines"]
        self.assertTrue(all(frames == [] for frames in r["without"]))
        x_frames, y_frames = r["alloc"]
        self.assertEqual(x_frames[0], {"name": "<module>", "filename": "<string>", "line": x_line})
        self.assertEqual(len(x_frames), 1)  # python only: no C++ frames
        self.assertEqual(y_frames[0]["name"], "make")
        self.assertEqual(y_frames[1], {"name": "<module>", "filename": "<string>", "line": y_line})
        self.assertEqual(r["x_block"], x_frames)  # the snapshot's block: where it was allocated
        self.assertEqual(r["w_block"], [])  # allocated while no stacks were recorded
        self.assertEqual([e["frames"] for e in r["dumped"] if e["action"] == "alloc"],
                         r["alloc"])  # the pickle carries them
        # "all": C++ frames (PyTorch's libraries, named from their symbols) before Python's.
        names = [f["name"] for f in r["all"]]
        self.assertEqual(r["all"][-1], {"name": "<module>", "filename": "<string>",
                                        "line": z_line})
        self.assertGreater(len(names), 3, names)
        self.assertTrue(any(f["filename"].endswith(".so") for f in r["all"][:-1]), r["all"])

    def test_watch_growth_names_the_line_that_keeps_a_tensor_per_step(self):
        r = run_installed("""
            import warnings
            kept = []
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                watch = cudacache.torch.watch_growth(steps=3)
                found_at = []
                for step in range(6):
                    temporary = torch.empty(2**20, device="cuda")
                    kept.append(torch.empty(2**18, device="cuda")); keep_line = _sys._getframe().f_lineno
                    del temporary
                    found_at.append(watch.step() is not None)
            growth = [str(w.message) for w in caught
                      if issubclass(w.category, cudacache.torch.MemoryGrowthWarning)]
            report({"warnings": growth, "found_at": found_at, "report": watch.report(),
                    "keep_line": keep_line})
            """)
        self.assertEqual(r["found_at"], [False, False, True, False, False, False])
        self.assertEqual(len(r["warnings"]), 1, r["warnings"])
        message = r["warnings"][0]
        self.assertIn("grew at each of the last 3 steps", message)
        self.assertIn(f"3.00 MiB in 3 blocks from 3 steps: <string>:{r['keep_line']} in <module>",
                      message)
        report = r["report"]
        self.assertTrue(report["growing"])
        self.assertEqual(len(report["sites"]), 1)
        self.assertEqual(report["sites"][0]["frames"][0]["line"], r["keep_line"])

    def test_watch_growth_over_a_steady_loop_says_nothing(self):
        r = run_installed("""
            import warnings
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                total = 0.0
                for step in cudacache.torch.watch_growth(range(8), steps=2):
                    activations = torch.empty(2**20, device="cuda")
                    weights_update = torch.empty(2**18, device="cuda")
                    del activations, weights_update
            growth = [str(w.message) for w in caught
                      if issubclass(w.category, cudacache.torch.MemoryGrowthWarning)]
            report({"warnings": growth, "growing": cudacache.growth_report()["growing"]})
            """)
        self.assertEqual(r["warnings"], [])
        self.assertFalse(r["growing"])


if __name__ == "__main__":
    torchsim.main()
