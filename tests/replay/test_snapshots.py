"""bench/snapshots.sh: PyTorch memory snapshots of one's own, converted to traces and checked
against #11's targets.

Standard-library unittest, on tiny snapshots that cudacache-replay --memory-viz writes (the
tool named by CUDACACHE_REPLAY)."""

import os
import pathlib
import subprocess
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "snapshots.sh"
REPLAY = os.environ.get("CUDACACHE_REPLAY")

TRACE_A = "op,id,size,stream\nalloc,0,3145728,0\nalloc,1,512,0\nfree,0,3145728,0\n" \
          "alloc,2,7340032,0\nfree,2,7340032,0\n"
TRACE_B = "op,id,size,stream\nalloc,0,25165824,0\nalloc,1,4194304,0\nfree,0,25165824,0\n" \
          "alloc,2,8388608,0\nfree,1,4194304,0\nfree,2,8388608,0\n"


def run_script(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=dict(os.environ, CUDACACHE_REPLAY=REPLAY or ""), timeout=240,
                          check=False)


@unittest.skipUnless(REPLAY, "CUDACACHE_REPLAY (a built cudacache-replay) is not set")
class Snapshots(unittest.TestCase):
    def test_checks_what_converts_and_names_what_it_leaves_out(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            snapshots = tmp / "snapshots"
            for name, text, allocators in (("a", TRACE_A, "cudacache,pytorch"),
                                           ("b", TRACE_B, "cudacache")):
                (tmp / f"{name}.csv").write_text(text)
                # One snapshot per allocator, of the same trace: run/a.cudacache.pickle, ...
                subprocess.run([REPLAY, "--allocators", allocators, "--memory-viz",
                                str(snapshots / f"run_{name}"), str(tmp / f"{name}.csv")],
                               check=True, capture_output=True)
            # A snapshot with no allocation in it (of an empty trace).
            (tmp / "empty.csv").write_text("op,id,size,stream\n")
            subprocess.run([REPLAY, "--allocators", "cudacache", "--memory-viz",
                            str(snapshots / "none"), str(tmp / "empty.csv")],
                           check=True, capture_output=True)
            (snapshots / "broken.pkl").write_bytes(b"\x80\x04\x95\x10")
            (snapshots / "notes.pickle").write_text("op,id,size,stream\n")
            run = run_script(str(snapshots))
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertIn("2 snapshots under", run.stdout)
            self.assertIn("| `run_a__a.cudacache` |", run.stdout)
            self.assertIn("| `run_b__b.cudacache` |", run.stdout)
            self.assertNotIn("a.pytorch", run.stdout)
            self.assertIn("snapshots.sh: left out: run_a/a.pytorch.pickle: the same trace as "
                          "run_a__a.cudacache", run.stderr)
            self.assertIn("snapshots.sh: left out: none/empty.cudacache.pickle: no allocation "
                          "in its trace", run.stderr)
            self.assertIn("snapshots.sh: not converted: broken.pkl: ", run.stderr)
            self.assertIn("snapshots.sh: not converted: notes.pickle: ", run.stderr)
            self.assertIn("Traces missing each target, of 2:", run.stdout)
            self.assertIn("CUDASIM_MALLOC_PAGE=2MiB", run.stdout)

    def test_two_snapshots_of_one_name_are_both_checked(self):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            snapshots = tmp / "snapshots"
            snapshots.mkdir()
            for name, text in (("a", TRACE_A), ("b", TRACE_B)):
                (tmp / f"{name}.csv").write_text(text)
                subprocess.run([REPLAY, "--allocators", "cudacache", "--memory-viz",
                                str(tmp / name), str(tmp / f"{name}.csv")],
                               check=True, capture_output=True)
            # x.pickle and x.pkl, two different recordings: one name, two traces.
            (snapshots / "x.pickle").write_bytes((tmp / "a" / "a.cudacache.pickle").read_bytes())
            (snapshots / "x.pkl").write_bytes((tmp / "b" / "b.cudacache.pickle").read_bytes())
            run = run_script(str(snapshots))
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertIn("2 snapshots under", run.stdout)
            self.assertIn("| `x` |", run.stdout)
            self.assertIn("| `x-2` |", run.stdout)

    def test_a_folder_with_no_snapshot_that_converts_is_an_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            (pathlib.Path(tmp) / "x.pkl").write_text("not a pickle")
            run = run_script(tmp)
            self.assertEqual(run.returncode, 1)
            self.assertIn("no snapshot under", run.stderr)
            self.assertIn("not converted: x.pkl: ", run.stderr)

    def test_usage(self):
        for args in ((), ("/nonexistent/folder",), ("a", "b")):
            run = run_script(*args)
            self.assertEqual(run.returncode, 2, args)
            self.assertIn("usage: bench/snapshots.sh DIR", run.stderr)


if __name__ == "__main__":
    unittest.main()
