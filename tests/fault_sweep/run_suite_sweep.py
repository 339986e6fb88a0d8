#!/usr/bin/env python3
"""The suite-wide fault sweep: every test case of the allocator's gtest binaries, rerun with one
device call failing, for each kind of call it makes and for each N (every N up to --per-kind,
beyond that many evenly spread, first and last included; cases whose clean run takes over
--heavy-seconds get --heavy-per-kind, 1 by default: the middle call; 0 means every N).

The cases are read from CTest (`ctest --show-only=json-v1`), so each runs with its own command
and environment. A clean run first (CUDASIM_CALL_REPORT) tells which calls a case makes; then
each rerun sets CUDASIM_FAIL_NTH=KIND:N@DEVICE, CUDACACHE_FAULT_SWEEP=1 (the checks of
tests/common/test_main.cpp) and --gtest_catch_exceptions=0.

A case's own expectations may fail under a fault it did not ask for; that is allowed. What
fails the sweep is what the allocator did:
  crash      a signal or an abort (a segfault, an assertion, a sanitizer report, an exception
             that reached std::terminate: out of a thread, a destructor, a noexcept function)
  untyped    an exception other than cudacache::Error / OutOfMemoryError escaped
  hang       the run did not end within --timeout seconds
  leak       a device held more bytes after the case than its clean run left, beyond what the
             failed call itself kept if it was a cudaFree, cuMemRelease or cuMemUnmap (the
             driver keeps that memory, as CUDA does; cudasim's call report says how much)
Allowed outcomes: passed (the fault was absorbed), test-failed (the case saw the error), typed
(a typed cudacache error escaped the test body), not-reached (the case made fewer calls this
time, or armed a failure of its own first).

Exit status 0 when nothing failed, 1 otherwise; the last line is "N passed, N failed" over
the reruns.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time

# Cases whose own design cannot survive a fault they did not ask for, with the reason. Each is
# still run by CTest without faults.
NOT_SWEPT = {
    "CppApi.PerThreadStreamBlocksWaitForTheFreeingThreadsWork":
        "holds thread A's stream (cudasim_hold_stream) until thread B has allocated; a failed "
        "event call makes A's free wait for the device (the documented fallback), which on "
        "cudasim waits for that hold forever, and an early ASSERT leaves A's std::thread "
        "unjoined",
}
DEFAULT_EXCLUDE = r"^(fault_sweep_test|cudasim_.*|history_replay_test|trace_fidelity_test)$"
KNOWN_KINDS = ["malloc", "free", "create", "release", "map", "unmap", "set_access", "synchronize",
               "reserve", "address_free", "event_create", "event_record", "event_query",
               "mem_get_info"]
LEAK_LINE = re.compile(r"^fault-sweep: (\S+) left (\d+) bytes on device (\d+)$", re.M)


def ctest_cases(build, include, exclude):
    listing = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True,
                             capture_output=True, text=True).stdout
    cases = []
    for test in json.loads(listing)["tests"]:
        command = test.get("command") or []
        filters = [arg for arg in command if arg.startswith("--gtest_filter=")]
        if not filters:
            continue  # not a gtest case
        binary = os.path.basename(command[0])
        if not re.search(include, binary) or (exclude and re.search(exclude, binary)):
            continue
        env = {}
        disabled = False
        for prop in test.get("properties", []):
            if prop["name"] == "ENVIRONMENT":
                for entry in prop["value"]:
                    key, _, value = entry.partition("=")
                    env[key] = value
            if prop["name"] == "DISABLED" and prop["value"]:
                disabled = True
        if not disabled:
            cases.append({"name": test["name"], "command": command, "env": env})
    return cases


def run_case(case, extra_env, timeout):
    env = dict(os.environ)
    env.update(case["env"])
    env.update(extra_env)
    env["CUDACACHE_FAULT_SWEEP"] = "1"
    with tempfile.NamedTemporaryFile(prefix="sweep-calls-", delete=False) as report:
        report_path = report.name
    env["CUDASIM_CALL_REPORT"] = report_path
    command = case["command"] + ["--gtest_catch_exceptions=0"]
    began = time.monotonic()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                              errors="replace")
        rc, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        rc = None
        output = (expired.stdout or b"").decode(errors="replace") if isinstance(
            expired.stdout, bytes) else (expired.stdout or "")
    calls, fired, kept = {}, False, {}
    try:
        with open(report_path) as lines:
            for line in lines:
                fields = line.split()
                if fields[0] == "device":
                    calls[(int(fields[1]), fields[2])] = int(fields[3])
                elif fields[0] == "injected":
                    kept[int(fields[1])] = int(fields[2])
                elif fields[0] == "fired":
                    fired = True
    except OSError:
        pass
    finally:
        if os.path.exists(report_path):
            os.unlink(report_path)
    leaks = {(m.group(1), int(m.group(3))): int(m.group(2)) for m in LEAK_LINE.finditer(output)}
    return {"rc": rc, "output": output, "calls": calls, "fired": fired, "kept": kept,
            "leaks": leaks, "seconds": time.monotonic() - began}


def spread(count, per_kind):
    """per_kind values of 1..count, evenly apart, first and last included; one is the middle."""
    if count <= per_kind:
        return list(range(1, count + 1))
    if per_kind == 1:
        return [(count + 1) // 2]
    step = (count - 1) / (per_kind - 1)
    return sorted({1 + round(i * step) for i in range(per_kind)})


def classify(result, clean):
    rc, output = result["rc"], result["output"]
    if rc is None:
        return "hang"
    if rc == 4 or "an UNTYPED exception escaped" in output:
        return "untyped"
    if rc < 0 or rc not in (0, 1, 3):
        return "crash"
    if rc == 1 and "[  FAILED  ]" not in output:
        return "crash"  # exit(1) from outside gtest
    for (case, device), leaked in result["leaks"].items():
        # What the case leaves without the fault (memory its own injected failures kept, say),
        # less what of it those kept, plus what the failed calls of this run keep alive.
        allowed = (clean["leaks"].get((case, device), 0) - clean["kept"].get(device, 0) +
                   result["kept"].get(device, 0))
        if leaked > allowed:
            return "leak"
    if rc == 3:
        return "typed"
    if not result["fired"] and rc in (0, 1):
        return "not-reached"
    return "passed" if rc == 0 else "test-failed"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True, help="a configured and built build folder")
    parser.add_argument("--include", default=r"_test$", help="regex on the test binary's name "
                        "(default: the allocator's test binaries)")
    parser.add_argument("--exclude", default=DEFAULT_EXCLUDE,
                        help="regex on the test binary's name (default: the fault_sweep_test, "
                        "which injects faults itself, cudasim's own tests and the replay tool's)")
    parser.add_argument("--filter", default=None, help="regex on the CTest test name")
    parser.add_argument("--per-kind", type=int, default=4,
                        help="at most this many N per case and kind (0: every N)")
    parser.add_argument("--heavy-seconds", type=float, default=0.3,
                        help="a case whose clean run takes longer is heavy")
    parser.add_argument("--heavy-per-kind", type=int, default=1,
                        help="at most this many N per heavy case and kind (0: every N)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=120, help="seconds per run")
    parser.add_argument("--max-seconds", type=float, default=0,
                        help="start no rerun after this many seconds (0: no limit); the "
                        "summary counts the reruns left out")
    parser.add_argument("--kinds", default=",".join(KNOWN_KINDS))
    args = parser.parse_args()

    kinds = args.kinds.split(",")
    unknown = [kind for kind in kinds if kind not in KNOWN_KINDS]
    if unknown:
        parser.error(f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(KNOWN_KINDS)}")
    cases = ctest_cases(args.build, args.include, args.exclude)
    if args.filter:
        cases = [case for case in cases if re.search(args.filter, case["name"])]
    for case in cases:
        if case["name"] in NOT_SWEPT:
            print(f"not swept: {case['name']}: {NOT_SWEPT[case['name']]}")
    cases = [case for case in cases if case["name"] not in NOT_SWEPT]
    if not cases:
        print("run_suite_sweep: no test case matched", file=sys.stderr)
        return 2
    started = time.monotonic()

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        cleans = list(pool.map(lambda case: run_case(case, {}, args.timeout), cases))
        reruns = []
        clean_failures = []
        for case, clean in zip(cases, cleans):
            if clean["rc"] != 0:
                clean_failures.append(case["name"])
                continue
            for (device, kind), count in sorted(clean["calls"].items()):
                if kind not in kinds:
                    continue
                limit = args.heavy_per_kind if clean["seconds"] > args.heavy_seconds \
                    else args.per_kind
                per_kind = count if limit == 0 else limit
                for n in spread(count, per_kind):
                    reruns.append((case, clean, device, kind, n))
        deadline = started + args.max_seconds if args.max_seconds > 0 else None

        def rerun(case, device, kind, n):
            if deadline is not None and time.monotonic() > deadline:
                return None
            return run_case(case, {"CUDASIM_FAIL_NTH": f"{kind}:{n}@{device}"}, args.timeout)

        futures = [pool.submit(rerun, case, device, kind, n)
                   for case, _, device, kind, n in reruns]
        outcomes = {}
        failures = []
        per_binary = {}
        left_out = 0
        for (case, clean, device, kind, n), future in zip(reruns, futures):
            result = future.result()
            if result is None:
                left_out += 1
                continue
            outcome = classify(result, clean)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            binary = os.path.basename(case["command"][0])
            row = per_binary.setdefault(binary, {"cases": set(), "runs": 0, "failed": 0,
                                                 "seconds": 0.0})
            row["cases"].add(case["name"])
            row["runs"] += 1
            row["seconds"] += result["seconds"]
            if outcome in ("crash", "untyped", "hang", "leak"):
                row["failed"] += 1
                tail = "\n".join(result["output"].strip().splitlines()[-15:])
                failures.append(f"{outcome}: {case['name']} with {kind} call {n} on device "
                                f"{device} failing (rc {result['rc']})\n{tail}")
                print(failures[-1], end="\n\n", flush=True)

    for name in clean_failures:
        print(f"clean run failed (not swept): {name}")
    print(f"{'binary':<28} {'cases':>6} {'runs':>6} {'failed':>6} {'run s':>7}")
    for binary, row in sorted(per_binary.items()):
        print(f"{binary:<28} {len(row['cases']):>6} {row['runs']:>6} {row['failed']:>6} "
              f"{row['seconds']:>7.1f}")
    print("outcomes: " + ", ".join(f"{name} {count}" for name, count in sorted(outcomes.items())))
    print(f"{len(cases)} cases, {len(reruns) - left_out} reruns with one failing call"
          + (f" ({left_out} more left out by --max-seconds)" if left_out else "")
          + f", {time.monotonic() - started:.0f} s")
    failed = len(failures) + len(clean_failures)
    print(f"{len(reruns) - left_out - len(failures)} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
