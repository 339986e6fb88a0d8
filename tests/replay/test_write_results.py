"""bench/replay/write_results.py: RESULTS.md from cudacache-replay's and bench_replay's JSON.

Standard-library unittest. The first class feeds it JSON written here; the second runs the real
tools on a tiny trace (CUDACACHE_REPLAY and BENCH_REPLAY name them; CTest sets both) and skips
without them."""

import copy
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
WRITE_RESULTS = REPO / "bench" / "replay" / "write_results.py"
CALL_KINDS = ("malloc", "free", "create", "release", "map", "unmap", "set_access", "synchronize",
              "reserve", "address_free", "mem_get_info")
TINY_TRACE = ("op,id,size,stream\nalloc,0,2621440,0\nalloc,1,1048576,0\nfree,0,2621440,0\n"
              "free,1,1048576,0\n")


def calls(**counts):
    return {kind: counts.get(kind, 0) for kind in CALL_KINDS}


def result(allocator, device_calls, estimate, mallocs, frees, min_ratio=1.0, reserved=1.0):
    return {"allocator": allocator, "peak_allocated_bytes": 100, "peak_reserved_bytes": 100,
            "reserved_over_requested": reserved, "device_peak_bytes": 100,
            "min_capacity_bytes": 2 << 20, "min_capacity_over_requested": min_ratio,
            "device_mallocs": mallocs, "device_frees": frees, "device_calls": device_calls,
            "estimated_device_call_seconds": estimate, "capacity_bytes": 80 << 30,
            "oom": False, "oom_event_index": None, "events_replayed": 4, "seconds": 1e-5,
            "events_per_second": 4e5}


def trace(name, results):
    return {"name": name, "events": 4, "allocs": 2, "frees": 2, "empty_cache_calls": 0,
            "streams": 1, "peak_requested_bytes": 3 << 20, "results": results}


def bench_run(trace_name, allocator, ns, **counters):
    return {"name": f"replay/{trace_name}/{allocator}/manual_time", "run_type": "iteration",
            "ns_per_event": ns, **counters}


def write_results(directory, replay, bench, previous=None, pressure=None, sized=(), extra=()):
    """Runs write_results.py; returns the CompletedProcess (stdout: the Markdown). `sized`:
    (factor, replay JSON) pairs for --sized-json; `extra`: more arguments, as given."""
    directory = pathlib.Path(directory)
    (directory / "replay.json").write_text(json.dumps(replay))
    (directory / "bench.json").write_text(json.dumps(bench))
    arguments = [sys.executable, str(WRITE_RESULTS),
                 "--replay-json", str(directory / "replay.json"),
                 "--bench-json", str(directory / "bench.json"),
                 "--traces", str(directory), "--command", "test", "--date", "today",
                 "--machine", "test machine"]
    if previous is not None:
        (directory / "previous.md").write_text(previous)
        arguments += ["--previous", str(directory / "previous.md")]
    if pressure is not None:
        (directory / "pressure.json").write_text(json.dumps(pressure))
        arguments += ["--pressure-json", str(directory / "pressure.json"),
                      "--pressure-factor", "1.02"]
    for index, (factor, runs) in enumerate(sized):
        path = directory / f"sized{index}.json"
        path.write_text(json.dumps(runs))
        arguments += ["--sized-json", f"{factor}={path}"]
    arguments += list(extra)
    return subprocess.run(arguments, capture_output=True, text=True, timeout=60)


def section(markdown, heading):
    start = markdown.index(heading)
    end = markdown.find("\n## ", start + len(heading))
    return markdown[start:] if end < 0 else markdown[start:end]


def table_row(text, first_cells):
    """The Markdown row whose first cells are `first_cells`, split into cells."""
    prefix = "| " + " | ".join(first_cells) + " |"
    for line in text.splitlines():
        if line.startswith(prefix):
            return [cell.strip() for cell in line.strip().strip("|").split("|")]
    raise AssertionError(f"no row starting {prefix!r} in:\n{text}")


