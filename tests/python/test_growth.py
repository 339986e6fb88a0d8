"""Allocation stacks and the growth detector from the plain package (no PyTorch): Python frames
through libcudacache's own provider, cudacache.watch_growth() and its warning."""

import sys
import unittest
import warnings

import support
from support import MiB
import cudacache


def line():
    """The caller's line number."""
    return sys._getframe(1).f_lineno


class StacksTest(support.AllocatorTestCase):
    def tearDown(self):
        cudacache.record_history(1, device=0)  # drops the entries for the tests that follow
        cudacache.record_history(0, device=0)
        super().tearDown()

    def test_python_frames_name_the_allocating_line(self):
        cudacache.record_history(100, device=0, stacks="python")
        ptr = self.alloc(5000); here = line()
        trace = cudacache.snapshot(0)["device_traces"][0]
        frames = [e["frames"] for e in trace if e["action"] == "alloc"][0]
        # Innermost first: the package's raw_alloc, then this test (support's alloc), then it.
        self.assertEqual(frames[0]["name"], "raw_alloc")
        self.assertTrue(frames[0]["filename"].endswith("cudacache/_memory.py"), frames[0])
        self.assertEqual(frames[1]["name"], "alloc")
        self.assertEqual(frames[2], {"name": "test_python_frames_name_the_allocating_line",
                                     "filename": __file__, "line": here})
        blocks = [b for s in cudacache.snapshot(0)["segments"] for b in s["blocks"]
                  if b["address"] == ptr]
        self.assertEqual(blocks[0]["frames"], frames)

    def test_cpp_frames_and_no_stacks(self):
        cudacache.record_history(100, device=0, stacks="cpp")
        self.alloc(5000)
        cudacache.record_history(100, device=0)  # a new recording, without stacks
        self.alloc(6000)
        trace = cudacache.snapshot(0)["device_traces"][0]
        self.assertEqual([e["frames"] for e in trace if e["action"] == "alloc"], [[]])
        cudacache.record_history(100, device=0, stacks="cpp")
        self.alloc(7000)
        frames = [e["frames"] for e in cudacache.snapshot(0)["device_traces"][0]
                  if e["action"] == "alloc"][0]
        self.assertTrue(frames)  # the interpreter's C frames (ctypes' call), named or not
        self.assertTrue(all(set(f) == {"name", "filename", "line"} for f in frames))
        self.assertFalse(any(f["name"].startswith("cudacache_") for f in frames), frames)

    def test_bad_stacks_are_refused_by_name(self):
        for bad in ("python3", 2, True):
            with self.assertRaisesRegex(ValueError, "stacks must be one of"):
                cudacache.record_history(100, device=0, stacks=bad)


class GrowthTest(support.AllocatorTestCase):
    def tearDown(self):
        cudacache.watch_growth(device=0).stop()
        super().tearDown()

    def test_a_loop_that_keeps_a_block_per_step_is_named_once(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            watch = cudacache.watch_growth(steps=2, device=0)
            found = []
            for _ in range(4):
                self.free(self.alloc(4 * MiB))
                self._live.append(cudacache.raw_alloc(MiB, 0)); keep_line = line()
                found.append(watch.step())
        self.assertEqual([r is not None for r in found], [False, True, False, False])
        messages = [str(w.message) for w in caught
                    if issubclass(w.category, cudacache.MemoryGrowthWarning)]
        self.assertEqual(len(messages), 1, messages)
        self.assertIn(f"2.00 MiB in 2 blocks from 2 steps: {__file__}:{keep_line} in "
                      "test_a_loop_that_keeps_a_block_per_step_is_named_once", messages[0])
        report = watch.report()
        self.assertTrue(report["growing"])
        self.assertEqual(report["allocated_at_boundaries"], [0, MiB, 2 * MiB])
        frames = report["sites"][0]["frames"]
        self.assertEqual(frames[0]["name"], "raw_alloc")  # innermost: the package's own call
        self.assertEqual((frames[1]["filename"], frames[1]["line"]), (__file__, keep_line))

    def test_iterating_marks_a_step_per_item(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in cudacache.watch_growth(range(3), steps=2, device=0):
                self.alloc(MiB)
        self.assertEqual(sum(issubclass(w.category, cudacache.MemoryGrowthWarning)
                             for w in caught), 1)

    def test_bad_arguments(self):
        for steps in (1, 1001, True, 2.5):
            with self.assertRaisesRegex(ValueError, "steps must be an int from 2 to 1000"):
                cudacache.watch_growth(steps=steps, device=0)
        with self.assertRaisesRegex(ValueError, "stacks must be one of"):
            cudacache.watch_growth(stacks="java", device=0)
        with self.assertRaisesRegex(TypeError, "wraps no iterable"):
            iter(cudacache.watch_growth(device=0)).__next__()
        with self.assertRaises(cudacache.CudacacheError):
            cudacache.watch_growth(device=9)


if __name__ == "__main__":
    unittest.main()
