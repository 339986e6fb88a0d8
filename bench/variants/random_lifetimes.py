#!/usr/bin/env python3
"""Programs whose blocks live random lifetimes: replay traces in which every free takes a live
block drawn at random, one program per seed (bench/POLICY.md, "Random lifetimes").

bench/variants/random_programs.py draws loops: a block's size and its place in an iteration say
how long it lives, which is what cudacache's lifetime prediction learns. Here nothing does.
Each program draws two to four size classes between 4 KiB and 32 MiB (every request one of
them, times a random factor of 0.5 to 1.5, so no two sizes repeat), a number of live blocks to
keep (its working set: 0.5 to 8 GiB worth, within 500 to 20,000 blocks, so peaks of 0.1 to
9 GiB) and one or two streams; it then allocates and frees at random, the working set growing
for its first half and halved for its second. It is the pattern a general-purpose heap sees, and the one that leaves the most
memory in pieces: no allocator can place a block by when it will be freed.

    random_lifetimes.py FIRST_SEED COUNT OUT_DIR    (writes OUT_DIR/lifetimes_SEED.csv)

A seed gives the same program wherever Python's random module draws the same numbers (it has
since Python 3.2).
"""

import pathlib
import random
import sys

# The command line and the CSV are random_programs.py's.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import random_programs  # noqa: E402

# Size classes: a block of each is its class times a random factor of 0.5 to 1.5.
CLASSES = (4 << 10, 64 << 10, 300 << 10, 1 << 20, 3 << 20, 5 << 20, 12 << 20, 32 << 20)


def program(seed):
    """The rows of one program's replay CSV: (op, id, size, stream)."""
    rng = random.Random(seed)
    classes = rng.sample(CLASSES, rng.randint(2, 4))
    mean = sum(classes) / len(classes)
    working_set = max(500, min(20000, int(rng.uniform(0.5, 8) * (1 << 30) / mean)))
    streams = rng.choice((1, 2))
    events = rng.randint(20000, 60000)
    rows, live, sizes, next_id = [], [], {}, 0
    for event in range(events):
        # The working set grows to its size in the first half and falls by half in the second.
        target = working_set if event < events // 2 else working_set // 2
        frees = live and (len(live) >= target or rng.random() < 0.45)
        if frees:
            at = rng.randrange(len(live))
            live[at], live[-1] = live[-1], live[at]
            block = live.pop()
            size, stream = sizes.pop(block)
            rows.append(("free", block, size, stream))
        else:
            size = max(1, int(rng.choice(classes) * rng.uniform(0.5, 1.5)))
            stream = rng.randrange(streams)
            sizes[next_id] = (size, stream)
            rows.append(("alloc", next_id, size, stream))
            live.append(next_id)
            next_id += 1
    return rows


def main(argv):
    return random_programs.write_seeds(argv, program, "lifetimes")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