class WriteResultsFromJson(unittest.TestCase):
    def setUp(self):
        # Two traces; nocache and cub in-process (timed, with bench_replay's counters),
        # torch-expandable from PyTorch (not timed). Estimates are whatever cudacache-replay
        # wrote: the script reads them, it has no cost table of its own.
        self.replay = {"traces": [
            trace("alpha", [
                result("nocache", calls(malloc=2, free=2), 0.00048952, 2, 2),
                result("cub", calls(malloc=2, free=1), 0.00047552, 2, 1, 1.5, 1.25),
            ]),
            trace("beta", [
                result("nocache", calls(malloc=5, free=5), 0.0012238, 5, 5),
                result("cub", calls(malloc=4, free=4, synchronize=1), 0.000984, 4, 4),
            ]),
        ]}
        self.bench = {"context": {"cuda_runtime": "cudasim", "load_avg": [0.5, 0.5, 0.5]},
                      "benchmarks": [
                          bench_run("alpha", "nocache", 800, device_calls=4,
                                    device_mallocs_frees=4, allocator_ns_per_event=200),
                          bench_run("alpha", "cub", 600, device_calls=3, device_mallocs_frees=3,
                                    allocator_ns_per_event=450),
                          bench_run("beta", "nocache", 900, device_calls=10,
                                    device_mallocs_frees=10, allocator_ns_per_event=300),
                          bench_run("beta", "cub", 700, device_calls=9, device_mallocs_frees=8),
                      ]}

    def render(self, previous=None, pressure=None, sized=()):
        with tempfile.TemporaryDirectory() as directory:
            completed = write_results(directory, self.replay, self.bench, previous, pressure,
                                      sized)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        return completed.stdout

    def test_per_trace_table_has_total_calls_and_estimated_time(self):
        markdown = self.render()
        per_trace = section(markdown, "## Per trace")
        self.assertIn("| device calls | est. device-call time (ms) | ns / event |", per_trace)
        row = table_row(per_trace, ["`beta`"])
        self.assertEqual(row[4:], ["nocache", "1.000", "1.000", "10", "1.2", "900", "300"])
        row = table_row(per_trace, ["", "", "", "", "cub"])
        self.assertEqual(row[7:], ["3", "0.476", "600", "450"])  # alpha's cub

    def test_allocator_time_without_cudasim_is_its_own_column(self):
        markdown = self.render()
        per_trace = section(markdown, "## Per trace")
        self.assertIn("| ns / event | allocator ns / event |", per_trace)
        # beta's cub run has no allocator_ns_per_event (cudasim did not time its calls).
        rows = [line for line in per_trace.splitlines() if "| cub |" in line]
        self.assertEqual(rows[1].strip().strip("|").split("|")[-1].strip(), "-")
        summary = section(markdown, "## Per allocator")
        self.assertIn("| ns / event (geomean) | allocator ns / event (geomean) |", summary)
        self.assertEqual(table_row(summary, ["nocache"])[8], "245")  # sqrt(200 x 300)
        self.assertEqual(table_row(summary, ["cub"])[8], "-")  # one trace not timed alone

    def test_pressure_table_shows_outcomes_and_calls(self):
        oom = result("cub", calls(malloc=3, free=1), 0.0006, 3, 1)
        oom.update(oom=True, oom_event_index=2, capacity_bytes=4 << 20)
        done = result("nocache", calls(malloc=2, free=2), 0.00048952, 2, 2)
        done["capacity_bytes"] = 4 << 20
        markdown = self.render(pressure={"traces": [trace("alpha", [done, oom])]})
        self.assertNotIn("## Under pressure", self.render())
        pressure = section(markdown, "## Under pressure: a device of 1.02 x peak requested")
        self.assertEqual(table_row(pressure, ["`alpha`"])[1:4],
                         ["4.00 MiB", "nocache", "completes"])
        row = table_row(pressure, ["", "", "cub"])
        self.assertEqual(row[3], "OOM at event 3/4")
        self.assertEqual(row[4:6], ["3", "1"])  # malloc, free
        self.assertEqual(row[-2:], ["4", "0.600"])

    def test_pages_table_sets_each_models_smallest_device_and_outcome_side_by_side(self):
        paged = copy.deepcopy(self.replay)
        paged["traces"][0]["results"][1]["min_capacity_over_requested"] = 1.75  # alpha's cub
        paged["traces"][1]["results"][1]["min_capacity_over_requested"] = 1.25  # beta's cub
        done = result("nocache", calls(malloc=2, free=2), 0.0005, 2, 2)
        oom = result("cub", calls(malloc=3, free=1), 0.0006, 3, 1)
        oom.update(oom=True, oom_event_index=2)
        cub_done = result("cub", calls(malloc=3, free=3), 0.0006, 3, 3)
        paged_pressure = {"traces": [trace("alpha", [done, oom]),
                                     trace("beta", [done, cub_done])]}
        plain_pressure = {"traces": [trace("alpha", [done, cub_done])]}
        with tempfile.TemporaryDirectory() as directory:
            folder = pathlib.Path(directory)
            (folder / "pages.json").write_text(json.dumps(paged))
            (folder / "pages-pressure.json").write_text(json.dumps(paged_pressure))
            completed = write_results(directory, self.replay, self.bench,
                                      pressure=plain_pressure,
                                      extra=["--pages-json", str(folder / "pages.json"),
                                             str(folder / "pages-pressure.json")])
            self.assertEqual(completed.returncode, 0, completed.stderr)
            pages = section(completed.stdout, "## If cudaMalloc takes whole 2 MiB pages")
            self.assertEqual(table_row(pages, ["`alpha`"])[1:], ["1.000; completes",
                                                                 "1.750 (1.500); OOM"])
            self.assertEqual(table_row(pages, ["`beta`"])[1:], ["1.000; completes",
                                                                "1.250 (1.000); completes"])
            # sqrt(1.75 x 1.25) = 1.479, sqrt(1.5 x 1) = 1.225; near the limit, with pages cub
            # completes beta only; with 256-byte units alpha only (beta was not replayed).
            self.assertEqual(table_row(pages, ["geometric mean; completes near the limit"])[1:],
                             ["1.000; 2 (1) of 2", "1.479 (1.225); 1 (1) of 2"])
            self.assertNotIn("whole 2 MiB pages", self.render())
            # A trace of the paged run that the main run lacks is refused.
            paged["traces"][0]["name"] = "gamma"
            (folder / "pages.json").write_text(json.dumps(paged))
            completed = write_results(directory, self.replay, self.bench,
                                      extra=["--pages-json", str(folder / "pages.json"),
                                             str(folder / "pages-pressure.json")])
            self.assertNotEqual(completed.returncode, 0)
            self.assertIn("trace gamma is not in --replay-json", completed.stderr)

    def test_sized_table_shows_held_memory_and_calls_per_device_size(self):
        small_done = result("nocache", calls(malloc=2, free=2), 0.002, 2, 2, reserved=1.5)
        small_oom = result("cub", calls(malloc=3, free=1), 0.0006, 3, 1)
        small_oom.update(oom=True, oom_event_index=2)
        beta_small = result("nocache", calls(malloc=1), 0.001, 1, 0, reserved=1.2)
        large = {"traces": [
            trace("alpha", [result("nocache", calls(), 0.004, 0, 0, reserved=1.1),
                            result("cub", calls(), 0.003, 0, 0, reserved=1.0)]),
            trace("beta", [result("nocache", calls(), 0.0, 0, 0, reserved=1.0)])]}
        small = {"traces": [trace("alpha", [small_done, small_oom]),
                            trace("beta", [beta_small])]}
        self.assertNotIn("## By device size", self.render())
        markdown = self.render(sized=[(1.2, small), (4, large)])
        sized = section(markdown, "## By device size")
        self.assertIn("devices of 1.2, 4 x the peak", sized)
        self.assertEqual(table_row(sized, ["`alpha`", "nocache"])[2:],
                         ["1.500", "2.0", "1.100", "4.0"])
        self.assertEqual(table_row(sized, ["", "cub"])[2:],
                         ["OOM at event 3", "-", "1.000", "3.0"])
        # Per allocator: geometric mean and worst of what it held, calls of completed replays.
        nocache = table_row(sized, ["nocache"])[1:]
        self.assertEqual(nocache[:2], [f"{(1.5 * 1.2) ** 0.5:.3f}", "1.500"])
        self.assertEqual(nocache[2], "3.0")
        self.assertEqual(table_row(sized, ["cub"])[1:4], ["-", "-", "0.000 (1 OOM)"])

    def refused(self, *arguments):
        """write_results.py given `arguments` (FILE in them names a copy of the replay JSON): its
        exit status must say it refused; returns its error text."""
        with tempfile.TemporaryDirectory() as directory:
            other = pathlib.Path(directory) / "other.json"
            other.write_text(json.dumps(self.replay))
            completed = write_results(directory, self.replay, self.bench,
                                      extra=[a.replace("FILE", str(other)) for a in arguments])
        self.assertNotEqual(completed.returncode, 0)
        self.assertNotIn("Traceback", completed.stderr)
        return completed.stderr

    def test_sized_json_needs_a_factor_and_a_readable_file(self):
        self.assertIn("--sized-json wants FACTOR=FILE", self.refused("--sized-json", "FILE"))
        self.assertIn("--sized-json wants FACTOR=FILE", self.refused("--sized-json", "big=FILE"))
        self.assertIn("--sized-json wants FACTOR=FILE", self.refused("--sized-json", "0=FILE"))
        self.assertIn("--sized-json wants FACTOR=FILE", self.refused("--sized-json", "nan=FILE"))
        self.assertIn("--sized-json wants FACTOR=FILE", self.refused("--sized-json", "inf=FILE"))
        missing = self.refused("--sized-json", "2=FILE.missing")
        self.assertIn("--sized-json 2=", missing)
        self.assertIn("No such file", missing)

    def test_pages_json_needs_two_readable_files_of_json(self):
        missing = self.refused("--pages-json", "FILE", "FILE.missing")
        self.assertIn("--pages-json:", missing)
        self.assertIn("No such file", missing)
        self.assertIn("expected 2 arguments", self.refused("--pages-json", "FILE"))
        with tempfile.TemporaryDirectory() as directory:
            broken = pathlib.Path(directory) / "broken.json"
            broken.write_text("{")
            self.assertIn("--pages-json:", self.refused("--pages-json", "FILE", str(broken)))

    def test_pressure_json_without_its_factor_is_refused(self):
        self.assertIn("--pressure-json and --pressure-factor go together",
                      self.refused("--pressure-json", "FILE"))

    def test_device_calls_by_kind_per_trace(self):
        by_kind = section(self.render(), "## Device calls by kind")
        self.assertIn("| trace | allocator | " + " | ".join(CALL_KINDS) +
                      " | total | est. time (ms) |", by_kind)
        self.assertEqual(table_row(by_kind, ["`alpha`", "nocache"])[2:],
                         ["2", "2", "0", "0", "0", "0", "0", "0", "0", "0", "0", "4", "0.490"])
        self.assertEqual(table_row(by_kind, ["", "cub"])[2:],
                         ["2", "1", "0", "0", "0", "0", "0", "0", "0", "0", "0", "3", "0.476"])
        self.assertEqual(table_row(by_kind, ["`beta`", "nocache"])[2:],
                         ["5", "5", "0", "0", "0", "0", "0", "0", "0", "0", "0", "10", "1.2"])

    def test_summary_sums_calls_and_estimates(self):
        summary = section(self.render(), "## Per allocator")
        self.assertIn("| device calls (total) | est. device-call time, all traces (ms) |",
                      summary)
        nocache = table_row(summary, ["nocache"])
        self.assertEqual(nocache[5:7], ["14", "1.7"])
        cub = table_row(summary, ["cub"])
        self.assertEqual(cub[1], "1.225")  # geometric mean of 1.5 and 1.0
        self.assertEqual(cub[5:7], ["12", "1.5"])
        by_kind = summary[summary.index("Device calls by kind, summed"):]
        self.assertEqual(table_row(by_kind, ["cub"])[1:],
                         ["6", "5", "0", "0", "0", "0", "0", "1", "0", "0", "0", "12", "1.5"])

    def test_hand_written_section_is_kept(self):
        previous = "# old\n\n## What the table says\n\nWritten by a person.\n"
        self.assertTrue(self.render(previous).endswith("## What the table says\n\n"
                                                       "Written by a person.\n"))

    def test_bench_replay_must_count_the_same_calls(self):
        self.bench["benchmarks"][3]["device_calls"] = 8  # beta / cub: replay counted 9
        with tempfile.TemporaryDirectory() as directory:
            completed = write_results(directory, self.replay, self.bench)
        self.assertNotEqual(completed.returncode, 0)
        self.assertIn("beta / cub: cudacache-replay counted 9 device_calls, bench_replay 8",
                      completed.stderr)

    def test_bench_replay_must_count_the_same_mallocs_and_frees(self):
        self.bench["benchmarks"][0]["device_mallocs_frees"] = 5
        with tempfile.TemporaryDirectory() as directory:
            completed = write_results(directory, self.replay, self.bench)
        self.assertNotEqual(completed.returncode, 0)
        self.assertIn("alpha / nocache: cudacache-replay counted 4 device_mallocs_frees",
                      completed.stderr)

    def test_repetitions_keep_the_least_time_of_each_run(self):
        self.assertIn("wall-clock time per alloc or free event (one run;", self.render())
        # alpha / cub once more, slower in ns / event but faster in allocator ns / event.
        self.bench["benchmarks"].append(bench_run("alpha", "cub", 650, device_calls=3,
                                                  device_mallocs_frees=3,
                                                  allocator_ns_per_event=420))
        markdown = self.render()
        row = table_row(section(markdown, "## Per trace"), ["", "", "", "", "cub"])
        self.assertEqual(row[7:], ["3", "0.476", "600", "420"])
        self.assertIn("the least of 1-2 repetitions interleaved at random", markdown)

    def test_repetitions_must_replay_the_same_calls(self):
        self.bench["benchmarks"].append(bench_run("alpha", "cub", 650, device_calls=4,
                                                  device_mallocs_frees=3,
                                                  allocator_ns_per_event=420))
        with tempfile.TemporaryDirectory() as directory:
            completed = write_results(directory, self.replay, self.bench)
        self.assertNotEqual(completed.returncode, 0)
        self.assertIn("repetitions disagree on device_calls (3 and 4)", completed.stderr)

    def test_repetitions_must_all_time_the_allocator_or_none(self):
        # alpha / cub's first repetition has allocator_ns_per_event, this one has not.
        self.bench["benchmarks"].append(bench_run("alpha", "cub", 650, device_calls=3,
                                                  device_mallocs_frees=3))
        with tempfile.TemporaryDirectory() as directory:
            completed = write_results(directory, self.replay, self.bench)
        self.assertNotEqual(completed.returncode, 0)
        self.assertIn("allocator_ns_per_event only in some repetitions", completed.stderr)

    def test_calls_not_counted_are_dashes(self):
        # A replay without cudasim's call counts (device_calls null) still renders.
        for t in self.replay["traces"]:
            for r in t["results"]:
                if r["allocator"] == "cub":
                    r["device_calls"] = None
                    r["estimated_device_call_seconds"] = None
        markdown = self.render()
        by_kind = section(markdown, "## Device calls by kind")
        self.assertEqual(table_row(by_kind, ["", "cub"])[2:], ["-"] * 13)
        self.assertEqual(table_row(section(markdown, "## Per allocator"), ["cub"])[5:7],
                         ["-", "-"])


