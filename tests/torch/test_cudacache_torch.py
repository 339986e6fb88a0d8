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

    def test_record_memory_history_warns_that_stacks_are_not_recorded(self):
        r = run_installed("""
            import warnings
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.memory._record_memory_history(context=None, max_entries=100)
                quiet = len(caught)
                torch.cuda.memory._record_memory_history(stacks="python", max_entries=100)
                x = torch.empty(1000, device="cuda")
                torch.cuda.memory._record_memory_history(stacks="all", max_entries=100)
                y = torch.empty(1000, device="cuda")
            trace = torch.cuda.memory._snapshot()["device_traces"][0]
            report({"quiet": quiet,
                    "warnings": [str(w.message) for w in caught
                                 if "cudacache" in str(w.message)],
                    "actions": [e["action"] for e in trace],
                    "frames": [e["frames"] for e in trace]})
            """)
        self.assertEqual(r["quiet"], 0)
        self.assertEqual(len(r["warnings"]), 1, r["warnings"])  # once
        self.assertIn("stacks='python'", r["warnings"][0])
        self.assertIn("does not record stack traces", r["warnings"][0])
        self.assertIn("alloc", r["actions"])  # the history itself is recorded
        self.assertTrue(all(frames == [] for frames in r["frames"]))


if __name__ == "__main__":
    torchsim.main()
