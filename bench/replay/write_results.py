#!/usr/bin/env python3
"""Writes bench/RESULTS.md from cudacache-replay's --json and bench_replay's JSON output.

Called by bench/results.sh, which runs both tools; standard library only. The section that
starts at WRITTEN_BY_HAND_HEADING in the existing RESULTS.md is written by a person from the
numbers and is carried over unchanged, so a rerun refreshes the tables but never that text.
"""
import argparse
import json
import math
import os
import re
import sys

WRITTEN_BY_HAND_HEADING = "## What the table says"
# "replay/<trace>/<allocator>/manual_time", as bench_replay registers them.
BENCHMARK_NAME = re.compile(r"^replay/(?P<trace>[^/]+)/(?P<allocator>[^/]+)/manual_time$")
# PyTorch's own allocator, which cudacache-replay runs through a Python process
# (tools/torch_replay/torch_replay.py): memory and device calls only, bench_replay has no run.
TORCH_ALLOCATORS = ("torch-native", "torch-expandable")
NOT_TIMED = "n/a (Python)"
# The keys of a result's "device_calls" (cudasim_call_counts' fields), in table order.
CALL_KINDS = ("malloc", "free", "create", "release", "map", "unmap", "set_access", "synchronize",
              "reserve", "address_free", "mem_get_info")


def runs_in_python(allocator):
    return allocator in TORCH_ALLOCATORS


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replay-json", required=True, help="cudacache-replay --json output")
    parser.add_argument("--bench-json", required=True, help="bench_replay --benchmark_out file")
    parser.add_argument("--command", required=True, help="the command that regenerates the file")
    parser.add_argument("--date", required=True)
    parser.add_argument("--machine", required=True, help="CPU model and core count")
    parser.add_argument("--traces", required=True, help="the traces folder (for NAME.meta.json)")
    parser.add_argument("--previous", help="the RESULTS.md being replaced")
    parser.add_argument("--pressure-json",
                        help="cudacache-replay --capacity-factor --json output: the table of "
                             "allocators under pressure")
    parser.add_argument("--pressure-factor", type=float,
                        help="the --capacity-factor of --pressure-json")
    parser.add_argument("--sized-json", action="append", default=[], metavar="FACTOR=FILE",
                        help="cudacache-replay --capacity-factor FACTOR --json output, for the "
                             "table of held memory and calls by device size (repeatable)")
    parser.add_argument("--pages-json", nargs=2, metavar=("MIN_CAPACITY", "PRESSURE"),
                        help="the --min-capacity and --capacity-factor runs made again under "
                             "CUDASIM_MALLOC_PAGE=2MiB, for the table of what changes if "
                             "cudaMalloc takes whole 2 MiB pages")
    parser.add_argument("--torch-missing", metavar="REASON",
                        help="why torch-native and torch-expandable were not run")
    return parser.parse_args()


# The times a run reports per event; of several repetitions of a run, the least of each is kept.
TIMES_PER_EVENT = ("ns_per_event", "allocator_ns_per_event")


def ns_per_event_by_run(bench):
    """{(trace, allocator): run} from bench_replay's JSON; fails on a skipped run.

    With --benchmark_repetitions, a run's repetitions must agree on every counter but the times
    per event, of which the least is kept: the machine is shared, and another process's load
    only ever adds time (the repetitions are interleaved at random, so a burst of load does
    not fall on one allocator's runs only)."""
    found = {}
    for run in bench["benchmarks"]:
        match = BENCHMARK_NAME.match(run["name"])
        if not match or run.get("run_type", "iteration") != "iteration":
            continue
        key = (match["trace"], match["allocator"])
        if run.get("error_occurred"):
            sys.exit(f"write_results.py: {run['name']}: {run.get('error_message')}")
        if key not in found:
            found[key] = dict(run, repetitions=1)
            continue
        kept = found[key]
        for counter in ("device_calls", "device_mallocs_frees", "events"):
            if run.get(counter) != kept.get(counter):
                sys.exit(f"write_results.py: {run['name']}: repetitions disagree on {counter} "
                         f"({kept.get(counter)} and {run.get(counter)})")
        for time in TIMES_PER_EVENT:
            if run.get(time) is not None and kept.get(time) is not None:
                kept[time] = min(kept[time], run[time])
            elif run.get(time) is not None or kept.get(time) is not None:
                sys.exit(f"write_results.py: {run['name']}: {time} only in some repetitions")
        kept["repetitions"] += 1
    return found