class TargetsOfTheOwnPolicy(unittest.TestCase):
    """The section that checks issue #11's targets trace by trace."""

    @staticmethod
    def own_policy_trace(name, own, expandable, cub, nocache):
        """A trace of 3 MiB peak with the four allocators the targets compare, each given as
        (min capacity MiB, peak reserved bytes, estimated seconds)."""
        results = []
        for allocator, (min_mib, reserved, estimate) in (
                ("cudacache", own), ("pytorch-expandable", expandable), ("cub", cub),
                ("nocache", nocache)):
            r = result(allocator, calls(create=1), estimate, 0, 0, min_ratio=min_mib / 3)
            r.update(min_capacity_bytes=min_mib << 20, peak_reserved_bytes=reserved)
            results.append(r)
        return trace(name, results)

    def render(self, replay, bench_runs, pressure=None):
        bench = {"context": {"cuda_runtime": "cudasim"}, "benchmarks": bench_runs}
        with tempfile.TemporaryDirectory() as directory:
            completed = write_results(directory, replay, bench, pressure=pressure)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        return completed.stdout

    def runs(self, name, own_ns, native_ns):
        return [bench_run(name, allocator, 1000, device_calls=1, device_mallocs_frees=0,
                          allocator_ns_per_event=ns)
                for allocator, ns in (("cudacache", own_ns), ("pytorch", native_ns))] + [
                    bench_run(name, allocator, 1000, device_calls=1, device_mallocs_frees=0,
                              allocator_ns_per_event=100)
                    for allocator in ("pytorch-expandable", "cub", "nocache")]

    def test_each_target_met_or_missing_per_trace(self):
        mib = 1 << 20
        # alpha meets every target: the smallest device ties CUB's, holds 1.05 x its peak,
        # fewer calls than te, 1.20 x the native policy's time.
        alpha = self.own_policy_trace("alpha", (4, int(3.15 * mib), 0.001), (6, 0, 0.002),
                                      (4, 0, 0.0), (4, 0, 0.0))
        # beta misses every one: 12 MiB where CUB needs 4 (and nocache + 4 MiB is 8), holds
        # 4/3 x its peak (CUB 1 x), more calls than te, runs out of memory under pressure
        # where te completes, 1.30 x the native policy's time.
        beta = self.own_policy_trace("beta", (12, 4 * mib, 0.003), (6, 0, 0.002),
                                     (4, 3 * mib, 0.0), (4, 0, 0.0))
        pressure_alpha = self.own_policy_trace("alpha", (4, 0, 0.001), (6, 0, 0.002),
                                               (4, 0, 0.0), (4, 0, 0.0))
        pressure_beta = self.own_policy_trace("beta", (4, 0, 0.001), (6, 0, 0.002),
                                              (4, 0, 0.0), (4, 0, 0.0))
        pressure_beta["results"][0].update(oom=True, oom_event_index=1)
        markdown = self.render({"traces": [alpha, beta]},
                               self.runs("alpha", 120, 100) + self.runs("beta", 130, 100),
                               {"traces": [pressure_alpha, pressure_beta]})
        targets = section(markdown, "## The targets of cudacache's own policy")
        met = table_row(targets, ["`alpha`"])
        self.assertTrue(all(cell.startswith("met (") for cell in met[1:]), met)
        self.assertEqual(met[1], "met (1.3333; te 2.0000, cub 1.3333)")
        self.assertEqual(met[2], "met (1.050)")
        self.assertEqual(met[3], "met (1.0 vs te 2.0 ms)")
        self.assertEqual(met[5], "met (1.20 x)")
        missing = table_row(targets, ["`beta`"])
        self.assertTrue(all(cell.startswith("**missing** (") for cell in missing[1:]), missing)
        self.assertEqual(missing[4], "**missing** (out of memory)")
        self.assertEqual(missing[5], "**missing** (1.30 x)")
        # Geometric means sqrt(4/3 x 4) (cudacache), 2 (te), 4/3 (cub): not below both.
        self.assertIn("cudacache 2.3094, te 2.0000, cub 1.3333: **missing**", targets)
        # alpha alone: 1.3333 is not below CUB's 1.3333 either; with CUB at 5 MiB it is.
        alpha["results"][2].update(min_capacity_bytes=5 << 20, min_capacity_over_requested=5 / 3)
        targets = section(self.render({"traces": [alpha]}, self.runs("alpha", 120, 100)),
                          "## The targets of cudacache's own policy")
        self.assertIn("cudacache 1.3333, te 2.0000, cub 1.6667: met", targets)
        self.assertIn("| `alpha` | met (1.3333; te 2.0000, cub 1.6667) |", targets)
        self.assertIn("| not run |", targets)  # no pressure replay given

    def test_left_out_without_the_allocators_it_compares(self):
        alpha = self.own_policy_trace("alpha", (4, 0, 0.001), (6, 0, 0.002), (4, 0, 0.0),
                                      (4, 0, 0.0))
        del alpha["results"][2]  # no cub
        markdown = self.render({"traces": [alpha]}, [
            run for run in self.runs("alpha", 120, 100) if "/cub/" not in run["name"]])
        self.assertNotIn("## The targets", markdown)


