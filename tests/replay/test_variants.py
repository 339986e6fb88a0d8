"""bench/variants: the traces made from the real ones, and the check of #11's targets on them.

Standard-library unittest, on small traces and JSON written here."""

import importlib.util
import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
VARIANTS = REPO / "bench" / "variants"


def module(name):
    spec = importlib.util.spec_from_file_location(name, VARIANTS / f"{name}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


make_variants = module("make_variants")
check_targets = module("check_targets")
random_programs = module("random_programs")
random_lifetimes = module("random_lifetimes")


def replayable(rows):
    """Every free closes a live id with its alloc's size; ids are allocated once."""
    live, seen = {}, set()
    for op, i, size, _ in rows:
        if op == "alloc":
            if i in seen:
                return False
            seen.add(i)
            live[i] = size
        elif live.pop(i, None) != size:
            return False
    return True


def check_seed_command_line(test, generator, prefix, seed):
    """A generator of one program per seed (random_programs.py, random_lifetimes.py) writes
    OUT_DIR/PREFIX_SEED.csv for seeds SEED and SEED + 1, and refuses a seed or count that is not
    a whole number, a count of 0 and a missing folder with its usage."""
    name = pathlib.Path(generator.__file__).name
    with tempfile.TemporaryDirectory() as folder:
        script = [sys.executable, VARIANTS / name]
        run = subprocess.run(script + [str(seed), "2", folder], capture_output=True, text=True)
        test.assertEqual(run.returncode, 0, run.stderr)
        names = sorted(p.name for p in pathlib.Path(folder).iterdir())
        test.assertEqual(names, [f"{prefix}_{seed:03d}.csv", f"{prefix}_{seed + 1:03d}.csv"])
        lines = pathlib.Path(folder, f"{prefix}_{seed:03d}.csv").read_text().splitlines()
        test.assertEqual(lines[0], "op,id,size,stream")
        test.assertEqual(len(lines) - 1, len(generator.program(seed)))
        for bad in (["x", "2", folder], ["0", "0", folder], ["1", "2"]):
            run = subprocess.run(script + bad, capture_output=True, text=True)
            test.assertEqual(run.returncode, 2, bad)
            test.assertIn(f"{name} FIRST_SEED COUNT OUT_DIR", run.stderr)


SMALL = [("alloc", 0, 3 << 20, 0), ("alloc", 1, 512, 0), ("free", 0, 3 << 20, 0),
         ("alloc", 2, 7 << 20, 0), ("free", 2, 7 << 20, 0)]  # id 1 stays live
OTHER = [("alloc", 0, 1 << 20, 0), ("free", 0, 1 << 20, 0), ("alloc", 1, 9, 0)]


class Variants(unittest.TestCase):
    def test_scaling_scales_every_size_and_keeps_a_byte(self):
        rows = make_variants.scaled(SMALL, 0.5)
        self.assertEqual([r[2] for r in rows], [3 << 19, 256, 3 << 19, 7 << 19, 7 << 19])
        self.assertEqual(make_variants.scaled([("alloc", 0, 1, 0)], 0.1)[0][2], 1)
        self.assertTrue(replayable(rows))

    def test_concatenation_keeps_the_first_workloads_live_blocks(self):
        rows = make_variants.concatenated(SMALL, OTHER)
        self.assertEqual(rows[:len(SMALL)], SMALL)
        self.assertEqual([r[1] for r in rows[len(SMALL):]], [3, 3, 4])
        self.assertTrue(replayable(rows))
        self.assertNotIn(("free", 1, 512, 0), rows)
        on_stream_one = [(op, i, size, 1) for op, i, size, _ in OTHER]
        rows = make_variants.concatenated(SMALL, on_stream_one)
        self.assertEqual({r[3] for r in rows[len(SMALL):]}, {1})  # its own streams kept

    def test_interleaving_keeps_each_order_on_its_own_stream(self):
        rows = make_variants.interleaved(SMALL, OTHER, seed=7)
        self.assertEqual(len(rows), len(SMALL) + len(OTHER))
        self.assertEqual([r for r in rows if r[3] == 0], SMALL)
        self.assertEqual([(op, i - 3, size, 0) for op, i, size, s in rows if s == 1], OTHER)
        self.assertTrue(replayable(rows))
        self.assertEqual(rows, make_variants.interleaved(SMALL, OTHER, seed=7))
        two_streams = SMALL + [("alloc", 9, 4, 1), ("free", 9, 4, 1)]
        rows = make_variants.interleaved(two_streams, OTHER, seed=3)
        self.assertEqual({r[3] for r in rows if r[1] >= 10}, {2})  # after the first's 0 and 1
        self.assertEqual([r for r in rows if r[1] < 10], two_streams)

    def test_the_kv_cache_grows_before_it_frees(self):
        rows = make_variants.kv_cache_decode(layers=2, steps=3, requests=2, token_bytes=10,
                                             prompt=4)
        self.assertTrue(replayable(rows))
        allocs = sum(op == "alloc" for op, *_ in rows)
        self.assertEqual(allocs, len(rows) - allocs)  # nothing is left live at the end
        caches = [size for op, _, size, _ in rows if op == "alloc" and size % 10 == 0
                  and size < 100]
        self.assertEqual(sorted(set(caches)), [40, 50, 60, 70])
        first_growth = next(k for k, r in enumerate(rows) if r[0] == "alloc" and r[2] == 50)
        self.assertEqual(rows[first_growth + 1][0], "free")  # the old cache after the new one
        self.assertEqual(rows[first_growth + 1][2], 40)

    def test_kept_scores_live_until_their_request_ends(self):
        rows = make_variants.kv_cache_decode(layers=2, steps=3, requests=2, token_bytes=10,
                                             prompt=4, kept_scores=7)
        self.assertTrue(replayable(rows))
        allocs = sum(op == "alloc" for op, *_ in rows)
        self.assertEqual(allocs, len(rows) - allocs)
        kept = [k for k, r in enumerate(rows) if r[0] == "alloc" and r[2] == 7]
        self.assertEqual(len(kept), 6)  # one per step of each request
        # Each request's scores are freed together, after its last step's allocations.
        ids = {rows[k][1] for k in kept[:3]}
        frees = [k for k, r in enumerate(rows) if r[0] == "free" and r[1] in ids]
        self.assertEqual(len(frees), 3)
        self.assertGreater(min(frees), kept[2])
        self.assertEqual(frees, list(range(frees[0], frees[0] + 3)))
        without = make_variants.kv_cache_decode(layers=2, steps=3, requests=2, token_bytes=10,
                                                prompt=4)
        self.assertEqual([r[2] for r in rows if r[2] != 7], [r[2] for r in without])

    def test_variable_length_requests_change_every_size_and_keep_the_weights(self):
        def make():
            return make_variants.variable_length_inference(layers=2, hidden=8, heads=2,
                                                           vocab=10, requests=5, seed=1)
        rows = make()
        self.assertTrue(replayable(rows))
        allocs = sum(op == "alloc" for op, *_ in rows)
        self.assertEqual(allocs, len(rows) - allocs)  # nothing is left live at the end
        weights = 1 + 4 * 2  # the embedding and four matrices a layer
        self.assertTrue(all(op == "alloc" for op, *_ in rows[:weights]))
        self.assertEqual(sorted(i for op, i, *_ in rows[-weights:] if op == "free"),
                         list(range(weights)))
        # Every request makes the same events (its token ids, the layers, the pooled output),
        # of sizes that follow its shape: an activation is its token ids' size x hidden / 4
        # (2 bytes an element against 8 a token id).
        requests = rows[weights:-weights]
        per_request = len(requests) // 5
        self.assertEqual(per_request * 5, len(requests))
        shapes = set()
        for k in range(5):
            request = requests[k * per_request:(k + 1) * per_request]
            token_ids, activation = request[0][2], request[1][2]
            self.assertEqual(activation, token_ids * 8 // 4)
            shapes.add(token_ids)
        self.assertEqual(len(shapes), 5)  # no two requests of one shape
        self.assertEqual(rows, make())  # deterministic

    def test_variable_length_training_keeps_its_state_and_changes_every_step(self):
        def make():
            return make_variants.variable_length_training(layers=2, hidden=8, heads=2, vocab=10,
                                                          batch=2, steps=4, tokens=(3, 40),
                                                          seed=1)
        rows = make()
        self.assertTrue(replayable(rows))
        allocs = sum(op == "alloc" for op, *_ in rows)
        self.assertEqual(allocs, len(rows) - allocs)  # nothing is left live at the end
        params = 1 + 12 * 2  # the embedding and twelve tensors a layer
        self.assertTrue(all(op == "alloc" for op, *_ in rows[:params]))
        self.assertEqual(sorted(i for op, i, *_ in rows[-params:] if op == "free"),
                         list(range(params)))
        # Each step starts with its token ids and labels (8 bytes a token), then the embedding's
        # output (2 bytes x hidden a token): a new length every step.
        starts = [k for k in range(params, len(rows) - 2)
                  if rows[k][0] == rows[k + 1][0] == "alloc" and rows[k][2] == rows[k + 1][2]
                  and rows[k + 2][2] == rows[k][2] // 8 * 2 * 8]
        self.assertEqual(len(starts), 4)
        self.assertEqual(len({rows[k][2] for k in starts}), 4)
        # AdamW's two states per parameter are made once, after the first backward, and live
        # to the end; the gradients are made and freed every step.
        sizes = [p[2] for p in rows[:params]]
        first_step = rows[starts[0]:starts[1]]
        made = [r[2] for r in first_step if r[0] == "alloc"]
        self.assertEqual(sum(made.count(size) >= 3 for size in set(sizes)), len(set(sizes)))
        gradients = [r for r in rows[starts[1]:starts[2]] if r[0] == "alloc" and r[2] in sizes]
        self.assertGreaterEqual(len(gradients), params)
        self.assertEqual(rows, make())  # deterministic

    def test_continuous_batching_grows_each_cache_by_a_token_and_ends_requests_apart(self):
        def make(output=(1, 6)):
            return make_variants.continuous_batching(layers=2, hidden=4, vocab=1000, slots=3,
                                                     steps=20, prompt=(2, 5), output=output,
                                                     seed=1)
        rows = make()
        self.assertTrue(replayable(rows))
        allocs = sum(op == "alloc" for op, *_ in rows)
        self.assertEqual(allocs, len(rows) - allocs)  # nothing is left live at the end
        token = 2 * 4 * 2
        # torch.cat: the longer cache is made before the one it replaces is freed, for every
        # request in every step and layer (the slots are refilled before each step).
        grown = sum(1 for a, b in zip(rows, rows[1:])
                    if a[0] == "alloc" and b[0] == "free" and b[2] == a[2] - token)
        self.assertEqual(grown, 3 * 20 * 2)

        def ended_per_step(rows):
            """Requests whose caches are freed after each step: the frees that follow the
            step's logits (3 x 1000 float32) and its last activation."""
            ended = []
            for k, row in enumerate(rows):
                if row[0] == "alloc" and row[2] == 3 * 1000 * 4:
                    frees = 0
                    while k + 3 + frees < len(rows) and rows[k + 3 + frees][0] == "free":
                        frees += 1
                    ended.append(frees // 2)  # two layers
            return ended

        # Requests of random lengths end apart: some steps end one request while the other two
        # go on; with one length for all, the three started together end together.
        ended = ended_per_step(rows)
        self.assertEqual(len(ended), 20)
        self.assertIn(1, ended)
        self.assertNotIn(1, ended_per_step(make(output=(4, 4))))
        self.assertEqual(rows, make())  # deterministic

    def test_moe_training_gives_the_experts_new_sizes_every_step(self):
        def make(steps):
            return make_variants.moe_training(layers=2, hidden=8, experts=4, ffn=16, tokens=64,
                                              vocab=10, steps=steps, seed=1)
        rows = make(3)
        self.assertTrue(replayable(rows))
        allocs = sum(op == "alloc" for op, *_ in rows)
        self.assertEqual(allocs, len(rows) - allocs)  # nothing is left live at the end
        # Each step adds expert buffers of sizes the steps before it did not have.
        sizes = [{r[2] for r in make(steps) if r[0] == "alloc"} for steps in (1, 2, 3)]
        self.assertLess(len(sizes[0]), len(sizes[1]))
        self.assertLess(len(sizes[1]), len(sizes[2]))
        self.assertEqual(rows, make(3))  # deterministic

    def test_random_resolution_cnn_serves_images_of_several_sizes(self):
        def make():
            return make_variants.random_resolution_cnn(channels=(2, 4), blocks=1, requests=12,
                                                       seed=1)
        rows = make()
        self.assertTrue(replayable(rows))
        allocs = sum(op == "alloc" for op, *_ in rows)
        self.assertEqual(allocs, len(rows) - allocs)  # nothing is left live at the end
        weights = 2 * 2
        per_request = (len(rows) - 2 * weights) // 12
        inputs = [rows[weights + k * per_request][2] for k in range(12)]
        # An input is batch (1-16) x 3 x side^2 float32: the sides it can come from.
        sides = set()
        for size in inputs:
            fits = [side for side in (224, 256, 320, 384, 448, 512, 640)
                    if size % (12 * side * side) == 0 and size // (12 * side * side) <= 16]
            if len(fits) == 1:
                sides |= set(fits)
        self.assertGreaterEqual(len(sides), 3)  # not one resolution with batches of any size
        self.assertEqual(rows, make())  # deterministic

    def test_sharded_training_gathers_each_layer_twice_a_step_on_its_own_stream(self):
        def make(steps):
            return make_variants.sharded_training(layers=3, hidden=8, ranks=4, batch=1, seq=16,
                                                  vocab=10, steps=steps)
        rows = make(2)
        self.assertTrue(replayable(rows))
        allocs = [r for r in rows if r[0] == "alloc"]
        self.assertEqual(len(allocs), len(rows) - len(allocs))  # nothing is left live at the end
        gathered = 12 * 8 * 8 * 2  # a layer's whole bfloat16 parameters
        gathers = [r for r in allocs if r[2] == gathered and r[3] == 1]
        self.assertEqual(len(gathers), 2 * 3 * 2)  # forward and backward, every layer, 2 steps
        # Gathered one layer ahead: never more than two layers' parameters at once.
        live, most = set(), 0
        for op, i, size, stream in rows:
            if size == gathered and stream == 1:
                (live.add if op == "alloc" else live.discard)(i)
                most = max(most, len(live))
        self.assertEqual(most, 2)
        self.assertEqual({r[3] for r in rows}, {0, 1})
        self.assertEqual(rows, make(2))  # deterministic

    def test_checkpointed_training_recomputes_each_layer_in_the_backward(self):
        def make(steps):
            return make_variants.checkpointed_training(layers=4, hidden=8, batch=1, seq=16,
                                                       vocab=10, steps=steps)
        rows = make(2)
        self.assertTrue(replayable(rows))
        allocs = [r for r in rows if r[0] == "alloc"]
        self.assertEqual(len(allocs), len(rows) - len(allocs))  # nothing is left live at the end
        qkv = 3 * 16 * 8 * 2
        # Each layer's projections twice a step (forward, recompute) and their gradient once.
        self.assertEqual(sum(r[2] == qkv for r in allocs), 3 * 4 * 2)
        # One layer's activations at a time: a layer's projections and their gradient, never
        # two layers' projections (a forward keeping its activations would hold all four).
        live, most = set(), 0
        for op, i, size, _ in rows:
            if size == qkv:
                (live.add if op == "alloc" else live.discard)(i)
                most = max(most, len(live))
        self.assertEqual(most, 2)
        self.assertEqual(rows, make(2))  # deterministic

    def test_only_variants_of_traces_present_are_written(self):
        with tempfile.TemporaryDirectory() as folder:
            traces, out = pathlib.Path(folder, "traces"), pathlib.Path(folder, "out")
            traces.mkdir()
            make_variants.save(traces / "bert_large_inference.csv", SMALL)
            make_variants.save(traces / "decomfl_zo_federated_opt_finetune.csv", OTHER)
            names = make_variants.make_variants(traces, out)
            self.assertEqual(names, ["checkpointed_training", "concat_decomfl_bert",
                                     "continuous_batching", "kv_cache_cat_decode",
                                     "kv_cache_cat_kept_scores", "moe_training",
                                     "random_resolution_cnn", "scaled_bert_x2.7",
                                     "scaled_decomfl_x3.3", "sharded_training",
                                     "two_streams_bert_decomfl", "variable_length_inference",
                                     "variable_length_training"])
            self.assertEqual(make_variants.load(out / "scaled_bert_x2.7.csv"),
                             make_variants.scaled(SMALL, 2.7))
            for name in names:
                self.assertTrue(replayable(make_variants.load(out / f"{name}.csv")), name)

    def test_other_traces_in_the_output_folder_are_named_and_kept(self):
        with tempfile.TemporaryDirectory() as folder:
            traces, out = pathlib.Path(folder, "traces"), pathlib.Path(folder, "out")
            traces.mkdir()
            out.mkdir()
            make_variants.save(traces / "bert_large_inference.csv", SMALL)
            make_variants.save(out / "scaled_old_x1.0.csv", SMALL)  # an earlier run's
            run = subprocess.run([sys.executable, VARIANTS / "make_variants.py", traces, out],
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertIn("1 other trace(s), not made by this run: scaled_old_x1.0.csv",
                          run.stderr)
            self.assertNotIn("scaled_bert_x2.7", run.stderr)
            self.assertTrue((out / "scaled_old_x1.0.csv").is_file())
            # A second run into the same folder names only the stranger.
            run = subprocess.run([sys.executable, VARIANTS / "make_variants.py", traces, out],
                                 capture_output=True, text=True)
            self.assertIn(": scaled_old_x1.0.csv", run.stderr)

    def test_a_bad_header_or_folder_is_refused(self):
        with tempfile.TemporaryDirectory() as folder:
            bad = pathlib.Path(folder, "bert_large_inference.csv")
            bad.write_text("op,id,bytes\nalloc,0,1\n")
            run = subprocess.run([sys.executable, VARIANTS / "make_variants.py", folder,
                                  pathlib.Path(folder, "out")], capture_output=True, text=True)
            self.assertEqual(run.returncode, 2)
            self.assertIn("header", run.stderr)
            run = subprocess.run([sys.executable, VARIANTS / "make_variants.py",
                                  pathlib.Path(folder, "none"), folder],
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 2)
            self.assertIn("not found", run.stderr)


def result(allocator, min_bytes, reserved=1.0, seconds=0.01, oom=False):
    return {"allocator": allocator, "min_capacity_bytes": min_bytes,
            "min_capacity_over_requested": None if min_bytes is None else min_bytes / PEAK, "reserved_over_requested": reserved,
            "estimated_device_call_seconds": seconds, "oom": oom}


PEAK = 1000 << 20


def trace(name, results):
    return {"name": name, "peak_requested_bytes": PEAK, "results": results}


def runs(cudacache_min, cudacache_seconds=0.01, pressure_seconds=0.02, pressure_oom=False,
         te_pressure_oom=False):
    mib = 1 << 20
    minimum = {"traces": [trace("t", [result("cudacache", cudacache_min, seconds=cudacache_seconds),
                                      result("pytorch-expandable", 1010 * mib, seconds=0.02),
                                      result("cub", 1001 * mib, reserved=1.2),
                                      result("nocache", 1000 * mib)])]}
    pressure = {"traces": [trace("t", [
        result("cudacache", 0, seconds=pressure_seconds, oom=pressure_oom),
        result("pytorch-expandable", 0, seconds=0.03, oom=te_pressure_oom),
        result("nocache", 0)])]}
    return minimum, pressure


class Targets(unittest.TestCase):
    def minimum(self, cudacache, te, cub, nocache, reserved=1.0, cub_reserved=1.0):
        """One trace's --min-capacity run (MiB) with a pressure run where cudacache wins."""
        mib = 1 << 20
        minimum = {"traces": [trace("t", [
            result("cudacache", cudacache and cudacache * mib, reserved=reserved),
            result("pytorch-expandable", te and te * mib, seconds=0.02),
            result("cub", cub and cub * mib, reserved=cub_reserved),
            result("nocache", nocache and nocache * mib)])]}
        return check_targets.check(minimum, runs(1002 << 20)[1])[1]

    def test_the_2_mib_step_and_the_tenth_of_a_percent_tie_differ(self):
        # CUB at 1001 MiB: 0.2 % is 1003.002 MiB, the step 1003 MiB; 1003.5 is over both.
        self.assertEqual(self.minimum(1003.5, 1010, 1001, 1000)["smallest device"], 1)
        # A large CUB figure: 0.2 % of 5000 MiB (10 MiB) is more than the step.
        mib = 1 << 20
        self.assertEqual(check_targets.within_tie(5009 * mib, {"min_capacity_bytes": 5000 * mib}),
                         True)
        self.assertEqual(check_targets.within_tie(5011 * mib, {"min_capacity_bytes": 5000 * mib}),
                         False)
        # A small one: the 2 MiB step is more than 0.2 %.
        self.assertEqual(check_targets.within_tie(101 * mib, {"min_capacity_bytes": 99 * mib}),
                         True)
        self.assertEqual(check_targets.within_tie(102 * mib, {"min_capacity_bytes": 99 * mib}),
                         False)

    def test_above_one_percent_is_met_only_within_nocache_and_4_mib(self):
        self.assertEqual(self.minimum(1015, 1020, 1015, 1012)["smallest device"], 0)
        self.assertEqual(self.minimum(1017, 1020, 1017, 1012)["smallest device"], 1)

    def test_more_than_tes_tie_misses(self):
        self.assertEqual(self.minimum(1005, 1001, 1005, 1000)["smallest device"], 1)

    def test_held_memory_may_reach_cubs(self):
        self.assertEqual(self.minimum(1002, 1010, 1001, 1000, reserved=1.15,
                                      cub_reserved=1.2)["held with room"], 0)
        self.assertEqual(self.minimum(1002, 1010, 1001, 1000, reserved=1.15,
                                      cub_reserved=1.05)["held with room"], 1)

    def test_no_device_found_misses_for_cudacache_and_binds_nothing_for_the_others(self):
        self.assertEqual(self.minimum(None, 1010, 1001, 1000)["smallest device"], 1)
        self.assertEqual(self.minimum(1002, None, None, 1000)["smallest device"], 0)
        mib = 1 << 20
        minimum = {"traces": [trace("t", [result("cudacache", None),
                                          result("pytorch-expandable", 1010 * mib),
                                          result("cub", 1001 * mib), result("nocache", None)])]}
        rows, _, means = check_targets.check(minimum, runs(1002 << 20)[1])
        self.assertIn("no device found", rows[0])
        self.assertTrue(means["cudacache"] != means["cudacache"])  # nan: no figure at all

    def test_a_trace_that_meets_every_target(self):
        rows, misses, means = check_targets.check(*runs(1002 << 20))
        self.assertEqual(sum(misses.values()), 0, rows)
        self.assertAlmostEqual(means["cudacache"], 1.002, places=6)

    def test_more_than_cubs_tie_misses_the_smallest_device(self):
        _, misses, _ = check_targets.check(*runs(1004 << 20))  # cub 1001 MiB: over 2 MiB more
        self.assertEqual(misses["smallest device"], 1)
        _, misses, _ = check_targets.check(*runs(1003 << 20))  # one 2 MiB step: a tie
        self.assertEqual(misses["smallest device"], 0)

    def test_calls_above_expandable_segments_miss(self):
        _, misses, _ = check_targets.check(*runs(1002 << 20, cudacache_seconds=0.03))
        self.assertEqual(misses["calls with room"], 1)
        _, misses, _ = check_targets.check(*runs(1002 << 20, pressure_seconds=0.04))
        self.assertEqual(misses["calls under pressure"], 1)
        # Where expandable segments run out of memory, any call time of cudacache's counts.
        _, misses, _ = check_targets.check(*runs(1002 << 20, pressure_seconds=0.04,
                                                 te_pressure_oom=True))
        self.assertEqual(misses["calls under pressure"], 0)

    def test_out_of_memory_where_another_completes_misses(self):
        _, misses, _ = check_targets.check(*runs(1002 << 20, pressure_oom=True))
        self.assertEqual(misses["calls under pressure"], 1)
        minimum, pressure = runs(1002 << 20, pressure_oom=True, te_pressure_oom=True)
        pressure["traces"][0]["results"][2]["oom"] = True  # nocache too: nobody completes
        _, misses, _ = check_targets.check(minimum, pressure)
        self.assertEqual(misses["calls under pressure"], 0)

    def test_twice_the_peak_counts_dearer_calls_and_fuller_devices_with_the_worst(self):
        def twice(name, cc_seconds, te_seconds, cc_held, te_held, oom=False):
            return trace(name, [result("cudacache", 0, reserved=cc_held, seconds=cc_seconds,
                                       oom=oom),
                                result("pytorch-expandable", 0, reserved=te_held,
                                       seconds=te_seconds)])
        run = {"traces": [twice("a", 0.030, 0.010, 1.05, 1.05),   # 3 x te's calls
                          twice("b", 0.020, 0.010, 1.20, 1.10),   # 2 x, and holds more
                          twice("c", 0.005, 0.010, 1.1005, 1.10),  # within 0.1 %: not more
                          twice("d", 9.0, 0.010, 9.0, 1.0, oom=True)]}  # left out
        line = check_targets.twice_the_peak(run)
        self.assertIn("calls 55.0 ms in all against te's 30.0, above te's on 2", line)
        self.assertIn("(most: `a`, 30.0 against 10.0 ms)", line)
        self.assertIn("holding more than te on 1 (most: `b`, 1.200 against 1.100", line)
        self.assertTrue(line.endswith("; left out, out of memory: `d`."), line)
        line = check_targets.twice_the_peak({"traces": [twice("c", 0.005, 0.010, 1.0, 1.0)]})
        self.assertTrue(line.endswith("above te's on 0; holding more than te on 0."), line)

    def test_a_missing_allocator_or_trace_is_a_clear_error(self):
        minimum, pressure = runs(1002 << 20)
        pressure["traces"][0]["name"] = "other"
        with self.assertRaisesRegex(ValueError, "not in the pressure run"):
            check_targets.check(minimum, pressure)
        minimum, pressure = runs(1002 << 20)
        minimum["traces"][0]["results"].pop()
        with self.assertRaisesRegex(ValueError, "no result for nocache"):
            check_targets.check(minimum, pressure)
        with tempfile.TemporaryDirectory() as folder:
            bad = pathlib.Path(folder, "bad.json")
            bad.write_text("{")
            run = subprocess.run([sys.executable, VARIANTS / "check_targets.py", bad, bad],
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 2)
            self.assertIn("check_targets.py:", run.stderr)
            # A third run without te's results is named, not a crash.
            good_min, good_pressure = (pathlib.Path(folder, n) for n in ("min.json", "p.json"))
            minimum, pressure = runs(1002 << 20)
            good_min.write_text(json.dumps(minimum))
            good_pressure.write_text(json.dumps(pressure))
            third = pathlib.Path(folder, "twice.json")
            third.write_text(json.dumps({"traces": [trace("t", [result("cudacache", 0)])]}))
            run = subprocess.run([sys.executable, VARIANTS / "check_targets.py", good_min,
                                  good_pressure, third], capture_output=True, text=True)
            self.assertEqual(run.returncode, 2)
            self.assertIn("no result for pytorch-expandable", run.stderr)
            run = subprocess.run([sys.executable, VARIANTS / "check_targets.py", good_min,
                                  good_pressure], capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stderr)
            self.assertNotIn("2 MiB pages", run.stdout)

    def test_pages_adds_the_targets_of_the_page_model(self):
        with tempfile.TemporaryDirectory() as folder:
            files = {}
            for name, (minimum, pressure) in (("", runs(1002 << 20)),
                                              ("pages-", runs(1004 << 20, pressure_oom=True))):
                files[name + "min"] = pathlib.Path(folder, name + "min.json")
                files[name + "pressure"] = pathlib.Path(folder, name + "pressure.json")
                files[name + "min"].write_text(json.dumps(minimum))
                files[name + "pressure"].write_text(json.dumps(pressure))
            script = [sys.executable, VARIANTS / "check_targets.py"]
            run = subprocess.run(script + [files["min"], files["pressure"], "--pages",
                                           files["pages-min"], files["pages-pressure"]],
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stderr)
            last = run.stdout.strip().splitlines()[-1]
            self.assertTrue(last.startswith("With cudaMalloc in 2 MiB pages"), last)
            self.assertIn("cudacache 1.0040", last)
            self.assertIn("of 1: smallest device 1, held with room 0, calls with room 0, calls "
                          "under pressure 1.", last)
            self.assertIn("Traces missing each target, of 1: smallest device 0", run.stdout)
            # --pages needs both runs.
            run = subprocess.run(script + [files["min"], files["pressure"], "--pages",
                                           files["pages-min"]], capture_output=True, text=True)
            self.assertEqual(run.returncode, 2)

    def test_misses_only_lists_only_the_traces_that_miss(self):
        with tempfile.TemporaryDirectory() as folder:
            script = [sys.executable, VARIANTS / "check_targets.py"]
            for cudacache_min, listed in ((1002 << 20, False), (1020 << 20, True)):
                minimum, pressure = runs(cudacache_min)
                paths = [pathlib.Path(folder, "min.json"), pathlib.Path(folder, "pressure.json")]
                paths[0].write_text(json.dumps(minimum))
                paths[1].write_text(json.dumps(pressure))
                run = subprocess.run(script + paths + ["--misses-only"], capture_output=True,
                                     text=True)
                self.assertEqual(run.returncode, 0, run.stderr)
                self.assertEqual("| `t` |" in run.stdout, listed, run.stdout)
                self.assertIn("Traces missing each target, of 1", run.stdout)


class RandomPrograms(unittest.TestCase):
    def test_a_seed_gives_one_replayable_program(self):
        for seed in range(12):
            rows = random_programs.program(seed)
            self.assertEqual(rows, random_programs.program(seed))
            self.assertTrue(replayable(rows), seed)
            self.assertTrue(all(size >= 1 and stream == 0 for _, _, size, stream in rows))
        self.assertNotEqual(random_programs.program(0), random_programs.program(1))

    def test_programs_range_from_megabytes_to_gigabytes(self):
        peaks = []
        for seed in range(40):
            live = peak = 0
            for op, _, size, _ in random_programs.program(seed):
                live += size if op == "alloc" else -size
                peak = max(peak, live)
            peaks.append(peak)
        self.assertLess(min(peaks), 256 << 20)
        self.assertGreater(max(peaks), 4 << 30)

    def test_the_command_line_writes_one_csv_per_seed(self):
        check_seed_command_line(self, random_programs, "random", 5)

    def test_the_script_refuses_a_count_or_seed_that_is_not_a_whole_number(self):
        # Refused before anything is built or replayed.
        script = REPO / "bench" / "random_programs.sh"
        for args in (["x"], ["0"], ["5", "-1"], ["2.5"]):
            run = subprocess.run(["bash", script, *args], capture_output=True, text=True,
                                 timeout=30)
            self.assertEqual(run.returncode, 2, args)
            self.assertIn("usage: bench/random_programs.sh [COUNT] [FIRST_SEED]", run.stderr)

    def test_the_script_refuses_a_kind_it_does_not_know_naming_it(self):
        script = REPO / "bench" / "random_programs.sh"
        run = subprocess.run(["bash", script, "5", "0", "heaps"], capture_output=True, text=True,
                             timeout=30)
        self.assertEqual(run.returncode, 2)
        self.assertIn("unknown KIND 'heaps'", run.stderr)
        self.assertIn("KIND loops or lifetimes", run.stderr)


class RandomLifetimes(unittest.TestCase):
    def test_a_seed_gives_one_replayable_program_on_one_or_two_streams(self):
        streams = set()
        for seed in range(8):
            rows = random_lifetimes.program(seed)
            self.assertEqual(rows, random_lifetimes.program(seed))
            self.assertTrue(replayable(rows), seed)
            self.assertTrue(all(size >= 1 for _, _, size, _ in rows))
            # A block is freed on the stream it was allocated on.
            allocated = {i: stream for op, i, _, stream in rows if op == "alloc"}
            self.assertTrue(all(allocated[i] == stream for op, i, _, stream in rows
                                if op == "free"))
            streams |= {stream for _, _, _, stream in rows}
        self.assertEqual(streams, {0, 1})
        self.assertNotEqual(random_lifetimes.program(0), random_lifetimes.program(1))

    def test_frees_take_blocks_of_every_age_not_the_newest_first(self):
        rows = random_lifetimes.program(3)
        born, order, ages = {}, 0, []
        for op, i, _, _ in rows:
            if op == "alloc":
                born[i] = order
                order += 1
            else:
                ages.append(order - born[i])
        ages.sort()
        # Random frees: the median block lived far longer than the newest would, and some lived
        # a handful of allocations.
        self.assertLess(ages[0], 4)
        self.assertGreater(ages[len(ages) // 2], 100)

    def test_the_command_line_writes_one_csv_per_seed(self):
        check_seed_command_line(self, random_lifetimes, "lifetimes", 7)


if __name__ == "__main__":
    unittest.main()
