#!/usr/bin/env python3
"""Issue #11's targets on any set of traces, from cudacache-replay's JSON: the smallest device
(--min-capacity), held memory and calls with room (the same run's default device), and calls on
a device of 1.02 x the peak (--capacity-factor 1.02). Prints a Markdown table and the count of
traces missing each target. The rules are bench/RESULTS.md's ("The targets of cudacache's own
policy"); te is pytorch-expandable. With a third run (--capacity-factor 2, cudacache and
pytorch-expandable), it also compares the two on a device of twice the peak, a GPU somewhat
larger than the program needs: not one of the targets, but where a policy tuned for a device
that never refuses and one just above the peak can do worst. With --pages and the first two
runs made again under CUDASIM_MALLOC_PAGE=2MiB (cudaMalloc's memory in 2 MiB pages, as
PyTorch's pull request 17120 describes the driver), it adds a line: the targets under that model.

With --misses-only, the table lists only the traces that miss a target (bench/random_programs.sh,
hundreds of them).

    check_targets.py MIN_CAPACITY_JSON PRESSURE_JSON [TWICE_THE_PEAK_JSON] [--pages MIN PRESSURE]
                     [--misses-only]
"""

import json
import math
import pathlib
import sys

# The targets' numbers come from the script that writes RESULTS.md, so that the two agree.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "replay"))
from write_results import (HELD_LIMIT, MEMORY_LIMIT, MEMORY_SLACK_BYTES,  # noqa: E402
                           TIE_BYTES, TIE_RATIO)

ALLOCATORS = ("cudacache", "pytorch-expandable", "cub", "nocache")


def result(trace, allocator):
    found = [r for r in trace["results"] if r["allocator"] == allocator]
    if not found:
        raise ValueError(f"trace {trace['name']}: no result for {allocator}")
    return found[0]


def within_tie(bytes_, other):
    """At most 0.2 % or one 2 MiB step above `other`'s smallest device."""
    theirs = other["min_capacity_bytes"]
    return bytes_ <= max(theirs * TIE_RATIO, theirs + TIE_BYTES)


def check(minimum, pressure):
    """Rows (one per trace) and counts of misses; `minimum` and `pressure` are the parsed JSON."""
    under_pressure = {t["name"]: t for t in pressure["traces"]}
    rows, misses = [], {"smallest device": 0, "held with room": 0, "calls with room": 0,
                        "calls under pressure": 0}
    logs = {a: [] for a in ALLOCATORS[:3]}
    for trace in minimum["traces"]:
        if trace["name"] not in under_pressure:
            raise ValueError(f"trace {trace['name']}: not in the pressure run")
        cc, te, cub, none = (result(trace, a) for a in ALLOCATORS)
        peak = trace["peak_requested_bytes"]
        for allocator, r in zip(ALLOCATORS, (cc, te, cub)):
            if r["min_capacity_bytes"] is not None:  # null: no device up to the default one
                logs[allocator].append(math.log(r["min_capacity_over_requested"]))
        smallest = cc["min_capacity_bytes"]
        floor = (none["min_capacity_bytes"] or 0) + MEMORY_SLACK_BYTES
        # A te or CUB that found no device sets no bound; a cudacache that found none misses.
        memory = smallest is not None and smallest <= max(MEMORY_LIMIT * peak, floor) and all(
            other["min_capacity_bytes"] is None or within_tie(smallest, other) for other in (te, cub))
        held = cc["reserved_over_requested"] <= max(HELD_LIMIT, cub["reserved_over_requested"])
        calls = cc["estimated_device_call_seconds"] <= te["estimated_device_call_seconds"]
        p = under_pressure[trace["name"]]
        pcc, pte = result(p, "cudacache"), result(p, "pytorch-expandable")
        another_completes = any(not r["oom"] for r in p["results"] if r["allocator"] != "cudacache")
        pressed = (not pcc["oom"] or not another_completes) and (
            pte["oom"] or pcc["oom"]
            or pcc["estimated_device_call_seconds"] <= pte["estimated_device_call_seconds"])
        verdicts = (memory, held, calls, pressed)
        for key, ok in zip(misses, verdicts):
            misses[key] += not ok

        def mark(ok):
            return "" if ok else " **missing**"

        def ms(r):
            return "OOM" if r["oom"] else f"{r['estimated_device_call_seconds'] * 1e3:.1f}"

        def ratio(r):
            value = r["min_capacity_over_requested"]
            return "no device found" if value is None else f"{value:.4f}"

        rows.append(
            f"| `{trace['name']}` | {ratio(cc)} / {ratio(te)} / {ratio(cub)} / "
            f"{floor / peak:.4f}{mark(memory)} | {cc['reserved_over_requested']:.3f} "
            f"({cub['reserved_over_requested']:.3f}){mark(held)} | {ms(cc)} / {ms(te)}{mark(calls)} | "
            f"{ms(pcc)} / {ms(pte)}{mark(pressed)} |")
    means = {a: math.exp(sum(v) / len(v)) if v else float("nan") for a, v in logs.items()}
    return rows, misses, means


