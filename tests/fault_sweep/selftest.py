#!/usr/bin/env python3
"""Checks that the fault sweep tells each misbehaviour by its name: run_suite_sweep.py on
selftest_cases.cpp, whose cases pass as they are and, when a call fails, leak, throw an untyped
error, abort or hang (each must be reported, and the sweep must fail), or throw a typed error,
fail their own expectation or retry (none of which may be reported); and that bad options are
refused by name."""
import os
import re
import subprocess
import sys

EXPECTED_FAILURES = [
    r"^leak: SweepSelfTest\.LeaksWhenTheSecondMallocFails with malloc call 2 on device 0",
    r"^untyped: SweepSelfTest\.ThrowsAnUntypedError with malloc call 1 on device 0",
    r"^crash: SweepSelfTest\.AbortsWhenAFreeFails with free call 1 on device 0",
    r"^hang: SweepSelfTest\.HangsWhenAMallocFails with malloc call 1 on device 0",
]
ALLOWED = ["ThrowsATypedError", "ExpectsEveryCallToSucceed", "RetriesAFailedMalloc"]


def main():
    build = sys.argv[1]
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_suite_sweep.py")
    done = subprocess.run(
        [sys.executable, script, "--build", build, "--include", "^fault_sweep_selftest_cases$",
         "--exclude", "^$", "--timeout", "10"],
        capture_output=True, text=True)
    output = done.stdout + done.stderr
    problems = []
    if done.returncode != 1:
        problems.append(f"the sweep exited {done.returncode}, not 1")
    for pattern in EXPECTED_FAILURES:
        if not re.search(pattern, output, re.M):
            problems.append(f"not reported: {pattern}")
    failure_lines = re.findall(r"^(?:leak|untyped|crash|hang): .*$", output, re.M)
    if len(failure_lines) != len(EXPECTED_FAILURES):
        problems.append(f"{len(failure_lines)} failures reported, {len(EXPECTED_FAILURES)} "
                        "expected")
    for name in ALLOWED:
        if any(name in line for line in failure_lines):
            problems.append(f"an allowed outcome was reported as a failure: {name}")
    outcomes = re.search(r"^outcomes: (.*)$", output, re.M)
    for outcome in ("typed", "test-failed", "passed"):
        if outcomes is None or not re.search(rf"\b{outcome} [1-9]", outcomes.group(1)):
            problems.append(f"no run ended as '{outcome}'")
    # Bad input: an unknown kind is refused by name before anything runs.
    bad = subprocess.run([sys.executable, script, "--build", build, "--kinds", "map,bogus"],
                         capture_output=True, text=True)
    if bad.returncode != 2 or "unknown kind(s) bogus" not in bad.stderr:
        problems.append(f"--kinds bogus: exit {bad.returncode}, stderr {bad.stderr.strip()!r}")
    missing = subprocess.run([sys.executable, script, "--build", build, "--filter", "^NoSuch$"],
                             capture_output=True, text=True)
    if missing.returncode != 2 or "no test case matched" not in missing.stderr:
        problems.append(f"--filter matching nothing: exit {missing.returncode}")
    if problems:
        print(output)
        print("\n".join(problems))
        return 1
    print("selftest: every misbehaviour reported by name, no allowed outcome reported")
    return 0


if __name__ == "__main__":
    sys.exit(main())
