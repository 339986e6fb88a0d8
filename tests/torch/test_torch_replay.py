"""tools/torch_replay/torch_replay.py (a trace replayed through real PyTorch on cudasim) and
cudacache-replay's torch-native / torch-expandable allocators, which run it.

The recorded-trace checks need ../shared/traces (CUDACACHE_TRACES_DIR overrides) and skip
without it."""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

import torchsim
from torchsim import MiB

REPO = torchsim.REPO
DRIVER = REPO / "tools" / "torch_replay" / "torch_replay.py"
TRACES = pathlib.Path(os.environ.get("CUDACACHE_TRACES_DIR", REPO.parent / "shared" / "traces"))
# PyTorch's own peak reserved bytes while recording (meta.json:
# pytorch_peak_reserved_from_first_alloc_bytes).
# The keys of "device_calls": cudasim_call_counts' fields, in order.
CALL_KINDS = ("malloc", "free", "create", "release", "map", "unmap", "set_access", "synchronize",
              "reserve", "address_free", "mem_get_info")
# The figures that cudacache's pytorch / pytorch-expandable and PyTorch's torch-native /
# torch-expandable must agree on.
SAME_POLICY_KEYS = ("peak_allocated_bytes", "peak_reserved_bytes", "device_peak_bytes",
                    "device_mallocs", "device_frees", "device_calls",
                    "estimated_device_call_seconds", "min_capacity_bytes")
RECORDED_PEAK_RESERVED = {
    "decomfl_zo_federated_opt_finetune": 1897922560,
    "dit_text_diffusion_train_oom": 23397924864,
}


def run_driver(*args, check=True, env=None):
    completed = subprocess.run(
        [sys.executable, str(DRIVER), *map(str, args),
         "--cudasim-dir", str(torchsim.cudasim_dir())],
        capture_output=True, text=True, timeout=1200, env=env)
    if check and completed.returncode != 0:
        raise AssertionError(f"torch_replay.py exited with {completed.returncode}:\n"
                             f"{completed.stdout}{completed.stderr}")
    return completed


def driver_result(*args):
    report = json.loads(run_driver(*args).stdout)
    (trace,) = report["traces"]
    (result,) = trace["results"]
    return trace, result


def trace_path(name):
    path = TRACES / f"{name}.csv"
    if not path.exists():
        raise unittest.SkipTest(f"{path} not found (the shared traces are not here)")
    return path