def twice_the_peak(run):
    """One line comparing cudacache with te on each trace of a --capacity-factor 2 run: calls
    (in all, and the traces where cudacache's cost more) and held memory (the traces where
    cudacache holds more, by more than 0.1 %), each with its worst trace; a trace either ran out
    of memory on is named as left out."""
    calls = {"cudacache": 0.0, "pytorch-expandable": 0.0}
    dearer, fuller, refused = [], [], []
    for trace in run["traces"]:
        cc, te = result(trace, "cudacache"), result(trace, "pytorch-expandable")
        if cc["oom"] or te["oom"]:
            refused.append(trace["name"])  # not compared: named at the end of the line
            continue
        for allocator, r in (("cudacache", cc), ("pytorch-expandable", te)):
            calls[allocator] += r["estimated_device_call_seconds"] * 1e3
        ratio = cc["estimated_device_call_seconds"] / max(te["estimated_device_call_seconds"], 1e-12)
        if ratio > 1:
            dearer.append((ratio, trace["name"], cc, te))
        if cc["reserved_over_requested"] > te["reserved_over_requested"] * 1.001:
            fuller.append((cc["reserved_over_requested"] / te["reserved_over_requested"],
                           trace["name"], cc, te))
    line = (f"On a device of 2 x the peak (not a target): calls {calls['cudacache']:,.1f} ms in "
            f"all against te's {calls['pytorch-expandable']:,.1f}, above te's on {len(dearer)}")
    if dearer:
        _, name, cc, te = max(dearer)
        line += (f" (most: `{name}`, {cc['estimated_device_call_seconds'] * 1e3:.1f} against "
                 f"{te['estimated_device_call_seconds'] * 1e3:.1f} ms)")
    line += f"; holding more than te on {len(fuller)}"
    if fuller:
        _, name, cc, te = max(fuller)
        line += (f" (most: `{name}`, {cc['reserved_over_requested']:.3f} against "
                 f"{te['reserved_over_requested']:.3f} x the peak)")
    if refused:
        line += f"; left out, out of memory: {', '.join(f'`{name}`' for name in refused)}"
    return line + "."


def summary(misses, means, count):
    """The geometric means and the count of misses, as the table's last lines give them."""
    return (f"smallest device, geometric mean: cudacache {means['cudacache']:.4f}, "
            f"te {means['pytorch-expandable']:.4f}, cub {means['cub']:.4f}; traces missing each "
            f"target, of {count}: " + ", ".join(f"{key} {n}" for key, n in misses.items()) + ".")


def main(argv):
    args = list(argv[1:])
    misses_only = "--misses-only" in args
    if misses_only:
        args.remove("--misses-only")
    pages = None
    if "--pages" in args:
        at = args.index("--pages")
        pages = args[at + 1:at + 3]
        del args[at:at + 3]
    if len(args) not in (2, 3) or (pages is not None and len(pages) != 2):
        print("\n".join(__doc__.strip().splitlines()[-2:]).strip(), file=sys.stderr)
        return 2
    try:
        with open(args[0]) as f:
            minimum = json.load(f)
        with open(args[1]) as f:
            pressure = json.load(f)
        rows, misses, means = check(minimum, pressure)
        twice = None
        if len(args) == 3:
            with open(args[2]) as f:
                twice = twice_the_peak(json.load(f))
        paged = None
        if pages is not None:
            with open(pages[0]) as f:
                paged_minimum = json.load(f)
            with open(pages[1]) as f:
                paged_rows, paged_misses, paged_means = check(paged_minimum, json.load(f))
            paged = summary(paged_misses, paged_means, len(paged_rows))
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"check_targets.py: {error}", file=sys.stderr)
        return 2
    print("| trace | smallest device: cudacache / te / cub / nocache + 4 MiB | held with room: "
          "cudacache (cub) | calls with room, ms: cudacache / te | at 1.02 x, ms: cudacache / te |")
    print("|---|---|---|---|---|")
    print("\n".join(row for row in rows if not misses_only or "**missing**" in row))
    print(f"\nSmallest device, geometric mean: cudacache {means['cudacache']:.4f}, "
          f"te {means['pytorch-expandable']:.4f}, cub {means['cub']:.4f}.")
    print(f"Traces missing each target, of {len(rows)}: "
          + ", ".join(f"{key} {count}" for key, count in misses.items()) + ".")
    if twice is not None:
        print(twice)
    if paged is not None:
        print(f"With cudaMalloc in 2 MiB pages (CUDASIM_MALLOC_PAGE=2MiB): {paged}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
