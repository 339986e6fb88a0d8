#!/usr/bin/env python3
"""Random programs: replay traces of made-up training and inference loops, one per seed, to
check cudacache's policy on patterns nobody chose (bench/random_programs.sh).

bench/variants/make_variants.py writes workloads someone designed; a policy tuned on them can
still be tuned to them. These programs draw every shape at random from what makes memory
fragment: weights of many sizes loaded first, a loop of layers whose activations are freed in
reverse order by a backward pass, temporaries of random sizes between them, gradients kept or
freed at once, optimizer states made during the first step, blocks kept across iterations and
freed later in random order, a buffer grown by concatenation, and in half the programs shapes
that change from one iteration to the next. A program's typical activation is 1 to 256 MiB,
so the peaks run from tens of MiB to tens of GiB.

    random_programs.py FIRST_SEED COUNT OUT_DIR    (writes OUT_DIR/random_SEED.csv)

A seed gives the same program wherever Python's random module draws the same numbers (it has
since Python 3.2).
"""

import math
import pathlib
import random
import sys


class Program:
    """Rows of a replay CSV (op, id, size, stream) and the blocks still live."""

    def __init__(self):
        self.rows = []
        self.live = {}
        self.next_id = 0

    def alloc(self, size):
        size = max(1, int(size))
        block = self.next_id
        self.next_id += 1
        self.rows.append(("alloc", block, size, 0))
        self.live[block] = size
        return block

    def free(self, block):
        self.rows.append(("free", block, self.live.pop(block), 0))


def program(seed):
    """The rows of the program of `seed`."""
    draw = random.Random(seed)
    p = Program()
    scale = 2 ** draw.uniform(20, 28)  # a typical activation, in bytes
    layers = draw.randint(4, 40)
    weight_sizes = [int(2 ** draw.uniform(12, math.log2(scale) + 1.5))
                    for _ in range(draw.randint(10, 200))]
    for size in weight_sizes:
        p.alloc(size)  # live to the end
    dynamic = draw.random() < 0.5
    kept_share = draw.choice([0, 0.05, 0.2])
    temporaries = draw.uniform(0, 3)  # per activation, on average
    optimizer = draw.random() < 0.5
    iterations = draw.randint(3, 12)
    template = [int(scale * 2 ** draw.uniform(-6, 1))  # each layer's activations
                for _ in range(layers * draw.randint(1, 4))]
    states, kept, grown = [], [], None
    for _ in range(iterations):
        factor = 2 ** draw.uniform(-1.5, 0) if dynamic else 1.0  # this iteration's shapes
        activations = []
        for size in template:
            jitter = draw.choice([1, 1, 1, 1 + draw.random()]) if dynamic else 1
            activations.append(p.alloc(size * factor * jitter))
            for _ in range(int(temporaries + draw.random())):
                p.free(p.alloc(scale * 2 ** draw.uniform(-10, 0.5) * factor))
            if draw.random() < kept_share:
                kept.append(p.alloc(scale * 2 ** draw.uniform(-8, -1)))
        if draw.random() < 0.3:  # torch.cat onto a buffer: the new one, then the old one freed
            size = (p.live[grown] if grown is not None else 0) + int(scale * 2 ** draw.uniform(-6, -2))
            bigger = p.alloc(size)
            if grown is not None:
                p.free(grown)
            grown = bigger
        gradients = []
        for activation in reversed(activations):  # the backward pass
            gradient = p.alloc(p.live[activation])
            p.free(activation)
            if draw.random() < 0.5:
                p.free(gradient)
            else:
                gradients.append(gradient)
        if optimizer and not states:  # made while the first step's gradients are live
            states = [p.alloc(size) for size in weight_sizes for _ in range(2)]
        for gradient in gradients:
            p.free(gradient)
        while len(kept) > draw.randint(0, 30):
            p.free(kept.pop(draw.randrange(len(kept))))
    return p.rows


def write(rows, path):
    with open(path, "w") as f:
        f.write("op,id,size,stream\n")
        for row in rows:
            f.write("%s,%d,%d,%d\n" % row)


def write_seeds(argv, program, prefix):
    """The command line of a generator of one program per seed (this one and
    random_lifetimes.py): FIRST_SEED COUNT OUT_DIR, writing OUT_DIR/PREFIX_SEED.csv. Returns the
    exit status: 2, with the usage on stderr, for arguments that are not two whole numbers (a
    COUNT of at least 1) and a folder."""
    name = pathlib.Path(argv[0]).name
    if len(argv) != 4 or not argv[1].isdigit() or not argv[2].isdigit() or int(argv[2]) == 0:
        print(f"usage: {name} FIRST_SEED COUNT OUT_DIR (whole numbers, COUNT at least 1)",
              file=sys.stderr)
        return 2
    first, count, out = int(argv[1]), int(argv[2]), pathlib.Path(argv[3])
    out.mkdir(parents=True, exist_ok=True)
    for seed in range(first, first + count):
        write(program(seed), out / f"{prefix}_{seed:03d}.csv")
    return 0


def main(argv):
    return write_seeds(argv, program, "random")

if __name__ == "__main__":
    sys.exit(main(sys.argv))