def describe_repetitions(counts):
    """How the times per event were taken, for the ns / event column's description."""
    if not counts or counts == {1}:
        return " (one run; the build machine is shared: times move with its load)."
    low, high = min(counts), max(counts)
    told = str(high) if low == high else f"{low}-{high}"
    return (f", the least of {told} repetitions interleaved at random (the build machine is "
            "shared, and another process's load only adds time).")


def total_calls(result):
    """Every device call of a result (the sum of its device_calls), or None when not counted."""
    calls = result.get("device_calls")
    return None if calls is None else sum(calls[kind] for kind in CALL_KINDS)


def check_same_replay(trace, result, run):
    """Both tools replay deterministically on the same device size: their counts must agree.

    bench_replay's counters: device_calls, every call of every kind (the sum of
    cudacache-replay's device_calls); device_mallocs_frees, device_mallocs + device_frees."""
    mallocs_frees = None
    if result["device_mallocs"] is not None and result["device_frees"] is not None:
        mallocs_frees = result["device_mallocs"] + result["device_frees"]
    for counter, replay_count in (("device_calls", total_calls(result)),
                                  ("device_mallocs_frees", mallocs_frees)):
        bench_count = run.get(counter)
        if bench_count is None or replay_count is None:
            continue
        if round(bench_count) != replay_count:
            sys.exit(f"write_results.py: {trace} / {result['allocator']}: cudacache-replay "
                     f"counted {replay_count} {counter}, bench_replay {bench_count:.0f}")


def recorded_pytorch_ratio(traces_dir, name):
    """PyTorch's own peak reserved / peak requested during the recording, from the trace's
    meta file: context for the replay's `pytorch` row, not the same experiment (see the
    traces README)."""
    try:
        with open(os.path.join(traces_dir, name + ".meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        return (meta["pytorch_peak_reserved_from_first_alloc_bytes"] /
                meta["peak_allocated_requested_bytes"])
    except (OSError, KeyError, ZeroDivisionError, json.JSONDecodeError):
        return None


def format_bytes(count):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.2f} {unit}"
    return f"{count} B"


def format_ratio(value):
    return "not found" if value is None else f"{value:.3f}"


def geometric_mean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def format_ms(seconds):
    """An estimated time in milliseconds: "1,234.5", "0.462"; "-" when not counted."""
    if seconds is None:
        return "-"
    milliseconds = seconds * 1e3
    return f"{milliseconds:,.1f}" if milliseconds >= 1 else f"{milliseconds:.3f}"


def format_own_ns(run, own_ns):
    """The allocator's own ns / event (without cudasim's calls): not timed for torch-*, "-"
    when bench_replay could not measure cudasim's share."""
    if run is None:
        return NOT_TIMED
    return "-" if own_ns is None else f"{own_ns:.0f}"


def table_rows(replay, runs, traces_dir):
    """One row per (trace, allocator) for the main table and for the device calls by kind,
    plus per-allocator lists for the summaries."""
    rows = []
    call_rows = []
    per_allocator = {}
    for trace in replay["traces"]:
        for index, result in enumerate(trace["results"]):
            allocator = result["allocator"]
            run = runs.get((trace["name"], allocator))
            if runs_in_python(allocator):
                if run is not None:
                    sys.exit(f"write_results.py: bench_replay timed {trace['name']} / "
                             f"{allocator}, which this table reports as not timed")
            elif run is None:
                sys.exit(f"write_results.py: bench_replay has no run for "
                         f"{trace['name']} / {allocator}")
            else:
                check_same_replay(trace["name"], result, run)
            if result["oom"]:
                sys.exit(f"write_results.py: {trace['name']} / {allocator} ran out of memory")
            calls = total_calls(result)
            estimate = result.get("estimated_device_call_seconds")
            ns = None if run is None else run["ns_per_event"]
            own_ns = None if run is None else run.get("allocator_ns_per_event")
            first = index == 0
            recorded = recorded_pytorch_ratio(traces_dir, trace["name"]) if first else None
            rows.append([
                f"`{trace['name']}`" if first else "",
                str(trace["events"]) if first else "",
                format_bytes(trace["peak_requested_bytes"]) if first else "",
                f"{recorded:.3f}" if recorded is not None else "",
                allocator,
                format_ratio(result["min_capacity_over_requested"]),
                format_ratio(result["reserved_over_requested"]),
                "-" if calls is None else str(calls),
                format_ms(estimate),
                NOT_TIMED if ns is None else f"{ns:.0f}",
                format_own_ns(run, own_ns),
            ])
            by_kind = result.get("device_calls")
            call_rows.append(
                [f"`{trace['name']}`" if first else "", allocator] +
                [str(by_kind[kind]) if by_kind is not None else "-" for kind in CALL_KINDS] +
                ["-" if calls is None else str(calls), format_ms(estimate)])
            summary = per_allocator.setdefault(
                allocator, {"min": [], "reserved": [], "calls": 0, "ns": [], "events": 0,
                            "seconds": 0.0, "own_ns": [],
                            "by_kind": dict.fromkeys(CALL_KINDS, 0),
                            "estimate": 0.0, "counted": 0})
            if result["min_capacity_over_requested"] is not None:
                summary["min"].append(result["min_capacity_over_requested"])
            summary["reserved"].append(result["reserved_over_requested"])
            if calls is not None:
                summary["counted"] += 1
                summary["calls"] += calls
                summary["estimate"] += estimate
                for kind in CALL_KINDS:
                    summary["by_kind"][kind] += by_kind[kind]
            summary["events"] += trace["events"]
            if ns is not None:
                summary["ns"].append(ns)
                summary["seconds"] += ns * trace["events"] * 1e-9
            if own_ns is not None:
                summary["own_ns"].append(own_ns)
    return rows, call_rows, per_allocator


