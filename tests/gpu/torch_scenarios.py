"""PyTorch scenarios run once under cudacache and once under PyTorch's own allocator.

    python3 tests/gpu/torch_scenarios.py run --allocator cudacache --out cudacache.json
    python3 tests/gpu/torch_scenarios.py run --allocator pytorch --out pytorch.json
    python3 tests/gpu/torch_scenarios.py compare pytorch.json cudacache.json

Each `run` is its own process (PyTorch cannot change allocator once CUDA is initialized). Each
scenario records numbers or an error and never stops the others; the out-of-memory scenario
runs last because a mishandled out-of-memory can leave the CUDA context unusable. `compare`
prints the two runs side by side and a summary table last. Needs a GPU and PyTorch 2.1+;
run_gpu_checks.sh drives it.
"""

import argparse
import json
import os
import pickle
import sys
import tempfile
import time
import traceback

MiB = 1 << 20
LOSS_STEPS = 200
TIMED_STEPS = 300


def run_scenarios(allocator):
    import torch

    guard = None
    if allocator == "cudacache":
        import cudacache.torch

        cudacache.torch.install()
        guard = cudacache.torch.raise_on_oom
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible to PyTorch")
    oom_error = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    results = {"allocator": allocator, "torch": torch.__version__,
               "torch_cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0)}
    if allocator == "cudacache":
        import cudacache

        results["library"] = cudacache.library_path()

    def scenario(name):
        def wrap(function):
            start = time.perf_counter()
            try:
                results[name] = function()
            except Exception as error:  # recorded, and the next scenario still runs
                results[name] = {"error": f"{type(error).__name__}: {error}",
                                 "traceback": traceback.format_exc(limit=4)}
            results[name]["seconds"] = round(time.perf_counter() - start, 2)
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception as error:
                results[name]["after"] = f"{type(error).__name__}: {error}"
            return function
        return wrap

    def mlp(width=1024, depth=3):
        layers = []
        for _ in range(depth):
            layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).cuda()

    @scenario("loss_accumulated_without_item")
    def _():
        # The classic leak: a validation loss summed as a tensor (no .item(), no no_grad)
        # keeps every step's graph, and its saved activations, alive.
        torch.manual_seed(0)
        model = mlp()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
        x_val = torch.randn(64, 1024, device="cuda")
        total = 0
        after_first = None
        for step in range(LOSS_STEPS):
            x = torch.randn(64, 1024, device="cuda")
            loss = model(x).square().mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total = total + model(x_val).square().mean()
            if step == 0:
                torch.cuda.synchronize()
                after_first = torch.cuda.memory_allocated()
        torch.cuda.synchronize()
        after_all = torch.cuda.memory_allocated()
        return {"allocated_after_step_1": after_first, "allocated_after_all": after_all,
                "growth_bytes": after_all - after_first, "steps": LOSS_STEPS,
                "reserved": torch.cuda.memory_reserved()}

    @scenario("growth_detector_names_the_leak")
    def _():
        # The same leak under cudacache's growth detector (cudacache.torch.watch_growth): the
        # warning must name the line that accumulates the loss. PyTorch's allocator has none.
        if allocator != "cudacache":
            return {"not_applicable": "PyTorch's allocator has no growth detector"}
        import warnings

        torch.manual_seed(0)
        model = mlp()
        x_val = torch.randn(64, 1024, device="cuda")
        total = 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            watch = cudacache.torch.watch_growth(steps=3)
            for step in range(10):
                total = total + model(x_val).square().mean(); leak_line = sys._getframe().f_lineno
                watch.step()
            watch.stop()
        messages = [str(w.message) for w in caught
                    if issubclass(w.category, cudacache.torch.MemoryGrowthWarning)]
        report = watch.report()
        return {"warnings": len(messages), "names_line": any(f":{leak_line} in " in m
                                                              for m in messages),
                "sites": len(report["sites"]), "found_at_step": report["step"],
                "message": messages[0][:600] if messages else None}

    @scenario("eval_with_and_without_no_grad")
    def _():
        torch.manual_seed(0)
        model = mlp(width=2048, depth=4)
        x = torch.randn(512, 2048, device="cuda")
        figures = {}
        for label, context in (("grad", torch.enable_grad), ("no_grad", torch.no_grad)):
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            with context():
                out = model(x)
            torch.cuda.synchronize()
            figures[f"{label}_current_delta"] = torch.cuda.memory_allocated() - base
            figures[f"{label}_peak_delta"] = torch.cuda.max_memory_allocated() - base
            del out
        return figures

    @scenario("empty_cache_shrinks_reserved")
    def _():
        tensors = [torch.empty(64 * MiB // 4, device="cuda") for _ in range(10)]
        del tensors
        torch.cuda.synchronize()
        before = torch.cuda.memory_reserved()
        torch.cuda.empty_cache()
        after = torch.cuda.memory_reserved()
        return {"reserved_before": before, "reserved_after": after,
                "released": before - after, "allocated": torch.cuda.memory_allocated()}

    @scenario("training_steps_per_second")
    def _():
        torch.manual_seed(0)
        model = mlp(width=2048, depth=4)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        generator = torch.Generator().manual_seed(1)

        def step():
            batch = int(torch.randint(32, 257, (1,), generator=generator))  # varying shapes
            x = torch.randn(batch, 2048, device="cuda")
            loss = model(x).square().mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        for _ in range(20):
            step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(TIMED_STEPS):
            step()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        return {"steps": TIMED_STEPS, "steps_per_second": round(TIMED_STEPS / elapsed, 1),
                "peak_allocated": torch.cuda.max_memory_allocated(),
                "peak_reserved": torch.cuda.max_memory_reserved()}

    @scenario("snapshot_opens_in_memory_viz")
    def _():
        from torch.cuda import _memory_viz

        keep = [torch.empty(n, device="cuda") for n in (1000, 300_000, 3 * MiB, 9 * MiB)]
        with tempfile.TemporaryDirectory() as temp:
            path = os.path.join(temp, "snapshot.pickle")
            torch.cuda.memory._dump_snapshot(path)
            with open(path, "rb") as file:
                raw = file.read()
        snapshot = pickle.loads(raw)
        summary = _memory_viz.segsum(snapshot)  # asserts that blocks add up to segments
        _memory_viz.trace(snapshot)
        html = _memory_viz.trace_plot(snapshot)
        flame = _memory_viz.segments(snapshot, format_flamegraph=lambda lines: lines)
        del keep
        return {"pickle_protocol": raw[1], "segments": len(snapshot["segments"]),
                "devices_in_traces": len(snapshot["device_traces"]),
                "segsum_lines": len(summary.splitlines()), "html_bytes": len(html),
                "flamegraph_lines": len(flame.splitlines())}

    @scenario("stats_functions_answer")
    def _():
        keep = torch.empty(1 << 20, device="cuda")
        stats = torch.cuda.memory_stats()
        summary = torch.cuda.memory_summary()
        del keep
        return {"memory_stats_keys": len(stats),
                "allocated_bytes.all.current": stats.get("allocated_bytes.all.current"),
                "memory_summary_lines": len(summary.splitlines())}

    @scenario("oom_caught_then_normal_work")
    def _():
        figures = {}
        if guard is not None:
            # What an unguarded out-of-memory looks like under the pluggable ABI.
            try:
                silent = torch.empty(1024, 1024, 1024, 64, device="cuda")
                figures["unguarded_data_ptr"] = silent.untyped_storage().data_ptr()
                del silent
            except Exception as error:
                figures["unguarded_raised"] = f"{type(error).__name__}: {str(error)[:200]}"
        try:
            if guard is not None:
                with guard():
                    huge = torch.empty(1024, 1024, 1024, 64, device="cuda")
            else:
                huge = torch.empty(1024, 1024, 1024, 64, device="cuda")
            del huge
            figures["caught"] = "no exception"
        except oom_error as error:
            figures["caught"] = type(error).__module__ + "." + type(error).__qualname__
            figures["message"] = str(error)[:300]
        x = torch.randn(2048, 2048, device="cuda")
        y = (x @ x).sum().item()
        torch.cuda.synchronize()
        figures["normal_work_after"] = "ok" if y == y else "nan"
        figures["num_ooms"] = torch.cuda.memory_stats().get("num_ooms")
        return figures

    return results


ROWS = [
    ("loss_accumulated_without_item", "growth_bytes", "memory growth over 200 steps (B)"),
    ("growth_detector_names_the_leak", "names_line", "growth warning names the leak's line"),
    ("eval_with_and_without_no_grad", "grad_current_delta", "eval with grad: current (B)"),
    ("eval_with_and_without_no_grad", "grad_peak_delta", "eval with grad: peak (B)"),
    ("eval_with_and_without_no_grad", "no_grad_current_delta", "eval no_grad: current (B)"),
    ("eval_with_and_without_no_grad", "no_grad_peak_delta", "eval no_grad: peak (B)"),
    ("empty_cache_shrinks_reserved", "reserved_before", "reserved before empty_cache (B)"),
    ("empty_cache_shrinks_reserved", "reserved_after", "reserved after empty_cache (B)"),
    ("training_steps_per_second", "steps_per_second", "training steps per second"),
    ("training_steps_per_second", "peak_reserved", "training peak reserved (B)"),
    ("snapshot_opens_in_memory_viz", "segments", "snapshot segments (memory_viz)"),
    ("stats_functions_answer", "memory_stats_keys", "memory_stats() keys"),
    ("oom_caught_then_normal_work", "caught", "256 GiB torch.empty caught as"),
    ("oom_caught_then_normal_work", "normal_work_after", "normal work after OOM"),
]


def _figure(run, scenario, key):
    return run.get(scenario, {}).get(key)


def _close(a, b, tolerance):
    return a is not None and b is not None and abs(a - b) <= tolerance * max(abs(a), 1)


def _works_like_pytorch(scenario, pytorch, cudacache):
    """What passing means for each scenario (a missing figure raises TypeError)."""
    def mine(key):
        return _figure(cudacache, scenario, key)

    def same(key, tolerance=0.05):
        return _close(_figure(pytorch, scenario, key), mine(key), tolerance)

    if scenario == "loss_accumulated_without_item":
        return same("growth_bytes") and mine("growth_bytes") > 0
    if scenario == "growth_detector_names_the_leak":
        return mine("warnings") == 1 and mine("names_line") is True
    if scenario == "eval_with_and_without_no_grad":
        keys = ("grad_current_delta", "no_grad_current_delta", "grad_peak_delta",
                "no_grad_peak_delta")
        return all(same(key) for key in keys) and \
            mine("no_grad_peak_delta") < mine("grad_current_delta")
    if scenario == "empty_cache_shrinks_reserved":
        return mine("released") > 0
    if scenario == "training_steps_per_second":
        return mine("steps_per_second") >= 0.9 * _figure(pytorch, scenario, "steps_per_second")
    if scenario == "snapshot_opens_in_memory_viz":
        return mine("segments") > 0 and mine("pickle_protocol") <= 4
    if scenario == "stats_functions_answer":
        return mine("memory_stats_keys") >= 60
    if scenario == "oom_caught_then_normal_work":
        return mine("caught") != "no exception" and mine("normal_work_after") == "ok"
    raise ValueError(scenario)


def verdicts(pytorch, cudacache):
    """(scenario, verdict) for every scenario: ok, DIFFERS, ERROR or MISSING."""
    out = []
    for scenario in dict.fromkeys(name for name, _, _ in ROWS):
        if any(scenario not in run for run in (pytorch, cudacache)):
            verdict = "MISSING"
        elif any("error" in run[scenario] for run in (pytorch, cudacache)):
            verdict = "ERROR"
        else:
            try:
                verdict = "ok" if _works_like_pytorch(scenario, pytorch, cudacache) else "DIFFERS"
            except TypeError:
                verdict = "DIFFERS"
        out.append((scenario, verdict))
    return out


def compare(pytorch_path, cudacache_path):
    runs = []
    for path in (pytorch_path, cudacache_path):
        try:
            with open(path) as file:
                runs.append(json.load(file))
        except (OSError, ValueError) as error:
            runs.append({"error": f"no results ({error})"})
    pytorch, cudacache = runs
    for label, run in (("pytorch", pytorch), ("cudacache", cudacache)):
        print(f"{label}: torch {run.get('torch')} (CUDA {run.get('torch_cuda')}) on "
              f"{run.get('device')} {run.get('library', '')} {run.get('error', '')}")
    print()
    print(f"{'':42} {'pytorch':>26} {'cudacache':>26}")
    for scenario, key, label in ROWS:
        cells = []
        for run in runs:
            result = run.get(scenario, {})
            cells.append("ERROR" if "error" in result else str(result.get(key, "-")))
        print(f"{label:42} {cells[0]:>26.26} {cells[1]:>26.26}")
    for run, label in ((pytorch, "pytorch"), (cudacache, "cudacache")):
        for scenario, result in run.items():
            if isinstance(result, dict) and "error" in result:
                print(f"\n{label} / {scenario}: {result['error']}\n{result.get('traceback', '')}")
    oom = cudacache.get("oom_caught_then_normal_work", {})
    if "unguarded_data_ptr" in oom:
        print(f"\ncudacache: an unguarded 256 GiB torch.empty returned a tensor with data_ptr "
              f"{oom['unguarded_data_ptr']} and no exception (pluggable ABI)")
    table = verdicts(pytorch, cudacache)
    print("\nSummary")
    print(f"  {'scenario':40} verdict")
    for scenario, verdict in table:
        print(f"  {scenario:40} {verdict}")
    return 0 if all(verdict == "ok" for _, verdict in table) else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run")
    run.add_argument("--allocator", choices=("pytorch", "cudacache"), required=True)
    run.add_argument("--out", required=True)
    both = commands.add_parser("compare")
    both.add_argument("pytorch")
    both.add_argument("cudacache")
    args = parser.parse_args()
    if args.command == "compare":
        return compare(args.pytorch, args.cudacache)
    results = run_scenarios(args.allocator)
    with open(args.out, "w") as file:
        json.dump(results, file, indent=1)
    print(json.dumps({k: v for k, v in results.items() if not isinstance(v, dict)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