def small_trace(directory):
    """A deterministic trace of small and large blocks on two streams, with frees."""
    rows, live, next_id = ["op,id,size,stream"], [], 0
    for step in range(30):
        size = [700, 130000, 3 * MiB + 11, 9 * MiB, 24 * MiB + 5][step % 5] + 512 * step
        stream = 1 if step % 7 == 3 else 0
        rows.append(f"alloc,{next_id},{size},{stream}")
        live.append((next_id, size, stream))
        next_id += 1
        if step % 3 == 2:
            ident, size, stream = live.pop(len(live) // 2)
            rows.append(f"free,{ident},{size},{stream}")
    path = pathlib.Path(directory) / "small.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def expandable_trace(directory):
    """Small and large blocks, freed, then empty_cache: every VMM call PyTorch makes."""
    path = pathlib.Path(directory) / "expandable.csv"
    path.write_text("op,id,size,stream\nalloc,0,1000,0\nalloc,1,5242880,0\n"
                    "alloc,2,16777216,0\nfree,0,1000,0\nfree,1,5242880,0\n"
                    "free,2,16777216,0\nempty_cache,,,\n")
    return path


class TorchReplayDriver(unittest.TestCase):
    def test_native_reproduces_pytorchs_recorded_peak_reserved(self):
        for name, recorded in RECORDED_PEAK_RESERVED.items():
            with self.subTest(trace=name):
                trace, result = driver_result(trace_path(name))
                self.assertEqual(result["allocator"], "torch-native")
                self.assertFalse(result["oom"])
                self.assertEqual(result["events_replayed"], trace["events"])
                self.assertEqual(result["peak_reserved_bytes"], recorded)  # to the byte
                # cudasim saw exactly the segments PyTorch reserved.
                self.assertEqual(result["device_peak_bytes"], result["peak_reserved_bytes"])
                self.assertGreaterEqual(result["peak_allocated_bytes"],
                                        trace["peak_requested_bytes"])

    def test_expandable_segments(self):
        path = trace_path("decomfl_zo_federated_opt_finetune")
        _, native = driver_result(path)
        trace, expandable = driver_result(path, "--expandable")
        self.assertEqual(expandable["allocator"], "torch-expandable")
        self.assertFalse(expandable["oom"])
        # Pages mapped into growing segments: more, smaller device allocations, less reserve.
        self.assertGreater(expandable["device_mallocs"], native["device_mallocs"])
        self.assertLess(expandable["peak_reserved_bytes"], native["peak_reserved_bytes"])
        self.assertGreaterEqual(expandable["peak_reserved_bytes"], trace["peak_requested_bytes"])

    def test_min_capacity_is_the_smallest_device_that_completes(self):
        with tempfile.TemporaryDirectory() as directory:
            path = small_trace(directory)
            trace, result = driver_result(path, "--min-capacity")
            found = result["min_capacity_bytes"]
            self.assertIsNotNone(found)
            self.assertGreaterEqual(found, trace["peak_requested_bytes"])
            self.assertEqual(found % (2 * MiB), 0)
            _, at = driver_result(path, "--capacity", found)
            _, below = driver_result(path, "--capacity", found - 2 * MiB)
            self.assertFalse(at["oom"])
            self.assertTrue(below["oom"])
            self.assertIn("CUDA out of memory", below["oom_message"])
            self.assertLess(below["events_replayed"], trace["events"])

    def test_device_calls_by_kind(self):
        with tempfile.TemporaryDirectory() as directory:
            path = expandable_trace(directory)
            _, native = driver_result(path)
            _, expandable = driver_result(path, "--expandable")
        for result in (native, expandable):
            self.assertEqual(tuple(result["device_calls"]), CALL_KINDS)
        # Native: one cudaMalloc per segment (2 MiB small, 20 MiB for 5 MiB, 16 MiB exact), all
        # cudaFree'd by empty_cache; nothing else.
        self.assertEqual(native["device_calls"],
                         {**dict.fromkeys(CALL_KINDS, 0), "malloc": 3, "free": 3})
        self.assertEqual(native["device_mallocs"], 3)
        # Expandable: a reservation per pool, a 2 MiB and two 20 MiB chunks created, mapped and
        # made accessible as the segments grow; empty_cache synchronizes each segment, unmaps
        # and releases every chunk and frees both reservations (sized from the device's
        # properties, not cudaMemGetInfo). cuMemCreate / cuMemRelease are also device_mallocs /
        # device_frees.
        self.assertEqual(expandable["device_calls"],
                         {"malloc": 0, "free": 0, "create": 3, "release": 3, "map": 3,
                          "unmap": 3, "set_access": 3, "synchronize": 2, "reserve": 2,
                          "address_free": 2, "mem_get_info": 0})
        self.assertEqual(expandable["device_mallocs"], 3)
        self.assertEqual(expandable["device_frees"], 3)
        self.assertEqual(expandable["peak_reserved_bytes"], 42 * MiB)

    def crashing_python(self, directory, crashes):
        """An interpreter that runs this Python, except that its first `crashes` replay
        servers (torch_replay's --serve) kill themselves with SIGSEGV before doing anything."""
        directory = pathlib.Path(directory)
        wrapper = directory / "python"
        wrapper.write_text(f"""#!/bin/sh
case " $* " in *" --serve "*)
  count=$(cat "{directory}/crashes" 2>/dev/null || echo 0)
  if [ "$count" -lt {crashes} ]; then
    echo $((count + 1)) > "{directory}/crashes"
    echo "pretending PyTorch crashed" >&2
    kill -SEGV $$
  fi;;
esac
exec "{sys.executable}" "$@"
""")
        wrapper.chmod(0o755)
        return wrapper

    def test_a_replay_process_killed_by_a_signal_is_run_again(self):
        with tempfile.TemporaryDirectory() as directory:
            python = self.crashing_python(directory, crashes=2)
            path = expandable_trace(directory)
            completed = run_driver(path, "--python", python)
            _, result = driver_result(path)  # the same replay, never killed
        report = json.loads(completed.stdout)
        (trace,) = report["traces"]
        (rerun,) = trace["results"]
        self.assertEqual(rerun["device_calls"], result["device_calls"])
        self.assertEqual(rerun["peak_reserved_bytes"], result["peak_reserved_bytes"])
        self.assertEqual(completed.stderr.count("was killed by SIGSEGV before its result"), 2,
                         completed.stderr)
        self.assertIn("run 2 of at most 3", completed.stderr)
        self.assertIn("pretending PyTorch crashed", completed.stderr)

    def test_a_replay_fork_killed_by_a_signal_is_run_again(self):
        """The server lives on when the fork that replays is killed: the replay is run again
        in a new fork."""
        with tempfile.TemporaryDirectory() as directory:
            # The first two forks of the server kill themselves with SIGSEGV once their stderr
            # is the replay's (its last redirection, onto fd 2).
            hooks = pathlib.Path(directory) / "hooks"
            hooks.mkdir()
            count = pathlib.Path(directory) / "fork_crashes"
            (hooks / "sitecustomize.py").write_text(f"""
import os, signal, sys
if "--serve" in sys.argv:
    dup2 = os.dup2
    def crashing_dup2(fd, fd2, *args):
        result = dup2(fd, fd2, *args)
        done = int(open({str(count)!r}).read()) if os.path.exists({str(count)!r}) else 0
        if fd2 == 2 and done < 2:
            open({str(count)!r}, "w").write(str(done + 1))
            os.write(2, b"pretending the replay crashed\\n")
            os.kill(os.getpid(), signal.SIGSEGV)
        return result
    os.dup2 = crashing_dup2
""")
            path = expandable_trace(directory)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(hooks), os.environ.get("PYTHONPATH", "")]))
            completed = run_driver(path, env=env)
            forks_killed = count.read_text()
            _, result = driver_result(path)
        (rerun,) = json.loads(completed.stdout)["traces"][0]["results"]
        self.assertEqual(forks_killed, "2")
        self.assertEqual(rerun["device_calls"], result["device_calls"])
        self.assertEqual(rerun["peak_reserved_bytes"], result["peak_reserved_bytes"])
        self.assertEqual(completed.stderr.count("was killed by SIGSEGV before its result"), 2,
                         completed.stderr)
        self.assertIn("pretending the replay crashed", completed.stderr)

    def test_a_server_that_started_cuda_is_an_error_not_a_retry(self):
        """Each fork must start CUDA itself (its device is sized first): a server that started
        CUDA before forking makes every replay fail, and the run ends at once with the fork's
        error."""
        with tempfile.TemporaryDirectory() as directory:
            hooks = pathlib.Path(directory) / "hooks"
            hooks.mkdir()
            (hooks / "sitecustomize.py").write_text(
                "import sys\n"
                "if '--serve' in sys.argv:\n"
                "    import torch\n"
                "    torch.cuda.init()\n")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(hooks), os.environ.get("PYTHONPATH", "")]))
            completed = run_driver(expandable_trace(directory), env=env, check=False)
        self.assertEqual(completed.returncode, 1, completed.stderr)
        self.assertIn("exited with 1 and gave no result", completed.stderr)
        self.assertIn("Cannot re-initialize CUDA in forked subprocess", completed.stderr)
        self.assertNotIn("running it again", completed.stderr)
        self.assertEqual(completed.stdout, "")

    def test_a_replay_process_killed_every_time_is_an_error(self):
        with tempfile.TemporaryDirectory() as directory:
            python = self.crashing_python(directory, crashes=3)
            completed = run_driver(expandable_trace(directory), "--python", python, check=False)
            crashes = (pathlib.Path(directory) / "crashes").read_text().strip()
        self.assertEqual(completed.returncode, 1, completed.stderr)
        self.assertIn("was killed by SIGSEGV in each of 3 runs and gave no result",
                      completed.stderr)
        self.assertEqual(crashes, "3")  # no fourth attempt

    def test_bad_trace_is_exit_2(self):
        with tempfile.TemporaryDirectory() as directory:
            bad = pathlib.Path(directory) / "bad.csv"
            bad.write_text("op,id,size,stream\nalloc,0,100,0\nfree,1,100,0\n")
            completed = run_driver(bad, check=False)
            self.assertEqual(completed.returncode, 2)
            self.assertIn("bad.csv: line 3: free of id 1, not live", completed.stderr)


