"""Shared helpers of the PyTorch-on-cudasim tests.

Each scenario runs in a fresh Python subprocess (allocator state, and cudacache.torch.install(),
which must precede CUDA initialization) with cudasim's three libraries preloaded:
libcudart.so.13 (in place of NVIDIA's, which torch's libraries find through their RPATH, so
LD_LIBRARY_PATH alone is not enough), libcuda.so.1 and libnvidia-ml.so.1 (which PyTorch
dlopens). CTest sets CUDASIM_DIR (where those libraries are), CUDACACHE_LIBRARY and PYTHONPATH.

A test file run without torch installed prints "skipped: torch not installed" and exits 77,
which CTest reports as skipped (SKIP_RETURN_CODE).
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import unittest

SKIP_RETURN_CODE = 77
REPO = pathlib.Path(__file__).resolve().parents[2]
CUDASIM_LIBRARIES = ("libcudart.so.13", "libcuda.so.1", "libnvidia-ml.so.1")

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


def torch_installed():
    return importlib.util.find_spec("torch") is not None


def cudasim_dir():
    directory = os.environ.get("CUDASIM_DIR")
    if not directory:
        raise unittest.SkipTest("CUDASIM_DIR is not set (run these tests through CTest)")
    return pathlib.Path(directory)


def cudasim_environment(capacity="8GiB", devices=1, alloc_conf=None, extra=None):
    """The environment of a Python process running PyTorch on cudasim."""
    directory = cudasim_dir()
    env = dict(os.environ)
    preload = [str(directory / name) for name in CUDASIM_LIBRARIES]
    if env.get("LD_PRELOAD"):
        preload.append(env["LD_PRELOAD"])
    env["LD_PRELOAD"] = ":".join(preload)
    env["CUDASIM_CAPACITY"] = str(capacity)
    env["CUDASIM_DEVICES"] = str(devices)
    env.pop("CUDASIM_REPORT", None)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if alloc_conf is not None:
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    # TORCHSIM_INSTALLED=1 (tests/wheel): the cudacache package pip installed, not the tree's.
    python_path = [str(pathlib.Path(__file__).parent)]
    if not env.get("TORCHSIM_INSTALLED"):
        python_path.insert(0, str(REPO / "tools" / "python"))
    if env.get("PYTHONPATH"):
        python_path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = ":".join(python_path)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


class ScenarioError(AssertionError):
    pass


def run_scenario(code, timeout=300, controls=False, **environment):
    """Runs `code` in a fresh interpreter on cudasim; returns what it passed to report().

    The code gets `torch` imported and a `report(obj)` function that prints obj as the
    process's JSON result; with controls=True also cudasim_counters(), hold_stream(s) and
    release_stream(s) (CUDASIM_CONTROLS). A non-zero exit fails with the process's output.
    """
    prelude = textwrap.dedent("""\
        import json as _json, sys as _sys, warnings as _warnings
        _warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        import torch
        def report(obj):
            print("@@RESULT@@" + _json.dumps(obj), flush=True)
        """)
    completed = subprocess.run(
        [sys.executable, "-c",
         prelude + (CUDASIM_CONTROLS if controls else "") + textwrap.dedent(code)],
        env=cudasim_environment(**environment), capture_output=True, text=True, timeout=timeout)
    output = completed.stdout + completed.stderr
    if completed.returncode != 0:
        raise ScenarioError(f"scenario exited with {completed.returncode}:\n{output}")
    for line in completed.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            result = json.loads(line[len("@@RESULT@@"):])
            if isinstance(result, dict):
                result.setdefault("_stderr", completed.stderr)
            return result
    raise ScenarioError(f"scenario reported nothing:\n{output}")


# Code for scenarios: cudasim's test controls through ctypes on the runtime already loaded.
CUDASIM_CONTROLS = """
import ctypes
class _Counters(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in
                ("mallocs", "frees", "maps", "unmaps", "in_use_bytes", "peak_bytes")]
_cudasim = ctypes.CDLL("libcudart.so.13")
assert hasattr(_cudasim, "cudasim_get_counters"), "not running on cudasim"
_cudasim.cudasim_hold_stream.argtypes = [ctypes.c_void_p]
_cudasim.cudasim_release_stream.argtypes = [ctypes.c_void_p]
def cudasim_counters(device=0):
    c = _Counters()
    assert _cudasim.cudasim_get_counters(device, ctypes.byref(c)) == 0
    return {n: getattr(c, n) for n, _ in _Counters._fields_}
def hold_stream(stream):
    assert _cudasim.cudasim_hold_stream(stream.cuda_stream) == 0
def release_stream(stream):
    assert _cudasim.cudasim_release_stream(stream.cuda_stream) == 0
"""


# Code for scenarios (controls=True): a block freed while a stream that used it is held stays
# out of reuse until that stream completes. Leaves `side` (the stream), `old` (the freed
# block's address), `while_held` and `after` (what allocations of the same size got while
# `side` was held and after it completed) for the code that follows.
RECORD_STREAM_SCENARIO = """
side = torch.cuda.Stream()
x = torch.empty(256, device="cuda")
old = x.data_ptr()
hold_stream(side)
x.record_stream(side)
del x                                  # event recorded on `side`, still pending
y = torch.empty(256, device="cuda")
while_held = y.data_ptr()
release_stream(side)
side.synchronize()
z = torch.empty(256, device="cuda")    # malloc polls the events: the block is free
after = z.data_ptr()
"""


def record_stream_scenario(then):
    """RECORD_STREAM_SCENARIO followed by `then` (indented like the other scenarios' code)."""
    return RECORD_STREAM_SCENARIO + textwrap.dedent(then)


def assert_record_stream_delayed_reuse(test, result):
    """What RECORD_STREAM_SCENARIO shows when its `report` passes old, while_held and after."""
    test.assertNotEqual(result["while_held"], result["old"])
    test.assertEqual(result["after"], result["old"])


def main():
    """unittest.main(), or exit 77 (skipped) when torch is not installed."""
    if not torch_installed():
        print("skipped: torch not installed (pip install -r requirements-torch.txt)")
        sys.exit(SKIP_RETURN_CODE)
    unittest.main(verbosity=2)
