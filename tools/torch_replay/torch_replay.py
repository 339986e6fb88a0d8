#!/usr/bin/env python3
"""Replays an allocation trace through real PyTorch's CUDA caching allocator on cudasim.

    torch_replay.py TRACE.csv [--expandable] [--conf CONF] [--capacity SIZE]
                    [--min-capacity] [--json FILE] [--cudasim-dir DIR]

TRACE.csv is a replay CSV (header op,id,size,stream; ops alloc, free and empty_cache). Each
alloc is `torch.empty(size, dtype=torch.uint8, device="cuda")` on the trace stream's
torch.cuda.Stream (stream 0 is the default stream), each free drops that tensor, each
empty_cache calls torch.cuda.empty_cache(). The figures are those of `cudacache-replay
--json`, under the allocator name torch-native (PyTorch's defaults) or torch-expandable
(`expandable_segments:True`):

- peak_allocated_bytes / peak_reserved_bytes: PyTorch's own memory_stats()
  (allocated_bytes.all.peak, reserved_bytes.all.peak);
- device_peak_bytes, device_mallocs, device_frees: cudasim's counters of device 0
  (cudasim_get_counters through ctypes), reset when the replay loop starts; with expandable
  segments a cuMemCreate counts as a malloc and a cuMemRelease as a free;
- device_calls: every device call by kind ({"malloc": N, "free": N, "create": N, ...}, the
  fields of cudasim_call_counts, failed calls included; cudasim_get_call_counts), over the same
  loop; null when this cudasim does not count them. cudacache-replay weighs them by its cost
  table into estimated_device_call_seconds (tools/replay/device_call_costs.cpp);
- min_capacity_bytes (--min-capacity): the smallest simulated device, in 2 MiB steps, on which
  the whole trace completes and so does every device up to 0.5 % (at least 16 MiB) larger, by
  the same doubling, bisection and upward check as cudacache-replay, one replay per probe;
- oom, oom_event_index, events_replayed, seconds (the event loop only).

This process does not import torch. It starts one Python process (the server) with cudasim's
libcudart.so.13, libcuda.so.1 and libnvidia-ml.so.1 preloaded (torch's libraries find NVIDIA's
runtime through their RPATH; preloading puts cudasim's in its place) and PYTORCH_CUDA_ALLOC_CONF
set; the server imports torch once and runs each replay in a fork of itself (Note [One import,
a fork per replay]). --cudasim-dir (default: $CUDASIM_DIR) is the directory holding them, e.g.
build/release/tools/cudasim.

Exit status: 0 done (an out-of-memory is a result), 1 a replay process failed, 2 bad command
line or trace, 3 torch is not installed.
"""

import argparse
import csv
import importlib.util
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
CAPACITY_STEP = 2 * MiB  # cudacache-replay's kCapacityResolution
DEFAULT_CAPACITY_FLOOR = 80 << 30
DEFAULT_CAPACITY_HEADROOM = 8
CUDASIM_LIBRARIES = ("libcudart.so.13", "libcuda.so.1", "libnvidia-ml.so.1")
EXIT_NO_TORCH = 3
RESULT_PREFIX = "@@TORCH_REPLAY@@"
# A replay is deterministic, so a replay killed by a signal before its result (the fork that ran
# it, or the server before it forked) is run again, with a note on stderr (its Python stack); a
# crash in every attempt is an error.
CHILD_ATTEMPTS = 3
# The fields of cudasim_call_counts (tools/cudasim/include/cudasim.h), in order
# (tests/replay/test_cudasim_mirrors.py checks them against the header).
CUDASIM_CALL_COUNT_FIELDS = ("malloc", "free", "create", "release", "map", "unmap", "set_access",
                             "synchronize", "reserve", "address_free", "event_create",
                             "event_record", "event_query", "mem_get_info")
# The fields of cudasim_counters, in order.
CUDASIM_COUNTER_FIELDS = ("mallocs", "frees", "maps", "unmaps", "in_use_bytes", "peak_bytes")
# cudasim writes its whole struct; the buffers have room for fields a later cudasim adds at
# the end, so that an older copy of this file never has memory written past a buffer.
CUDASIM_BUFFER_FIELDS = 64
# The keys of "device_calls", as cudacache-replay writes them: the device calls of
# cudasim_call_counts (not the event calls).
CALL_KINDS = ("malloc", "free", "create", "release", "map", "unmap", "set_access", "synchronize",
              "reserve", "address_free", "mem_get_info")


class TraceError(ValueError):
    pass


def parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40,
             "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
             "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
    digits = len(text) - len(text.lstrip("0123456789"))
    if digits == 0 or text[digits:] not in units:
        raise argparse.ArgumentTypeError(f"bad size '{text}' (e.g. 24GiB, 22300MiB, 8GB)")
    return int(text[:digits]) * units[text[digits:]]


def load_trace(path):
    """[(op, id, size, stream)] and a summary like cudacache-replay's trace header."""
    events, live, live_bytes, peak = [], {}, 0, 0
    allocs = frees = empty_caches = 0
    streams = {0}
    try:
        with open(path, newline="") as f:
            rows = csv.reader(f)
            header = next(rows, None)
            if header != ["op", "id", "size", "stream"]:
                raise TraceError(f"{path}: line 1: expected the header op,id,size,stream")
            for line, row in enumerate(rows, start=2):
                if len(row) != 4:
                    raise TraceError(f"{path}: line {line}: expected 4 fields")
                op = row[0]
                try:
                    # empty_cache rows carry no fields: `empty_cache,,,`
                    ident, size, stream = ((None, 0, 0) if op == "empty_cache" and
                                           row[1:] == ["", "", ""] else
                                           (int(row[1]), int(row[2]), int(row[3])))
                except ValueError:
                    raise TraceError(f"{path}: line {line}: id, size and stream must be "
                                     "integers") from None
                if op == "alloc":
                    if ident in live:
                        raise TraceError(f"{path}: line {line}: id {ident} is already live")
                    live[ident] = size
                    live_bytes += size
                    peak = max(peak, live_bytes)
                    allocs += 1
                    streams.add(stream)
                elif op == "free":
                    if ident not in live:
                        raise TraceError(f"{path}: line {line}: free of id {ident}, not live")
                    live_bytes -= live.pop(ident)
                    frees += 1
                elif op == "empty_cache":
                    empty_caches += 1
                else:
                    raise TraceError(f"{path}: line {line}: unknown op '{op}'")
                events.append((op, ident, size, stream))
    except OSError as error:
        raise TraceError(f"{path}: {error.strerror}") from None
    summary = {"name": pathlib.Path(path).stem, "events": len(events), "allocs": allocs,
               "frees": frees, "empty_cache_calls": empty_caches, "streams": len(streams),
               "peak_requested_bytes": peak}
    return events, summary


# ---------------------------------------------------------------------------------------------
# The server: torch imported once, one fork per replay.
#
# Note [One import, a fork per replay]: importing torch takes 1.5-2 s, a replay of a small trace
# a few milliseconds, and a smallest-device search is 10-40 replays, each of which must start
# with a fresh allocator. So the server imports torch without starting CUDA, loads the trace,
# and forks once per replay: the fork sizes cudasim's device (cudasim_set_capacity, before CUDA
# starts in it, so torch reads that size as the device's) and replays, and its exit status goes
# back to the parent. Each fork starts from the server's state, which no replay changes (a
# fork's memory is its own), so a probe is the replay a fresh process would make, without the
# import: 0.02 s instead of about 2 s for a small trace.
# Protocol: the parent writes a line of JSON per replay to the server's stdin ({"capacity": bytes,
# "stdout": path, "stderr": path}: where the fork's output goes); the server answers with a line
# {"status": N}, the fork's exit status, or -signal when a signal killed it. End of input ends
# the server.

def serve(trace_path, label):
    import faulthandler
    import warnings
    faulthandler.enable()  # a crash leaves the Python stack on stderr, for the parent's note
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch  # noqa: F401 (imported once, for every fork)
    events, _ = load_trace(trace_path)
    answers = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        answers.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                redirect(request["stdout"], request["stderr"])
                replay_in_this_process(events, label, request["capacity"])
                status = 0
            except BaseException:  # the fork must not return into the server's loop
                import traceback
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        _, wait_status = os.waitpid(pid, 0)
        status = (-os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status)
                  else os.WEXITSTATUS(wait_status))
        answers.write(json.dumps({"status": status}) + "\n")
        answers.flush()


