"""What the page and memory_viz tests share: the tools under test and small traces."""

import os
import random
import subprocess
import sys

REPLAY = os.environ.get("CUDACACHE_REPLAY", "cudacache-replay")
SKIP_RETURN_CODE = 77  # CTest's SKIP_RETURN_CODE for these tests

# Two streams, an empty_cache, an allocation live at the end: every kind of row.
SMALL_TRACE = """op,id,size,stream
alloc,0,1000,0
alloc,1,3000,1
free,0,1000,0
alloc,2,3145728,1
alloc,3,700,0
empty_cache,,,
free,1,3000,1
alloc,4,5000000,0
free,2,3145728,1
free,3,700,0
"""


def replay(*args, check=True):
    result = subprocess.run([REPLAY, *args], capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"cudacache-replay {' '.join(args)} exited with {result.returncode}:"
                             f"\n{result.stderr[-4000:]}")
    return result


def write_random_trace(path, events, seed=14):
    """A trace of `events` rows (allocs and frees, two streams, sizes from 512 B to 64 MiB)
    with phases of growth and release, like training steps."""
    rng = random.Random(seed)
    live = []
    next_id = 0
    rows = ["op,id,size,stream"]
    while len(rows) - 1 < events:
        growing = (len(rows) // 5000) % 2 == 0
        if live and (rng.random() < (0.35 if growing else 0.65) or len(rows) - 1 + len(live) >= events):
            ident, size, stream = live.pop(rng.randrange(len(live)))
            rows.append(f"free,{ident},{size},{stream}")
        else:
            size = int(512 * 2 ** rng.uniform(0, 17))
            stream = rng.choice((0, 0, 0, 1))
            live.append((next_id, size, stream))
            rows.append(f"alloc,{next_id},{size},{stream}")
            next_id += 1
    with open(path, "w") as file:
        file.write("\n".join(rows) + "\n")


def trace_rows(text):
    """Alloc and free rows with ids renumbered in order of first use (empty_cache left out)."""
    ids = {}
    rows = []
    for line in text.splitlines()[1:]:
        op, ident, size, stream = line.split(",")
        if op == "empty_cache":
            continue
        number = ids.setdefault(ident, len(ids))
        rows.append((op, number, int(size), int(stream)))
    return rows


def exit_skipped(message):
    print(f"SKIPPED: {message}", file=sys.stderr)
    sys.exit(SKIP_RETURN_CODE)