def pressure_rows(pressure):
    """One row per (trace, allocator) of the replay on a device just above the trace's peak:
    whether it completed, its device calls by kind and their estimated time."""
    rows = []
    for trace in pressure["traces"]:
        for index, result in enumerate(trace["results"]):
            first = index == 0
            if result["oom"]:
                outcome = f"OOM at event {result['oom_event_index'] + 1}/{trace['events']}"
            else:
                outcome = "completes"
            by_kind = result.get("device_calls")
            calls = total_calls(result)
            rows.append(
                [f"`{trace['name']}`" if first else "",
                 format_bytes(result["capacity_bytes"]) if first else "",
                 result["allocator"], outcome] +
                [str(by_kind[kind]) if by_kind is not None else "-" for kind in CALL_KINDS] +
                ["-" if calls is None else str(calls),
                 format_ms(result.get("estimated_device_call_seconds"))])
    return rows


def pressure_section(pressure, factor):
    if pressure is None:
        return ""
    return f"""## Under pressure: a device of {factor:g} x peak requested

Each trace replayed once on a device of {factor:g} x its peak requested bytes, rounded up to
2 MiB (`cudacache-replay --capacity-factor {factor:g}`): which allocators complete, and the
device calls each made (failed ones included, up to the out-of-memory error where there is
one) with their estimated time on a GPU.

{markdown_table(
    ["trace", "device", "allocator", "outcome", *CALL_KINDS, "total", "est. time (ms)"],
    pressure_rows(pressure), ["---", "---:", "---", "---"] + ["---:"] * (len(CALL_KINDS) + 2))}

"""


def pages_section(paged, paged_pressure, replay, pressure):
    """The smallest device and who completes near the limit with cudaMalloc's memory in 2 MiB
    pages (CUDASIM_MALLOC_PAGE=2MiB), beside the same figures with 256-byte units."""
    if paged is None:
        return ""
    plain = {t["name"]: by_allocator(t) for t in replay["traces"]}
    plain_pressure = {t["name"]: by_allocator(t) for t in (pressure or {"traces": []})["traces"]}
    paged_pressure = {t["name"]: by_allocator(t) for t in paged_pressure["traces"]}
    allocators = [r["allocator"] for r in paged["traces"][0]["results"]] if paged["traces"] else []
    ratios = {a: ([], []) for a in allocators}  # allocator -> (pages, 256-byte units)
    completed = {a: [0, 0] for a in allocators}

    def cell(ratio, other):
        text = format_ratio(ratio)
        if other is None or format_ratio(other) == text:
            return text
        return f"{text} ({format_ratio(other)})"

    def mean(values):
        return geometric_mean(values) if values else None

    def outcome(result):
        return "-" if result is None else ("OOM" if result["oom"] else "completes")

    rows = []
    for trace in paged["traces"]:
        name = trace["name"]
        if name not in plain:
            sys.exit(f"write_results.py: --pages-json: trace {name} is not in --replay-json")
        cells = [f"`{name}`"]
        for allocator in allocators:
            result = by_allocator(trace).get(allocator)
            other = plain[name].get(allocator)
            ratio = result and result["min_capacity_over_requested"]
            other_ratio = other and other["min_capacity_over_requested"]
            if ratio is not None:
                ratios[allocator][0].append(ratio)
            if other_ratio is not None:
                ratios[allocator][1].append(other_ratio)
            near = paged_pressure.get(name, {}).get(allocator)
            near_plain = plain_pressure.get(name, {}).get(allocator)
            completed[allocator][0] += near is not None and not near["oom"]
            completed[allocator][1] += near_plain is not None and not near_plain["oom"]
            cells.append(f"{cell(ratio, other_ratio)}; {outcome(near)}")
        rows.append(cells)
    summary = [["geometric mean; completes near the limit"] + [
        f"{cell(mean(ratios[a][0]), mean(ratios[a][1]))}; "
        f"{completed[a][0]} ({completed[a][1]}) of {len(rows)}" for a in allocators]]
    return f"""## If cudaMalloc takes whole 2 MiB pages

Every table above charges a `cudaMalloc` its size rounded up to 256 B, cudasim's default.
PyTorch's pull request 17120 describes the driver since Pascal otherwise: a block over 1 MB
starts a fresh 2 MiB page and takes whole pages, and only small blocks go into the unused end
of its last one. `CUDASIM_MALLOC_PAGE=2MiB` models that; the same two replays under it (the
smallest device, and a device of 1.02 x the peak) give, per allocator, min cap / peak req with
pages (with 256-byte units in parentheses where it differs) and whether it completes on the
device of 1.02 x with pages; the last row counts those (with 256-byte units in parentheses).
Which model a GPU follows is what `tests/gpu/vmm_checks.cpp` measures; it has not run.

{markdown_table(["trace"] + allocators, rows + summary, ["---"] + ["---:"] * len(allocators))}

"""