class WriteResultsFromTheTools(unittest.TestCase):
    """cudacache-replay and bench_replay on a tiny trace, then write_results.py: the counts of
    the two tools agree and the Markdown carries them."""

    def test_tools_to_markdown(self):
        replay_tool = os.environ.get("CUDACACHE_REPLAY")
        bench_tool = os.environ.get("BENCH_REPLAY")
        if not replay_tool or not bench_tool:
            self.skipTest("CUDACACHE_REPLAY and BENCH_REPLAY (the binaries) are not set")
        with tempfile.TemporaryDirectory() as directory:
            directory = pathlib.Path(directory)
            (directory / "tiny.csv").write_text(TINY_TRACE)
            subprocess.run([replay_tool, "--allocators", "nocache,cub", "--min-capacity",
                            "--json", str(directory / "replay.json"), str(directory / "tiny.csv")],
                           check=True, capture_output=True, timeout=120)
            subprocess.run([bench_tool, f"--traces={directory}", "--allocators=nocache,cub",
                            "--benchmark_min_time=0.01", "--benchmark_out_format=json",
                            f"--benchmark_out={directory / 'bench.json'}"],
                           check=True, capture_output=True, timeout=120)
            replay = json.loads((directory / "replay.json").read_text())
            bench = json.loads((directory / "bench.json").read_text())
            completed = write_results(directory, replay, bench)
        self.assertEqual(completed.returncode, 0, completed.stderr)
        by_kind = section(completed.stdout, "## Device calls by kind")
        nocache = table_row(by_kind, ["`tiny`", "nocache"])
        self.assertEqual(nocache[2:13], ["2", "2"] + ["0"] * 9)
        self.assertEqual(nocache[13], "4")
        cub = table_row(by_kind, ["", "cub"])
        self.assertEqual(cub[2:14], ["2", "1"] + ["0"] * 9 + ["3"])
        estimate = replay["traces"][0]["results"][0]["estimated_device_call_seconds"]
        self.assertEqual(nocache[14], f"{estimate * 1e3:.3f}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
