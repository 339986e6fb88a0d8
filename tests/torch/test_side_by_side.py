"""PyTorch's native allocator and cudacache configured as PyTorch's policy, side by side on
cudasim: the same allocation-only scenario in two fresh processes must give identical
torch.cuda.memory_stats() for every key both define.

Run it directly with --print to see the two columns:
    CUDASIM_DIR=build/release/tools/cudasim python3 tests/torch/test_side_by_side.py --print
"""

import sys
import textwrap
import unittest

import torchsim
from torchsim import run_scenario

# cudacache-replay's `pytorch` allocator (tools/replay/cudacache_allocator.h).
PYTORCH_POLICY = (
    "policy:pytorch,max_split_size_mb:unlimited,roundup_power2_divisions:1,expandable_segments:False")

# Allocation only: small and large pools, splits and merges, a second stream, a large
# temporary, empty_cache, reset of peaks, and an out-of-memory that makes both allocators
# release their cache and retry.
SCENARIO = """
import cudacache
oom_guard = cudacache.torch.raise_on_oom if USE_CUDACACHE else __import__("contextlib").nullcontext
MiB = 2**20
def alloc(n):
    with oom_guard():
        return torch.empty(n, dtype=torch.uint8, device="cuda")
kept = []
for step in range(4):
    kept.append(alloc(1000 + 37 * step))
    kept.append(alloc(3 * MiB + 4096 * step))
    temps = [alloc(n) for n in (512, 70000, 1 * MiB + 1, 12 * MiB + 5)]
    del temps[1], temps[2]
    kept.append(alloc(200 * 1024))
    del temps
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    on_side = [alloc(n) for n in (4096, 5 * MiB, 25 * MiB)]
del on_side[1]
big = alloc(300 * MiB)
del big
torch.cuda.reset_peak_memory_stats()
mid = alloc(64 * MiB)
del kept[::2]
torch.cuda.empty_cache()
after_empty = alloc(30 * MiB)
try:
    alloc(900 * MiB)      # more than is free: release the cache, retry, fail
    oom = False
except torch.OutOfMemoryError:
    oom = True
last = alloc(10 * MiB)
report({"oom": oom, "stats": dict(torch.cuda.memory_stats())})
"""


def run(use_cudacache):
    prefix = ("import cudacache.torch\n"
              f"cudacache.torch.install(conf={PYTORCH_POLICY!r})\n" if use_cudacache else "")
    code = f"USE_CUDACACHE = {use_cudacache}\n" + prefix + textwrap.dedent(SCENARIO)
    return run_scenario(code, capacity="1GiB")


class SideBySide(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.native = run(False)
        cls.cudacache = run(True)

    def test_both_hit_the_out_of_memory(self):
        self.assertTrue(self.native["oom"])
        self.assertTrue(self.cudacache["oom"])

    def test_stats_identical_for_every_common_key(self):
        native, ours = self.native["stats"], self.cudacache["stats"]
        common = sorted(set(native) & set(ours))
        self.assertGreater(len(common), 100)  # the nine arrays x 3 pools x 4 + scalars
        differing = {k: (native[k], ours[k]) for k in common if native[k] != ours[k]}
        self.assertEqual(differing, {})
        # The scenario exercised what it meant to.
        self.assertEqual(native["num_ooms"], 1)
        self.assertGreater(native["num_alloc_retries"], 0)
        self.assertGreater(native["inactive_split.all.peak"], 0)
        self.assertGreater(native["segment.small_pool.allocated"], 0)

    def test_key_sets(self):
        only_native = sorted(set(self.native["stats"]) - set(self.cudacache["stats"]))
        only_ours = sorted(set(self.cudacache["stats"]) - set(self.native["stats"]))
        # PyTorch 2.15 added num_oom_rejections (0 here; cudacache has no such counter yet).
        # Any other key missing on either side is a new divergence.
        self.assertEqual(only_native, ["num_oom_rejections"])
        self.assertEqual(self.native["stats"]["num_oom_rejections"], 0)
        self.assertEqual(only_ours, [])


def print_side_by_side():
    native, ours = run(False), run(True)
    keys = sorted(set(native["stats"]) | set(ours["stats"]))
    print(f"{'key':48} {'pytorch native':>16} {'cudacache(pytorch)':>20}")
    for key in keys:
        a, b = native["stats"].get(key, "-"), ours["stats"].get(key, "-")
        mark = "" if a == b else "   <-- differs"
        print(f"{key:48} {a!s:>16} {b!s:>20}{mark}")


if __name__ == "__main__":
    if "--print" in sys.argv:
        if not torchsim.torch_installed():
            sys.exit(torchsim.SKIP_RETURN_CODE)
        print_side_by_side()
    else:
        torchsim.main()