# Issue #11's targets for cudacache's own policy ("done when"), checked trace by trace.
HELD_LIMIT = 1.10  # peak reserved / peak requested with room, or CUB's where that is larger
MEMORY_LIMIT = 1.01  # smallest device / peak requested, or nocache's + 4 MiB where larger
MEMORY_SLACK_BYTES = 4 << 20
TIE_RATIO = 1.002  # a tie with torch-expandable or CUB: within 0.2 % ...
TIE_BYTES = 2 << 20  # ... or one 2 MiB step
SPEED_LIMIT = 1.25  # allocator ns / event over the pytorch policy's


def by_allocator(trace):
    return {result["allocator"]: result for result in trace["results"]}


def expandable_reference(results):
    """PyTorch's expandable segments: PyTorch itself where it ran, else cudacache set to its
    policy (the same calls, call for call)."""
    return results.get("torch-expandable") or results.get("pytorch-expandable")


def verdict(met, text):
    return f"met ({text})" if met else f"**missing** ({text})"


def memory_cell(trace, results):
    own, expandable, cub = results["cudacache"], expandable_reference(results), results["cub"]
    if own["min_capacity_bytes"] is None:
        return "**missing** (no device found)"
    floor = max(MEMORY_LIMIT * trace["peak_requested_bytes"],
                (results["nocache"]["min_capacity_bytes"] or 0) + MEMORY_SLACK_BYTES)
    met = own["min_capacity_bytes"] <= floor
    for other in (expandable, cub):
        if other["min_capacity_bytes"] is not None:
            met = met and (own["min_capacity_over_requested"] <=
                           other["min_capacity_over_requested"] * TIE_RATIO or
                           own["min_capacity_bytes"] <= other["min_capacity_bytes"] + TIE_BYTES)

    def shown(result):
        ratio = result["min_capacity_over_requested"]
        return "none found" if ratio is None else f"{ratio:.4f}"

    return verdict(met, f"{shown(own)}; te {shown(expandable)}, cub {shown(cub)}")


def calls_cell(own, expandable):
    """cudacache's estimated device-call time against te's (both completed)."""
    own_s = own["estimated_device_call_seconds"]
    expandable_s = expandable["estimated_device_call_seconds"]
    if own_s is None or expandable_s is None:
        return "calls not counted"
    return verdict(own_s <= expandable_s,
                   f"{own_s * 1e3:,.1f} vs te {expandable_s * 1e3:,.1f} ms")


def pressure_cell(trace):
    results = by_allocator(trace)
    own, expandable = results.get("cudacache"), expandable_reference(results)
    if own is None or expandable is None:
        return "not run"
    others_complete = any(not r["oom"] for name, r in results.items() if name != "cudacache")
    if own["oom"]:
        return verdict(not others_complete, "out of memory")
    if expandable["oom"]:
        return verdict(True, "te out of memory")
    return calls_cell(own, expandable)


def speed_cell(trace_name, runs):
    own, native = runs.get((trace_name, "cudacache")), runs.get((trace_name, "pytorch"))
    if own is None or native is None or not own.get("allocator_ns_per_event") or \
            not native.get("allocator_ns_per_event"):
        return "not measured"
    ratio = own["allocator_ns_per_event"] / native["allocator_ns_per_event"]
    return verdict(ratio <= SPEED_LIMIT, f"{ratio:.2f} x")


