"""cudacache.render_html(): the memory-over-time page from a snapshot (dict or pickle) or from
this process. The figures are checked here; tests/html opens the pages in a browser."""

import datetime
import json
import os
import pickle
import re
import tempfile
import unittest

import support
from support import MiB
import cudacache
from cudacache import _memory_page


def page_data(html):
    """The JSON document a page carries."""
    match = re.search(r'<script type="application/json" id="memory-data">(.*?)</script>', html,
                      re.S)
    return json.loads(match.group(1))


def entry(action, addr, size):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": 0,
            "frames": []}


# A trace that starts after the program did: 4 MiB was allocated and 20 MiB reserved before
# its first entry, and the segments give the state at the end.
SNAPSHOT = {
    "segments": [
        {"device": 0, "address": 0x1000000, "total_size": 20 * MiB, "stream": 0,
         "blocks": [{"address": 0x1000000, "size": 4 * MiB, "requested_size": 4 * MiB,
                     "state": "active_allocated"},
                    {"address": 0x1400000, "size": 16 * MiB, "requested_size": 0,
                     "state": "inactive"}]},
    ],
    "device_traces": [[
        entry("segment_alloc", 0x4000000, 40 * MiB),
        entry("alloc", 0x4000000, 30 * MiB),
        entry("free_requested", 0x4000000, 30 * MiB),
        entry("free_completed", 0x4000000, 30 * MiB),
        entry("segment_free", 0x4000000, 40 * MiB),
    ]],
}


class FromASnapshot(unittest.TestCase):
    def test_figures_over_time_start_from_the_state_before_the_trace(self):
        data = page_data(cudacache.render_html(None, SNAPSHOT, name="torch"))
        self.assertEqual(data["format"], "cudacache-memory-page/1")
        (trace,) = data["traces"]
        (series,) = trace["series"]
        self.assertEqual(series["name"], "torch")
        self.assertEqual(trace["events"], 5)
        self.assertEqual(series["reserved_max"], [60 * MiB, 60 * MiB, 60 * MiB, 60 * MiB, 20 * MiB])
        self.assertEqual(series["requested_max"], [4 * MiB, 34 * MiB, 4 * MiB, 4 * MiB, 4 * MiB])
        self.assertEqual(series["allocated_max"], [4 * MiB, 34 * MiB, 34 * MiB, 4 * MiB, 4 * MiB])
        self.assertEqual(trace["peak_requested"], 34 * MiB)
        self.assertEqual(series["peak_reserved"], 60 * MiB)
        self.assertEqual(series["calls"], {"segment_alloc": [[0, 1]], "segment_free": [[4, 1]]})

    def test_long_traces_are_downsampled_keeping_the_peaks(self):
        entries = []
        for i in range(50_000):
            entries.append(entry("alloc", 0x1000, 1000 + i))
            entries.append(entry("free_completed", 0x1000, 1000 + i))
        data = _memory_page.memory_page_data({"segments": [], "device_traces": [entries]})
        series = data["traces"][0]["series"][0]
        self.assertEqual(len(series["first_event"]), _memory_page.TIMELINE_POINTS)
        self.assertEqual(max(series["allocated_max"]), 1000 + 49_999)
        self.assertEqual(min(series["allocated_min"]), 0)

    def test_from_a_pickle_without_running_its_code(self):
        with tempfile.TemporaryDirectory() as temp:
            path = os.path.join(temp, "snap.pickle")
            with open(path, "wb") as file:
                pickle.dump(SNAPSHOT, file, protocol=4)
            html = cudacache.render_html(os.path.join(temp, "page.html"), path)
            with open(os.path.join(temp, "page.html"), encoding="utf-8") as file:
                self.assertEqual(file.read(), html)
            self.assertEqual(page_data(html)["traces"][0]["series"][0]["name"], "snap")
            hostile = os.path.join(temp, "hostile.pickle")
            with open(hostile, "wb") as file:
                pickle.dump({"segments": [datetime.date(2020, 1, 1)]}, file)
            with self.assertRaisesRegex(pickle.UnpicklingError, "plain data only"):
                cudacache.render_html(None, hostile)
        with self.assertRaises(TypeError):
            cudacache.render_html(None, 42)

    def test_names_cannot_close_the_script_element(self):
        html = cudacache.render_html(None, SNAPSHOT, name="</script><script>alert(1)//")
        self.assertNotIn("<script>alert", html)
        self.assertEqual(page_data(html)["traces"][0]["series"][0]["name"],
                         "</script><script>alert(1)//")
        self.assertNotIn("https://", html)  # self-contained


TRACES = os.environ.get("CUDACACHE_TRACES_DIR", str(support.REPO.parent / "shared" / "traces"))


class FromPyTorchsOwnSnapshots(unittest.TestCase):
    def test_peaks_equal_what_pytorch_recorded(self):
        # The two traces recorded from program start: their peaks are in meta.json.
        names = ("decomfl_zo_federated_opt_finetune", "dit_text_diffusion_train_oom")
        if not all(os.path.exists(os.path.join(TRACES, "raw", n + ".pickle")) for n in names):
            self.skipTest(f"the real traces are not in {TRACES}")
        for name in names:
            with open(os.path.join(TRACES, name + ".meta.json")) as file:
                meta = json.load(file)
            data = _memory_page.memory_page_data(
                cudacache.load_snapshot(os.path.join(TRACES, "raw", name + ".pickle")))
            (trace,) = data["traces"]
            series = trace["series"][0]
            self.assertEqual(series["peak_reserved"], meta["pytorch_peak_reserved_bytes"], name)
            self.assertEqual(trace["peak_requested"], meta["peak_allocated_requested_bytes"], name)
            self.assertEqual(series["reserved_max"][-1], meta["pytorch_reserved_at_dump_bytes"],
                             name)
        self.assertIn("oom_event", series)  # dit_text_diffusion_train_oom ends in an OOM


class FromThisProcess(support.AllocatorTestCase):
    def test_the_recorded_history_of_this_process(self):
        cudacache.record_history(1000)
        self.addCleanup(cudacache.record_history, 0)
        self.addCleanup(cudacache.record_history, 1)
        kept = self.alloc(3 * MiB)
        freed = self.alloc(30 * MiB)
        self.free(freed)
        cudacache.empty_cache()
        with tempfile.TemporaryDirectory() as temp:
            path = os.path.join(temp, "live.html")
            html = cudacache.render_html(path)
            self.assertTrue(os.path.getsize(path) > 0)
        data = page_data(html)
        self.assertIn(f"process {os.getpid()}", data["title"])
        series = data["traces"][0]["series"][0]
        self.assertEqual(series["name"], "cudacache")
        self.assertEqual(data["traces"][0]["peak_requested"], 33 * MiB)
        self.assertGreaterEqual(series["peak_reserved"], 33 * MiB)
        self.assertEqual(series["reserved_max"][-1], cudacache.memory_reserved(0))
        self.assertTrue({"segment_alloc", "segment_map"} & set(series["calls"]), series["calls"])
        del kept


if __name__ == "__main__":
    unittest.main()
