"""cudacache-replay --memory-viz: one snapshot pickle per trace and allocator, which Python's
pickle loads, which PyTorch's memory_viz accepts (when torch is installed), and which the
replay tool reads back as the same trace. Bad output paths are clear errors."""

import glob
import os
import pickle
import pickletools
import shutil
import subprocess
import sys
import tempfile
import unittest

from support import SMALL_TRACE, replay, trace_rows, write_random_trace

ALLOCATORS = ("cudacache", "pytorch", "pytorch-expandable", "cub", "nocache")
# Opcodes the JavaScript unpickler of pytorch.org/memory_viz implements (the list of
# tests/python/test_snapshot.py, protocols 2 to 4).
MEMORY_VIZ_OPCODES = {
    "APPENDS", "BINGET", "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME",
    "LONG1", "LONG_BINGET", "MARK", "MEMOIZE", "PROTO", "SETITEMS", "SHORT_BINUNICODE", "STOP",
    "TUPLE2", "APPEND", "NEWFALSE", "BINPUT", "BINUNICODE", "EMPTY_TUPLE", "NEWTRUE", "NONE",
    "BINFLOAT", "TUPLE", "TUPLE1", "TUPLE3", "LONG_BINPUT", "LIST", "DICT", "SETITEM"}


def torch_available():
    probe = subprocess.run([sys.executable, "-c", "import torch.cuda._memory_viz"],
                           capture_output=True, timeout=300)
    return probe.returncode == 0


class MemoryViz(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="cudacache-viz-")
        cls.trace = os.path.join(cls.dir, "small.csv")
        with open(cls.trace, "w") as file:
            file.write(SMALL_TRACE)
        cls.out = os.path.join(cls.dir, "viz", "nested")  # created by the tool
        replay("--allocators", ",".join(ALLOCATORS), "--memory-viz", cls.out, cls.trace)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def pickles(self):
        return [os.path.join(self.out, f"small.{name}.pickle") for name in ALLOCATORS]

    def test_one_pickle_per_allocator_in_the_snapshot_schema(self):
        self.assertEqual(sorted(glob.glob(os.path.join(self.out, "*.pickle"))),
                         sorted(self.pickles()))
        for path in self.pickles():
            with open(path, "rb") as file:
                raw = file.read()
            self.assertEqual(raw[:2], b"\x80\x02", "protocol 2, which memory_viz's JS reads")
            opcodes = {opcode.name for opcode, _, _ in pickletools.genops(raw)}
            self.assertEqual(opcodes - MEMORY_VIZ_OPCODES, set(), path)
            data = pickle.loads(raw)
            self.assertEqual(set(data), {"segments", "device_traces"})
            self.assertEqual(len(data["device_traces"]), 1)
            actions = [entry["action"] for entry in data["device_traces"][0]]
            self.assertEqual(actions.count("alloc"), 5, path)
            self.assertEqual(actions.count("free_requested"), 4, path)
            self.assertEqual(actions.count("free_completed"), 4, path)
            self.assertTrue({"segment_alloc", "segment_map"} & set(actions), path)
            for entry in data["device_traces"][0]:
                address = "device_free" if entry["action"] == "oom" else "addr"
                self.assertEqual(set(entry), {"action", address, "size", "stream", "time_us",
                                              "frames"})
            # The last allocation (5,000,000 bytes) is live at the end: an active block.
            blocks = [b for s in data["segments"] for b in s["blocks"]
                      if b["state"] == "active_allocated"]
            self.assertEqual([b["requested_size"] for b in blocks], [5000000], path)
            for segment in data["segments"]:
                self.assertEqual(sum(b["size"] for b in segment["blocks"]),
                                 segment["total_size"], path)

    def test_the_replay_tool_reads_its_own_pickles_back_as_the_same_trace(self):
        expected = trace_rows(SMALL_TRACE)
        for path in self.pickles():
            csv = path + ".csv"
            replay("--convert", path, "-o", csv)
            with open(csv) as file:
                self.assertEqual(trace_rows(file.read()), expected, path)
            replay("--allocators", "nocache", path)  # and replays it as a trace

    @unittest.skipUnless(torch_available(), "PyTorch is not installed")
    def test_pytorch_memory_viz_accepts_them(self):
        # Its command line, as a user runs it, on one pickle...
        first = self.pickles()[0]
        for command in ("trace_plot", "segment_plot"):
            html = first + f".{command}.html"
            result = subprocess.run(
                [sys.executable, "-m", "torch.cuda._memory_viz", command, first, "-o", html],
                capture_output=True, text=True, timeout=300)
            self.assertEqual(result.returncode, 0, f"{command} {first}:\n{result.stderr}")
            self.assertGreater(os.path.getsize(html), 1000)
        # ...and its functions on every pickle, in one interpreter (PyTorch imports slowly).
        program = (
            "import pickle, sys\n"
            "from torch.cuda import _memory_viz as viz\n"
            "for path in sys.argv[1:]:\n"
            "    with open(path, 'rb') as f: data = pickle.load(f)\n"
            "    assert len(viz.trace_plot(data)) > 1000, path\n"
            "    assert len(viz.segment_plot(data)) > 1000, path\n"
            "    assert 'Summary of segments' in viz.segsum(data), path\n"
            "    viz.trace(data)\n")
        result = subprocess.run([sys.executable, "-c", program, *self.pickles()],
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stderr)