def targets_section(replay, pressure, runs):
    """The targets of issue #11 per trace: cudacache against torch-expandable, CUB, nocache and
    the pytorch policy. Empty when this run lacks one of them."""
    pressure_traces = {t["name"]: t for t in pressure["traces"]} if pressure else {}
    rows = []
    memory_ratios = {"cudacache": [], "te": [], "cub": []}
    for trace in replay["traces"]:
        results = by_allocator(trace)
        if not {"cudacache", "cub", "nocache"} <= results.keys() or \
                expandable_reference(results) is None:
            return ""
        own, cub = results["cudacache"], results["cub"]
        memory = memory_cell(trace, results)
        for key, result in (("cudacache", own), ("te", expandable_reference(results)),
                            ("cub", cub)):
            if result["min_capacity_over_requested"] is not None:
                memory_ratios[key].append(result["min_capacity_over_requested"])
        held = own["peak_reserved_bytes"] / trace["peak_requested_bytes"]
        cub_held = cub["peak_reserved_bytes"] / trace["peak_requested_bytes"]
        name = trace["name"]
        rows.append([
            f"`{name}`", memory,
            verdict(held <= max(HELD_LIMIT, cub_held), f"{held:.3f}"),
            calls_cell(own, expandable_reference(results)),
            pressure_cell(pressure_traces[name]) if name in pressure_traces else "not run",
            speed_cell(name, runs)])
    means = {key: geometric_mean(values) if len(values) == len(rows) else None
             for key, values in memory_ratios.items()}
    if None in means.values():
        mean_text = "not every allocator found a smallest device on every trace"
    else:
        below = means["cudacache"] < min(means["te"], means["cub"])
        mean_text = (f"cudacache {means['cudacache']:.4f}, te {means['te']:.4f}, "
                     f"cub {means['cub']:.4f}: " + ("met" if below else "**missing**"))
    return f"""## The targets of cudacache's own policy, trace by trace

Issue #11's "done when", checked on this run's figures (te: torch-expandable, or
pytorch-expandable where PyTorch did not run; the two make the same calls):
- **smallest device**: cudacache's min cap / peak req at most {MEMORY_LIMIT:g}, or nocache's
  smallest device + 4 MiB where that is larger, and no larger than te's and CUB's (within
  0.2 % or one 2 MiB step);
- **held with room**: peak reserved / peak req on the default device at most {HELD_LIMIT:.2f}, or
  CUB's where that is larger;
- **calls with room**: estimated device-call time on the default device no larger than te's;
- **calls under pressure**: on the device of the pressure table, cudacache completes wherever
  another allocator does, with an estimated time no larger than te's wherever both complete;
- **speed**: allocator ns / event (cudasim's calls left out: their cost on a GPU is the
  estimated time) at most {SPEED_LIMIT:g} x the pytorch policy's.

Geometric mean of the smallest devices (cudacache below both te's and CUB's): {mean_text}.

{markdown_table(
    ["trace", "smallest device", "held with room", "calls with room", "calls under pressure",
     "speed"],
    rows, ["---", "---", "---", "---", "---", "---"])}

"""


def sized_runs(arguments):
    """[(factor, replay JSON)] from FACTOR=FILE arguments, in the order given."""
    runs = []
    for argument in arguments:
        factor, separator, path = argument.partition("=")
        try:
            value = float(factor)
        except ValueError:
            value = None
        if not separator or value is None or not math.isfinite(value) or value <= 0:
            sys.exit(f"write_results.py: --sized-json wants FACTOR=FILE, got '{argument}'")
        try:
            with open(path, encoding="utf-8") as f:
                runs.append((value, json.load(f)))
        except (OSError, ValueError) as error:
            sys.exit(f"write_results.py: --sized-json {argument}: {error}")
    return runs


def sized_cell(result):
    """Held / peak requested and estimated call time of one replay, or where it ran out."""
    if result["oom"]:
        return f"OOM at event {result['oom_event_index'] + 1}", "-"
    return (format_ratio(result["reserved_over_requested"]),
            format_ms(result.get("estimated_device_call_seconds")))