def redirect(stdout_path, stderr_path):
    """The fork's stdout and stderr to these files, and its stdin from /dev/null (the server's
    stdin is the parent's requests)."""
    for fd, path, mode in ((0, os.devnull, os.O_RDONLY),
                           (1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                           (2, stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, mode, 0o600)
        os.dup2(opened, fd)
        os.close(opened)


def replay_in_this_process(events, label, capacity_bytes):
    import ctypes
    import torch

    # A buffer exactly the size of the fields named here once let cudasim write past it as
    # cudasim_call_counts grew (3 fields, 24 bytes, into the next Python object: the cycle
    # collector then crashed on it after some out-of-memory errors).
    Buffer = ctypes.c_uint64 * CUDASIM_BUFFER_FIELDS

    cudasim = ctypes.CDLL("libcudart.so.13")  # the runtime already loaded: cudasim's
    if not hasattr(cudasim, "cudasim_get_counters"):
        raise RuntimeError("not running on cudasim (preload its libcudart.so.13)")

    def counters():
        raw = Buffer()
        if cudasim.cudasim_get_counters(0, ctypes.byref(raw)) != 0:
            raise RuntimeError("cudasim_get_counters failed")
        return argparse.Namespace(**dict(zip(CUDASIM_COUNTER_FIELDS, raw)))

    def call_counts():
        """{kind: calls} since the last reset, or None when cudasim does not count them."""
        if not hasattr(cudasim, "cudasim_get_call_counts"):
            return None
        raw = Buffer()
        if cudasim.cudasim_get_call_counts(0, ctypes.byref(raw)) != 0:
            raise RuntimeError("cudasim_get_call_counts failed")
        fields = dict(zip(CUDASIM_CALL_COUNT_FIELDS, raw))
        return {kind: fields[kind] for kind in CALL_KINDS}

    # The device's size, before CUDA starts in this process (torch reads it at its start).
    cudasim.cudasim_set_capacity.argtypes = (ctypes.c_int, ctypes.c_size_t)
    if cudasim.cudasim_set_capacity(0, capacity_bytes) != 0:
        raise RuntimeError(f"cudasim_set_capacity(0, {capacity_bytes}) failed")
    torch.cuda.init()
    torch.cuda.set_device(0)
    default = torch.cuda.default_stream()
    streams = {0: default}
    for _, _, _, stream in events:
        if stream not in streams:
            streams[stream] = torch.cuda.Stream()
    capacity = torch.cuda.get_device_properties(0).total_memory
    if capacity != capacity_bytes:
        raise RuntimeError(f"torch sees a device of {capacity} bytes, not the {capacity_bytes} "
                           "set: CUDA started before the replay")
    torch.cuda.reset_peak_memory_stats()
    cudasim.cudasim_reset_counters(0)

    tensors = {}
    oom_index, oom_message = None, ""
    current = default
    empty, uint8 = torch.empty, torch.uint8
    start = time.perf_counter()
    for index, (op, ident, size, stream) in enumerate(events):
        if op == "alloc":
            wanted = streams[stream]
            if wanted is not current:
                torch.cuda.set_stream(wanted)
                current = wanted
            try:
                tensors[ident] = empty(size, dtype=uint8, device="cuda")
            except torch.OutOfMemoryError as error:
                oom_index, oom_message = index, str(error).splitlines()[0]
                break
        elif op == "free":
            del tensors[ident]
        else:
            torch.cuda.empty_cache()
    seconds = time.perf_counter() - start
    torch.cuda.set_stream(default)

    device = counters()
    calls = call_counts()
    stats = torch.cuda.memory_stats()
    result = {
        "allocator": label,
        "peak_allocated_bytes": stats["allocated_bytes.all.peak"],
        "peak_reserved_bytes": stats["reserved_bytes.all.peak"],
        "device_peak_bytes": device.peak_bytes,
        "device_mallocs": device.mallocs,
        "device_frees": device.frees,
        "device_calls": calls,
        "capacity_bytes": capacity,
        "oom": oom_index is not None,
        "oom_event_index": oom_index,
        "oom_message": oom_message,
        "events_replayed": len(events) if oom_index is None else oom_index + 1,
        "seconds": seconds,
        "num_ooms": stats.get("num_ooms", 0),
        "torch_version": torch.__version__,
    }
    tensors.clear()
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------
# The parent: child processes, the capacity search, the report.

def torch_installed(python):
    if python == sys.executable:
        return importlib.util.find_spec("torch") is not None
    probe = subprocess.run([python, "-c", "import importlib.util, sys; "
                            "sys.exit(importlib.util.find_spec('torch') is None)"])
    return probe.returncode == 0


def server_environment(cudasim_dir, alloc_conf):
    env = dict(os.environ)
    preload = [str(pathlib.Path(cudasim_dir) / name) for name in CUDASIM_LIBRARIES]
    if env.get("LD_PRELOAD"):
        preload.append(env["LD_PRELOAD"])
    env["LD_PRELOAD"] = ":".join(preload)
    env.pop("CUDASIM_CAPACITY", None)  # each fork sets its own
    env["CUDASIM_DEVICES"] = "1"
    env.pop("CUDASIM_REPORT", None)
    if alloc_conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return env


class ReplayServer:
    """The server process of one trace and allocator setting (Note [One import, a fork per
    replay]), started when a replay needs it and again after it dies."""

    def __init__(self, args, label, alloc_conf):
        self.command = [args.python, os.path.abspath(__file__), "--serve", "--label", label,
                        args.trace]
        self.env = server_environment(args.cudasim_dir, alloc_conf)
        self.directory = tempfile.TemporaryDirectory(prefix="torch_replay.")
        self.paths = {name: os.path.join(self.directory.name, name)
                      for name in ("server.err", "replay.out", "replay.err")}
        self.process = None
        self.server_err = None

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.stop()
        self.directory.cleanup()

    def stop(self):
        if self.process is not None:
            try:
                self.process.stdin.close()  # end of input ends the server
            except BrokenPipeError:  # it died with a request unread
                pass
            self.process.wait()
            self.process.stdout.close()
            self.process = None
        if self.server_err is not None:
            self.server_err.close()
            self.server_err = None

    def replay(self, capacity):
        """(status, stdout, stderr) of one replay on a device of `capacity` bytes: the fork's
        exit status (-N for signal N), or the server's when it died before answering."""
        if self.process is None:
            self.server_err = open(self.paths["server.err"], "w+")
            self.process = subprocess.Popen(self.command, env=self.env, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=self.server_err,
                                            text=True)
        request = {"capacity": capacity, "stdout": self.paths["replay.out"],
                   "stderr": self.paths["replay.err"]}
        for path in (self.paths["replay.out"], self.paths["replay.err"]):
            pathlib.Path(path).unlink(missing_ok=True)
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
        except BrokenPipeError:
            answer = ""
        if not answer:  # the server died: its own status and output
            status = self.process.wait()
            self.server_err.seek(0)
            output = self.server_err.read()
            self.stop()
            return status, "", output
        outputs = [pathlib.Path(path).read_text() if os.path.exists(path) else ""
                   for path in (self.paths["replay.out"], self.paths["replay.err"])]
        return json.loads(answer)["status"], *outputs


def run_child(server, capacity):
    """A replay's result. A replay killed by a signal before its result is out is run again,
    up to CHILD_ATTEMPTS times in all (see CHILD_ATTEMPTS); any other failure ends the run."""
    for attempt in range(1, CHILD_ATTEMPTS + 1):
        status, stdout, stderr = server.replay(capacity)
        for line in stdout.splitlines():
            if line.startswith(RESULT_PREFIX):
                return json.loads(line[len(RESULT_PREFIX):])
        died = signal_name(status)
        if died is None or attempt == CHILD_ATTEMPTS:
            how = (f"was killed by {died} in each of {attempt} runs" if died else
                   f"exited with {status}")
            raise RuntimeError(f"the PyTorch replay process (capacity {capacity} B) {how} and "
                               f"gave no result:\n{stdout}{stderr}")
        print(f"torch_replay: the PyTorch replay process (capacity {capacity} B) was killed by "
              f"{died} before its result (run {attempt} of at most {CHILD_ATTEMPTS}); running "
              f"it again. Its output:\n{stderr.rstrip()}", file=sys.stderr)
    raise AssertionError("unreachable")


def signal_name(returncode):
    """"SIGSEGV" for a process killed by signal 11, None for one that exited."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def default_capacity(peak_requested):
    scaled = -(-peak_requested * DEFAULT_CAPACITY_HEADROOM // CAPACITY_STEP) * CAPACITY_STEP
    return max(DEFAULT_CAPACITY_FLOOR, scaled)


def find_min_capacity(completes, peak_requested, upper_limit):
    """(bytes or None, probes): cudacache-replay's find_min_capacity, over a predicate."""
    probes = 0

    def ok(steps):
        nonlocal probes
        probes += 1
        return completes(steps * CAPACITY_STEP)

    floor_steps = -(-peak_requested // CAPACITY_STEP)
    failing = max(floor_steps - 1, 0)
    limit_steps = upper_limit // CAPACITY_STEP
    passing = min(max(2 * floor_steps, 1), limit_steps)
    if passing <= failing:
        return None, probes
    while not ok(passing):
        if passing >= limit_steps:
            return None, probes
        failing = passing
        passing = min(2 * passing, limit_steps)
    while passing - failing > 1:
        middle = failing + (passing - failing) // 2
        if ok(middle):
            passing = middle
        else:
            failing = middle
    # Checked upward (Note [Smallest device] in tools/replay/replayer.h): every step up to
    # verified_steps() above the answer completes too; a failure restarts the check past it.
    verified = 1
    step = passing + 1
    while step <= limit_steps and verified <= verified_steps(passing):
        if ok(step):
            verified += 1
        else:
            passing = step + 1
            verified = 0
        step += 1
    if passing > limit_steps:
        return None, probes
    return passing * CAPACITY_STEP, probes


def verified_steps(steps):
    """cudacache-replay's verified_steps: 0.5 % of a size in steps, at least 8 (16 MiB)."""
    return max(8, -(-steps * 5 // 1000))


def replay(args):
    _, summary = load_trace(args.trace)
    label = args.label or ("torch-expandable" if args.expandable else "torch-native")
    conf = ",".join(c for c in (args.conf, "expandable_segments:True" if args.expandable
                                else None) if c)
    capacity = args.capacity or default_capacity(summary["peak_requested_bytes"])
    with ReplayServer(args, label, conf) as server:
        result = run_child(server, capacity)
        result["min_capacity_bytes"] = None
        result["min_capacity_replays"] = 0
        if args.min_capacity:
            def completes(bytes_):
                return not run_child(server, bytes_)["oom"]
            found, probes = find_min_capacity(completes, summary["peak_requested_bytes"],
                                              capacity)
            result["min_capacity_bytes"] = found
            result["min_capacity_replays"] = probes
    peak = summary["peak_requested_bytes"]
    result["reserved_over_requested"] = (result["peak_reserved_bytes"] / peak) if peak else None
    result["min_capacity_over_requested"] = (
        result["min_capacity_bytes"] / peak if peak and result["min_capacity_bytes"] else None)
    result["events_per_second"] = (result["events_replayed"] / result["seconds"]
                                   if result["seconds"] > 0 else None)
    summary["results"] = [result]
    return {"traces": [summary]}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Replay an allocation trace through PyTorch's CUDA caching allocator on "
                    "cudasim and print cudacache-replay's figures as JSON.")
    parser.add_argument("trace", help="replay CSV: op,id,size,stream")
    parser.add_argument("--expandable", action="store_true",
                        help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (torch-expandable)")
    parser.add_argument("--conf", default="", help="further PYTORCH_CUDA_ALLOC_CONF settings")
    parser.add_argument("--capacity", type=parse_size,
                        help="simulated device size (default: max(80GiB, 8x peak requested))")
    parser.add_argument("--min-capacity", action="store_true",
                        help="also find the smallest device (2 MiB steps) that completes")
    parser.add_argument("--json", help="write the JSON here instead of stdout")
    parser.add_argument("--cudasim-dir", default=os.environ.get("CUDASIM_DIR"),
                        help="directory of cudasim's libcudart.so.13, libcuda.so.1 and "
                             "libnvidia-ml.so.1 (default: $CUDASIM_DIR)")
    parser.add_argument("--python", default=sys.executable,
                        help="Python interpreter with torch (default: this one)")
    parser.add_argument("--label", help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    try:
        if args.serve:
            serve(args.trace, args.label or "torch-native")
            return 0
        load_trace(args.trace)  # a bad trace is exit 2 before anything starts
    except TraceError as error:
        print(f"torch_replay: {error}", file=sys.stderr)
        return 2
    if not torch_installed(args.python):
        print("torch_replay: torch is not installed for " + args.python +
              " (pip install -r requirements-torch.txt)", file=sys.stderr)
        return EXIT_NO_TORCH
    if not args.cudasim_dir:
        print("torch_replay: --cudasim-dir (or CUDASIM_DIR) must name the directory of "
              "cudasim's libraries, e.g. build/release/tools/cudasim", file=sys.stderr)
        return 2
    missing = [n for n in CUDASIM_LIBRARIES
               if not (pathlib.Path(args.cudasim_dir) / n).exists()]
    if missing:
        print(f"torch_replay: {args.cudasim_dir} lacks {', '.join(missing)} (build the "
              "cudasim, cudasim_driver and cudasim_nvml targets)", file=sys.stderr)
        return 2
    try:
        report = replay(args)
    except RuntimeError as error:
        print(f"torch_replay: {error}", file=sys.stderr)
        return 1
    text = json.dumps(report, indent=1) + "\n"
    if args.json:
        pathlib.Path(args.json).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