class OutOfMemory(unittest.TestCase):
    def test_the_replay_up_to_the_oom(self):
        with tempfile.TemporaryDirectory() as temp:
            trace = os.path.join(temp, "small.csv")
            with open(trace, "w") as file:
                file.write(SMALL_TRACE)
            replay("--allocators", ",".join(ALLOCATORS), "--capacity", "6MiB", "--memory-viz",
                   temp, trace)
            for name in ALLOCATORS:
                with open(os.path.join(temp, f"small.{name}.pickle"), "rb") as file:
                    data = pickle.load(file)
                entries = data["device_traces"][0]
                # The 5,000,000-byte request fails on a 6 MiB device; the snapshot is taken there.
                self.assertNotIn(5000000, [e["size"] for e in entries if e["action"] == "alloc"])
                if name.startswith(("cudacache", "pytorch")):
                    oom = [e for e in entries if e["action"] == "oom"]
                    self.assertEqual(len(oom), 1, name)
                    self.assertIn("device_free", oom[0])
                reserved = sum(e["size"] * {"segment_alloc": 1, "segment_map": 1,
                                            "segment_free": -1, "segment_unmap": -1}.get(
                                                e["action"], 0) for e in entries)
                self.assertEqual(reserved, sum(s["total_size"] for s in data["segments"]), name)


class LongTraces(unittest.TestCase):
    def test_items_come_in_batches_of_at_most_1000(self):
        # memory_viz's unpickler pushes a whole batch as function arguments: one batch of a
        # long trace's entries would overflow the browser's stack.
        with tempfile.TemporaryDirectory() as temp:
            trace = os.path.join(temp, "long.csv")
            write_random_trace(trace, 5000)
            replay("--allocators", "nocache", "--memory-viz", temp, trace)
            with open(os.path.join(temp, "long.nocache.pickle"), "rb") as file:
                raw = file.read()
        stack_since_mark = [0]
        largest = 0
        for opcode, _, _ in pickletools.genops(raw):
            if opcode.name == "MARK":
                stack_since_mark.append(0)
            elif opcode.name in ("APPENDS", "SETITEMS"):
                largest = max(largest, stack_since_mark.pop())  # the container was counted
            elif opcode.stack_after and opcode.name not in ("PROTO", "STOP"):
                stack_since_mark[-1] += 1
        self.assertGreater(len(pickle.loads(raw)["device_traces"][0]), 10000)
        self.assertLessEqual(largest, 2000)


class BadOutputs(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cudacache-bad-")
        self.file = os.path.join(self.dir, "a-file")
        with open(self.file, "w") as file:
            file.write("x")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def assert_refused(self, args, message):
        result = replay(*args, check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertLess(result.returncode, 128, "a clear error, not a crash")
        self.assertIn(message, result.stderr)

    def test_memory_viz_onto_a_file(self):
        self.assert_refused(["--memory-viz", self.file], "exists and is not a directory")

    def test_memory_viz_below_a_file(self):
        self.assert_refused(["--memory-viz", os.path.join(self.file, "sub")],
                            "cannot create the directory")

    def test_html_in_a_missing_directory(self):
        self.assert_refused(["--html", os.path.join(self.dir, "missing", "page.html")],
                            "cannot open for writing")

    def test_html_onto_a_directory(self):
        self.assert_refused(["--html", self.dir], "is a directory")

    def test_html_to_stdout_and_with_convert(self):
        self.assert_refused(["--html", "-"], "--html needs a file name")
        self.assert_refused(["--convert", self.file, "-o", "x.csv", "--html", "p.html"],
                            "--convert takes no traces and no replay options")


if __name__ == "__main__":
    unittest.main(verbosity=2)