def sized_section(runs):
    """Held memory and estimated calls of every allocator on devices of several sizes."""
    if not runs:
        return ""
    factors = [factor for factor, _ in runs]
    by_trace = {}  # trace -> allocator -> [(held, ms)] per factor
    totals = {}  # allocator -> per factor: held ratios of completed replays, seconds, OOMs
    for column, (_, replay) in enumerate(runs):
        for trace in replay["traces"]:
            for result in trace["results"]:
                allocator = result["allocator"]
                cells = by_trace.setdefault(trace["name"], {}).setdefault(
                    allocator, [("-", "-")] * len(runs))
                cells[column] = sized_cell(result)
                total = totals.setdefault(allocator, [
                    {"held": [], "seconds": 0.0, "ooms": 0} for _ in runs])[column]
                if result["oom"]:
                    total["ooms"] += 1
                else:
                    total["held"].append(result["reserved_over_requested"])
                    total["seconds"] += result.get("estimated_device_call_seconds") or 0.0
    header = ["trace", "allocator"]
    summary_header = ["allocator"]
    for factor in factors:
        header += [f"held / peak req ({factor:g} x)", f"est. calls, ms ({factor:g} x)"]
        summary_header += [f"held geomean ({factor:g} x)", f"held worst ({factor:g} x)",
                           f"est. calls, ms ({factor:g} x)"]
    rows = []
    for name, allocators in by_trace.items():
        for index, (allocator, cells) in enumerate(allocators.items()):
            rows.append([f"`{name}`" if index == 0 else "", allocator] +
                        [cell for pair in cells for cell in pair])
    summary = []
    for allocator, columns in totals.items():
        row = [allocator]
        for total in columns:
            held = total["held"]
            ooms = f" ({total['ooms']} OOM)" if total["ooms"] else ""
            row += ["-" if not held else f"{geometric_mean(held):.3f}",
                    "-" if not held else f"{max(held):.3f}",
                    format_ms(total["seconds"]) + ooms]
        summary.append(row)
    listed = ", ".join(f"{factor:g}" for factor in factors)
    return f"""## By device size: held memory and device calls on devices of {listed} x the peak

Each trace replayed on devices of {listed} x its peak requested bytes, rounded up to 2 MiB
(`cudacache-replay --capacity-factor F`): what each allocator held at its peak (peak reserved /
peak requested) and the estimated time of its device calls (summed over the traces it
completed; "(n OOM)" counts those it did not). The tables above use a device that never refuses
and one just above the peak; a GPU somewhat larger than a program needs lies between them.

{markdown_table(summary_header, summary, ["---"] + ["---:"] * (3 * len(factors)))}

{markdown_table(header, rows, ["---", "---"] + ["---:"] * (2 * len(factors)))}

"""


def markdown_table(header, rows, align):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def counted_cell(s, trace_count, text):
    """A summed call figure, marked when some traces had no device calls counted."""
    if s["counted"] == 0:
        return "-"
    if s["counted"] != trace_count:
        return f"{text} ({s['counted']} of {trace_count} traces)"
    return text


def summary_rows(per_allocator, trace_count):
    rows = []
    for allocator, s in per_allocator.items():
        # A trace without a minimum capacity (none found up to the search limit) is left out
        # of the mean and the worst, and the cell says so.
        missing = ""
        if len(s["min"]) != trace_count:
            missing = f" ({len(s['min'])} of {trace_count} traces)"
        rows.append([
            allocator,
            f"{geometric_mean(s['min']):.3f}{missing}" if s["min"] else "-",
            f"{max(s['min']):.3f}{missing}" if s["min"] else "-",
            f"{geometric_mean(s['reserved']):.3f}",
            f"{max(s['reserved']):.3f}",
            counted_cell(s, trace_count, f"{s['calls']:,}"),
            counted_cell(s, trace_count, format_ms(s["estimate"])),
            f"{geometric_mean(s['ns']):.0f}" if s["ns"] else NOT_TIMED,
            own_ns_mean(s),
            f"{s['seconds'] * 1e3:.1f}" if s["ns"] else NOT_TIMED,
        ])
    return rows


def own_ns_mean(s):
    """Geometric mean of the allocator's own ns / event, when every timed trace has one."""
    if not s["ns"]:
        return NOT_TIMED
    return f"{geometric_mean(s['own_ns']):.0f}" if len(s["own_ns"]) == len(s["ns"]) else "-"


def summary_call_rows(per_allocator, trace_count):
    """Device calls by kind summed over the traces, per allocator."""
    rows = []
    for allocator, s in per_allocator.items():
        if s["counted"] == 0:
            rows.append([allocator] + ["-"] * (len(CALL_KINDS) + 2))
            continue
        rows.append([allocator] + [f"{s['by_kind'][kind]:,}" for kind in CALL_KINDS] +
                    [counted_cell(s, trace_count, f"{s['calls']:,}"),
                     counted_cell(s, trace_count, format_ms(s["estimate"]))])
    return rows


def written_by_hand(previous_path):
    """The hand-written section of the previous RESULTS.md, or a placeholder."""
    try:
        with open(previous_path, encoding="utf-8") as previous:
            text = previous.read()
    except (TypeError, FileNotFoundError):
        text = ""
    start = text.find(WRITTEN_BY_HAND_HEADING)
    if start >= 0:
        return text[start:].rstrip() + "\n"
    return (f"{WRITTEN_BY_HAND_HEADING}\n\n(To be written from the numbers above; results.sh\n"
            "keeps this section when it regenerates the tables.)\n")


