"""bench/replay/calls_by_reason.py: cudacache's pages counted by the reason its trace log gives.

Standard-library unittest; the last test replays a small trace through the cudacache-replay
named by CUDACACHE_REPLAY (CTest sets it) and checks the log's count against the replay's."""

import contextlib
import importlib.util
import io
import json
import os
import pathlib
import re
import subprocess
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location(
    "calls_by_reason", REPO / "bench" / "replay" / "calls_by_reason.py")
calls_by_reason = importlib.util.module_from_spec(spec)
spec.loader.exec_module(calls_by_reason)

LOG = [
    "[2026-12-07 02:25:05.599] [cudacache 1] [trace] device 0: created 3 pages, 6291456 bytes, "
    "for a large-pool growth without room",
    "[2026-12-07 02:25:05.599] [cudacache 1] [trace] device 0: created 1 page, 2097152 bytes, "
    "for a large-pool growth without room",
    "[2026-12-07 02:25:05.599] [cudacache 1] [trace] device 0: moved 4 pages, 8388608 bytes, "
    "for a growth without room",
    "[2026-12-07 02:25:05.600] [cudacache 1] [trace] device 0: expandable range of 1 bytes at 0x0",
]


class CallsByReason(unittest.TestCase):
    def test_tally_counts_pages_and_bytes_by_kind_and_reason(self):
        counts = calls_by_reason.tally(LOG)
        self.assertEqual(counts[("created", "a large-pool growth without room")], [4, 8 << 20])
        self.assertEqual(counts[("moved", "a growth without room")], [4, 8 << 20])
        self.assertEqual(len(counts), 2)  # the range's line is not a page

    def test_table_prices_creates_not_moves(self):
        text = calls_by_reason.table("t", calls_by_reason.tally(LOG))
        self.assertIn("| created | a large-pool growth without room | 4 | 8 | 0.8 |", text)
        self.assertIn("| moved | a growth without room | 4 | 8 | - |", text)
        self.assertIn("| created | all | 4 | 8 | 0.8 |", text)

    def test_the_create_cost_is_the_replay_tools(self):
        readme = (REPO / "tools" / "replay" / "README.md").read_text()
        row = re.search(r"^\| `create` \| cuMemCreate \| ([\d.]+) \|", readme, re.M)
        self.assertIsNotNone(row)
        self.assertEqual(float(row[1]), calls_by_reason.CREATE_US)

    def test_options_take_their_value_after_a_space_or_an_equals_sign(self):
        for argv in (["--capacity-factor", "1.02", "--allocator", "cudacache:publish_stats:False",
                      "a.csv", "b.csv"],
                     ["--capacity-factor=1.02", "--allocator=cudacache:publish_stats:False",
                      "a.csv", "b.csv"]):
            with self.subTest(argv=argv):
                self.assertEqual(calls_by_reason.parse_arguments(argv),
                                 (["--capacity-factor", "1.02"], "cudacache:publish_stats:False",
                                  ["a.csv", "b.csv"]))

    def test_bad_arguments_are_refused_with_the_problem_named(self):
        for argv, said in ((["--capacity-factor"], "needs a value"),
                           (["--fast", "t.csv"], "unknown option --fast"),
                           (["--allocator", "pytorch", "t.csv"], "only cudacache's policy"),
                           ([], "usage:")):
            with self.subTest(argv=argv):
                with self.assertRaises(SystemExit) as raised:
                    calls_by_reason.parse_arguments(argv)
                self.assertIn(said, str(raised.exception))
        with self.assertRaises(SystemExit) as raised:
            calls_by_reason.main(["no-such-trace.csv"])
        self.assertIn("no trace file", str(raised.exception))

    @unittest.skipUnless(os.environ.get("CUDACACHE_REPLAY"), "CUDACACHE_REPLAY is not set")
    def test_every_create_of_a_replay_is_in_the_log(self):
        with tempfile.TemporaryDirectory() as work:
            trace = pathlib.Path(work) / "grow.csv"
            rows = ["op,id,size,stream"]
            for i in range(40):  # blocks of 1-9 MiB, every third freed: growths, pages moved
                rows.append(f"alloc,{i},{(1 + i % 9) << 20},0")
                if i % 3 == 2:
                    rows.append(f"free,{i - 1},{(1 + (i - 1) % 9) << 20},0")
            trace.write_text("\n".join(rows) + "\n")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                calls_by_reason.main(["--capacity", "160MiB", str(trace)])
            logged = int(re.search(r"^\| created \| all \| (\d+) \|", out.getvalue(), re.M)[1])
            report = pathlib.Path(work) / "replay.json"
            subprocess.run([os.environ["CUDACACHE_REPLAY"], "--allocators", "cudacache",
                            "--capacity", "160MiB", "--json", str(report), str(trace)],
                           stdout=subprocess.DEVNULL, check=True)
            result = json.loads(report.read_text())["traces"][0]["results"][0]
            self.assertFalse(result["oom"])
            self.assertGreater(logged, 0)
            self.assertEqual(logged, result["device_calls"]["create"])


if __name__ == "__main__":
    unittest.main()
