#!/usr/bin/env python3
"""Instructions per event of one replay, from `callgrind_annotate --inclusive=yes` on stdin.

Used by bench/instructions.sh: the replay ran under callgrind collecting only inside
DeviceAllocator::allocate and ::deallocate. From that total, the instructions under the device
calls that cudasim times are subtracted (the wrappers named in DEVICE_CALLS: each makes one
call and none calls another, so their inclusive counts add up without overlap). The argument
is the replay's --json output: its event count, and whether it completed (a replay cut short by
an out-of-memory error has no comparable count). Prints the count per event, one decimal.
"""
import json
import re
import sys

DEVICE_CALLS = re.compile(
    r"cudacache::vmm_api::(create|release|map|unmap|set_access|reserve|address_free)\(|"
    r"cudacache::device_api::(malloc_memory|free_memory|synchronize|synchronize_stream)\(")
# "1,234,567 (12.34%)  file:function [object]", callgrind_annotate's line for one function.
LINE = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: callgrind_annotate --inclusive=yes OUT | instructions_per_event.py "
                 "REPLAY_JSON")
    with open(sys.argv[1], encoding="utf-8") as f:
        replay = json.load(f)
    traces = replay.get("traces", [])
    if len(traces) != 1 or len(traces[0].get("results", [])) != 1:
        sys.exit("instructions_per_event.py: the replay JSON must hold one trace and one allocator")
    trace = traces[0]
    result = trace["results"][0]
    if result["oom"]:
        sys.exit(f"instructions_per_event.py: {trace['name']} / {result['allocator']} ran out of "
                 "memory: a larger capacity is needed")
    total = None
    device_calls = 0
    for line in sys.stdin:
        match = LINE.match(line)
        if not match:
            continue
        count = int(match[1].replace(",", ""))
        if "PROGRAM TOTALS" in match[2]:
            total = count
        elif DEVICE_CALLS.search(match[2]):
            device_calls += count
    if total is None:
        sys.exit("instructions_per_event.py: no PROGRAM TOTALS line: not callgrind_annotate output")
    print(f"{(total - device_calls) / trace['events']:.1f}")


if __name__ == "__main__":
    main()