def torch_paragraph(allocators, missing_reason):
    """What the torch-native / torch-expandable rows are, or why there are none."""
    if any(name in allocators for name in TORCH_ALLOCATORS):
        return """`torch-native` and `torch-expandable` are **PyTorch's own allocator** (torch 2.15 running on
cudasim, `tools/torch_replay/torch_replay.py`: each alloc a `torch.empty`, each free a `del`):
PyTorch's defaults, and `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`."""
    reason = missing_reason or "cudacache-replay was not asked for them"
    return f"""`torch-native` and `torch-expandable` (PyTorch's own allocator on cudasim) are **not in this
run**: {reason}.
With PyTorch installed (`pip install -r requirements-torch.txt`), results.sh adds both."""


def main():
    args = parse_arguments()
    if (args.pressure_json is None) != (args.pressure_factor is None):
        sys.exit("write_results.py: --pressure-json and --pressure-factor go together")
    pressure = None
    if args.pressure_json is not None:
        with open(args.pressure_json, encoding="utf-8") as f:
            pressure = json.load(f)
    with open(args.replay_json, encoding="utf-8") as f:
        replay = json.load(f)
    paged = paged_pressure = None
    if args.pages_json is not None:
        try:
            with open(args.pages_json[0], encoding="utf-8") as f:
                paged = json.load(f)
            with open(args.pages_json[1], encoding="utf-8") as f:
                paged_pressure = json.load(f)
        except (OSError, ValueError) as error:
            sys.exit(f"write_results.py: --pages-json: {error}")
    later_sections = (pressure_section(pressure, args.pressure_factor) +
                      sized_section(sized_runs(args.sized_json)) +
                      pages_section(paged, paged_pressure, replay, pressure))
    with open(args.bench_json, encoding="utf-8") as f:
        bench = json.load(f)
    runtime = bench["context"].get("cuda_runtime")
    if runtime != "cudasim":
        sys.exit(f"write_results.py: bench_replay ran on the '{runtime}' runtime, not cudasim")
    if bench["context"].get("library_build_type") == "debug":
        print("write_results.py: note: the installed Google Benchmark library is a debug build; "
              "bench_replay times the replay loop itself, so its timings are unaffected",
              file=sys.stderr)

    runs = ns_per_event_by_run(bench)
    later_sections = targets_section(replay, pressure, runs) + later_sections
    rows, call_rows, per_allocator = table_rows(replay, runs, args.traces)
    repetitions_text = describe_repetitions({run["repetitions"] for run in runs.values()})
    load = ", ".join(f"{value:.2f}" for value in bench["context"].get("load_avg", []))
    traces = len(replay["traces"])
    allocators = {result["allocator"] for trace in replay["traces"]
                  for result in trace["results"]}
    if any(name in allocators for name in TORCH_ALLOCATORS):
        for trace in replay["traces"]:
            names = {result["allocator"] for result in trace["results"]}
            if not set(TORCH_ALLOCATORS) <= names:
                sys.exit(f"write_results.py: {trace['name']}: cudacache-replay ran "
                         f"{sorted(names)}, not both of {list(TORCH_ALLOCATORS)}")
    out = sys.stdout
    out.write(f"""# Replay results: real traces through cudacache, PyTorch's policy, PyTorch itself, CUB, no cache

Generated by `{args.command}` on {args.date} (Release build).
Machine: {args.machine}.
Load average when bench_replay started: {load or "unknown"} (1, 5, 15 min).

Every figure comes from **cudasim**, the simulated CUDA runtime: memory figures are exact
byte counts, and times are **CPU times** (the allocators' bookkeeping plus cudasim's own cost
per device call), **not GPU timings**. cudasim's cost per device call is not a GPU driver's
(a VMM call is a real `mmap`): for what a GPU would add, read the device-calls columns, and
for the allocator's own speed, the allocator ns / event column, which leaves cudasim out.

Traces: `{os.path.relpath(args.traces)}` (see its README). Allocators: `cudacache` (default options:
cudacache's own policy on driver-VMM pages, pages moved where memory is needed, Note [Moving
pages] in `allocator/core/policy_cudacache.cpp`), `pytorch` (cudacache set to PyTorch's native
default policy, `policy:pytorch`), `pytorch-expandable`
(the same with `expandable_segments:True`, on the driver's VMM API), `cub`
(`cub::CachingDeviceAllocator`, default bins, unlimited cache), `nocache` (one
cudaMalloc/cudaFree per request, the floor for memory and the ceiling for cudaMalloc calls).
{torch_paragraph(allocators, args.torch_missing)}

Columns:
- **PyTorch recorded**: PyTorch's own peak reserved / peak requested during the recording
  (`pytorch_peak_reserved_from_first_alloc_bytes` of the trace's meta file). Context for the
  `pytorch` and `torch-native` rows, not the same experiment: the recording may start mid-run,
  may call `empty_cache()` (not rows of the CSV) or use other allocator settings.
- **min cap / peak req**: the smallest simulated device (2 MiB steps) on which the whole trace
  completes, and so does every device up to 0.5 % (at least 16 MiB) larger, over the trace's
  peak of live requested bytes (`cudacache-replay --min-capacity --json`: bisection, then
  checked upward, Note [Smallest device] in `tools/replay/replayer.h`). 1.000 is the physical
  floor; the 2 MiB step alone can add up to 0.02 on the smallest trace.
- **peak reserved / peak req**: peak device memory the allocator held, as it counts it, on a
  device large enough never to refuse (80 GiB or 8x the peak, whichever is larger); cudasim's
  own device peak agrees to within 0.01 %. For `torch-*`, PyTorch's own `memory_stats()`
  (`reserved_bytes.all.peak`).
- **device calls**: every device memory call counted by cudasim during the replay loop on
  that device, failed ones included: cudaMalloc, cudaFree, the VMM calls of expandable
  segments (cuMemCreate, cuMemRelease, cuMemMap, cuMemUnmap, cuMemSetAccess,
  cuMemAddressReserve, cuMemAddressFree) and synchronizations; by kind in "Device calls by
  kind" below. Memory still cached when the allocator is destroyed is not counted.
- **est. device-call time (ms)**: those calls weighted by an estimated cost per call on a GPU
  (published A100 measurements where there are any, estimates otherwise: the table in
  `tools/replay/README.md`, "Device calls and what they would cost"). An estimate for
  comparing allocators on a trace, not a measurement: it leaves out the time synchronizing
  calls wait for kernels, which a replay does not run.
- **ns / event**: `bench_replay` (Google Benchmark, manual time of the replay loop only, a fresh
  allocator per iteration), wall-clock time per alloc or free event{repetitions_text}
  `torch-*`: **{NOT_TIMED}**, not measured.
  Each of their replays is Python code issuing `torch.empty` / `del` through the
  interpreter, so a time per event would include the interpreter's overhead per call and
  would not compare with the in-process C++ replays; bench_replay does not run them.
- **allocator ns / event**: the same loop without the time spent inside cudasim's device
  calls (cudasim times each call it counts, per thread: `cudasim_thread_call_ns`): the
  allocator's own work per event (its bookkeeping, and the queries it makes that are not
  device memory calls, such as `cudaMemGetInfo`). What its device calls would cost on a GPU is
  the estimated device-call time.

## Per trace

{markdown_table(
    ["trace", "events", "peak req", "PyTorch recorded", "allocator", "min cap / peak req",
     "peak reserved / peak req", "device calls", "est. device-call time (ms)", "ns / event",
     "allocator ns / event"],
    rows, ["---", "---:", "---:", "---:", "---", "---:", "---:", "---:", "---:", "---:", "---:"])}

## Device calls by kind

Per trace and allocator, as cudasim counts them during the replay loop (failed calls
included); est. time = calls x cost per call (`tools/replay/README.md`).

{markdown_table(
    ["trace", "allocator", *CALL_KINDS, "total", "est. time (ms)"],
    call_rows, ["---", "---"] + ["---:"] * (len(CALL_KINDS) + 2))}

## Per allocator, over the {traces} traces

Geometric means of the ratios and of both ns / event; device calls and their estimated time
summed; replay time is the sum over traces of ns / event x events (one replay of every
trace).

{markdown_table(
    ["allocator", "min cap / peak req (geomean)", "(worst)",
     "peak reserved / peak req (geomean)", "(worst)", "device calls (total)",
     "est. device-call time, all traces (ms)", "ns / event (geomean)",
     "allocator ns / event (geomean)", "replay time, all traces (ms)"],
    summary_rows(per_allocator, traces),
    ["---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"])}

Device calls by kind, summed over the {traces} traces:

{markdown_table(
    ["allocator", *CALL_KINDS, "total", "est. time (ms)"],
    summary_call_rows(per_allocator, traces), ["---"] + ["---:"] * (len(CALL_KINDS) + 2))}

{later_sections}{written_by_hand(args.previous)}""")


if __name__ == "__main__":
    main()