class ReplayToolTorchAllocators(unittest.TestCase):
    def replay_tool(self):
        tool = os.environ.get("CUDACACHE_REPLAY")
        if not tool:
            self.skipTest("CUDACACHE_REPLAY (the cudacache-replay binary) is not set")
        return tool

    def test_torch_allocators_beside_cudacaches_pytorch_policy(self):
        tool = self.replay_tool()
        with tempfile.TemporaryDirectory() as directory:
            path = small_trace(directory)
            out = pathlib.Path(directory) / "replay.json"
            completed = subprocess.run(
                [tool, "--allocators", "pytorch,torch-native,torch-expandable",
                 "--min-capacity", "--json", str(out), str(path)],
                capture_output=True, text=True, timeout=1200)
            self.assertEqual(completed.returncode, 0, completed.stdout + completed.stderr)
            self.assertIn("torch-native", completed.stdout)
            (trace,) = json.loads(out.read_text())["traces"]
            results = {r["allocator"]: r for r in trace["results"]}
        native, policy = results["torch-native"], results["pytorch"]
        # cudacache configured as PyTorch's policy and PyTorch itself agree on every figure,
        # device calls by kind and their estimated cost included.
        for key in SAME_POLICY_KEYS:
            self.assertEqual(native[key], policy[key], key)
        self.assertEqual(tuple(native["device_calls"]), CALL_KINDS)
        self.assertGreater(native["estimated_device_call_seconds"], 0)
        self.assertIsNotNone(results["torch-expandable"]["min_capacity_bytes"])
        self.assertEqual(tuple(results["torch-expandable"]["device_calls"]), CALL_KINDS)

    def test_pytorch_expandable_beside_torch_expandable(self):
        """cudacache as PyTorch's expandable-segments policy against PyTorch's own: needs
        cudacache's expandable_segments:True."""
        tool = self.replay_tool()
        with tempfile.TemporaryDirectory() as directory:
            paths = [small_trace(directory), expandable_trace(directory)]
            out = pathlib.Path(directory) / "replay.json"
            completed = subprocess.run(
                [tool, "--allocators", "pytorch-expandable,torch-expandable", "--min-capacity",
                 "--json", str(out), *map(str, paths)],
                capture_output=True, text=True, timeout=1200)
            self.assertEqual(completed.returncode, 0, completed.stdout + completed.stderr)
            traces = json.loads(out.read_text())["traces"]
        for trace in traces:
            results = {r["allocator"]: r for r in trace["results"]}
            ours, theirs = results["pytorch-expandable"], results["torch-expandable"]
            for key in SAME_POLICY_KEYS:
                self.assertEqual(ours[key], theirs[key], f"{trace['name']}: {key}")

    def test_recorded_trace_through_the_tool(self):
        tool = self.replay_tool()
        path = trace_path("decomfl_zo_federated_opt_finetune")
        with tempfile.TemporaryDirectory() as directory:
            out = pathlib.Path(directory) / "replay.json"
            completed = subprocess.run([tool, "--allocators", "torch-native", "--json", str(out),
                                        str(path)], capture_output=True, text=True, timeout=600)
            self.assertEqual(completed.returncode, 0, completed.stdout + completed.stderr)
            (result,) = json.loads(out.read_text())["traces"][0]["results"]
        self.assertEqual(result["peak_reserved_bytes"],
                         RECORDED_PEAK_RESERVED["decomfl_zo_federated_opt_finetune"])
        self.assertEqual(result["device_mallocs"], 61)  # the recording's segment_alloc count
        self.assertEqual(result["device_calls"]["malloc"], 61)
        self.assertEqual(sum(result["device_calls"].values()), 61)


if __name__ == "__main__":
    torchsim.main()
