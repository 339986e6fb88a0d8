#!/usr/bin/env python3
"""Why cudacache's policy creates pages: replays each trace through cudacache alone with its log
at trace level and counts the pages it created and moved by the reason its log gives (Note [Why
pages are created] in allocator/core/policy_cudacache.cpp), with the estimated time of the
creates (cuMemCreate's published cost, tools/replay/README.md).

    calls_by_reason.py [--capacity-factor F | --capacity SIZE] [--allocator SPEC] TRACE...

The options go to cudacache-replay as they are (its default device when neither is given);
SPEC is a cudacache allocator of cudacache-replay (`cudacache` by default, or `cudacache:CONF`).
Needs the Release build (cmake --workflow --preset demo; CUDACACHE_REPLAY names another
cudacache-replay). Prints one Markdown table per trace.
"""

import collections
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
REPLAY = pathlib.Path(os.environ.get(
    "CUDACACHE_REPLAY", ROOT / "build" / "release" / "tools" / "replay" / "cudacache-replay"))
CREATE_US = 193.32  # cuMemCreate, tools/replay/README.md ("Device calls and what they would cost")
LINE = re.compile(r"device (\d+): (created|moved) (\d+) pages?, (\d+) bytes, for (.+)$")
USAGE = ("usage: calls_by_reason.py [--capacity-factor F | --capacity SIZE] [--allocator SPEC] "
         "TRACE...")


def parse_arguments(argv):
    """(cudacache-replay's device options, the allocator, the traces); exits on bad input."""
    device, allocator, traces = [], "cudacache", []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and "=" in arg:  # --opt=VALUE, as cudacache-replay takes it
            arg, value = arg.split("=", 1)
            argv = argv[:i] + [arg, value] + argv[i + 1:]
        if arg in ("--capacity-factor", "--capacity", "--allocator"):
            if i + 1 >= len(argv):
                sys.exit(f"calls_by_reason.py: {arg} needs a value\n{USAGE}")
            if arg == "--allocator":
                allocator = argv[i + 1]
                if allocator.split(":", 1)[0] != "cudacache":
                    sys.exit(f"calls_by_reason.py: --allocator {allocator}: only cudacache's "
                             "policy logs why it creates pages (cudacache or cudacache:CONF)")
            else:
                device += [arg, argv[i + 1]]
            i += 2
        elif arg.startswith("-"):
            sys.exit(f"calls_by_reason.py: unknown option {arg}\n{USAGE}")
        else:
            traces.append(arg)
            i += 1
    if not traces:
        sys.exit(USAGE)
    return device, allocator, traces


def tally(log_lines):
    """{(kind, reason): [pages, bytes]} from the trace log's lines."""
    counts = collections.defaultdict(lambda: [0, 0])
    for line in log_lines:
        match = LINE.search(line)
        if match:
            entry = counts[(match[2], match[5])]
            entry[0] += int(match[3])
            entry[1] += int(match[4])
    return counts


def table(name, counts):
    lines = [f"`{name}`", "", "| pages | reason | count | MiB | est. create time (ms) |",
             "|---|---|---:|---:|---:|"]
    for kind in ("created", "moved"):
        rows = sorted(((key[1], value) for key, value in counts.items() if key[0] == kind),
                      key=lambda row: -row[1][0])
        for reason, (pages, size) in rows:
            time = f"{pages * CREATE_US / 1000:.1f}" if kind == "created" else "-"
            lines.append(f"| {kind} | {reason} | {pages} | {size / 2**20:.0f} | {time} |")
    created = sum(v[0] for k, v in counts.items() if k[0] == "created")
    lines.append(f"| created | all | {created} | "
                 f"{sum(v[1] for k, v in counts.items() if k[0] == 'created') / 2**20:.0f} | "
                 f"{created * CREATE_US / 1000:.1f} |")
    return "\n".join(lines)


def main(argv):
    device, allocator, traces = parse_arguments(argv)
    if not REPLAY.exists():
        sys.exit(f"calls_by_reason.py: {REPLAY} is missing: cmake --workflow --preset demo builds it")
    env = dict(os.environ, CUDACACHE_LOG_LEVEL="trace")
    for trace in traces:
        if not pathlib.Path(trace).is_file():
            sys.exit(f"calls_by_reason.py: no trace file '{trace}'")
        done = subprocess.run([str(REPLAY), "--allocators", allocator, *device, trace], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              check=False)
        if done.returncode != 0:
            sys.exit(f"calls_by_reason.py: cudacache-replay failed on {trace}:\n"
                     + "\n".join(done.stderr.splitlines()[-5:]))
        print(table(pathlib.Path(trace).stem, tally(done.stderr.splitlines())))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
