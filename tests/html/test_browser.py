"""The memory page in a real headless browser (Debian's chromium): from cudacache-replay --html
on the synthetic workload and on a 100,000-event trace, and from cudacache.render_html() on a
--memory-viz pickle and on a live process. Exits 77 (CTest: skipped) without a browser."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import browser_check
from support import REPLAY, SMALL_TRACE, exit_skipped, replay, write_random_trace

CHROMIUM = browser_check.find_chromium()
# Where to keep the screenshots (CTest sets it to the build tree, to look at them).
SCREENSHOTS = os.environ.get("CUDACACHE_HTML_SCREENSHOTS")


class Pages(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="cudacache-html-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def small_trace(self, name):
        """SMALL_TRACE written to `name` in the test's folder; returns its path."""
        trace = self.path(name)
        with open(trace, "w") as file:
            file.write(SMALL_TRACE)
        return trace

    def check(self, page, min_paths):
        shot = os.path.join(SCREENSHOTS, os.path.basename(page) + ".png") if SCREENSHOTS else None
        dom, fraction = browser_check.check_page(CHROMIUM, page, min_paths=min_paths,
                                                 screenshot=shot)
        print(f"{os.path.basename(page)}: {len(re.findall('<path ', dom))} paths, "
              f"{fraction:.1%} coloured pixels", file=sys.stderr)
        return dom


class ReplayPages(Pages):
    def test_synthetic_workload_with_min_capacity(self):
        page = self.path("synthetic.html")
        replay("--min-capacity", "--html", page, "--synthetic",
               "layers:2,hidden:256,heads:4,seq:128,batch:2,vocab:1000,steps:2")
        dom = self.check(page, min_paths=4 * 3)
        for allocator in ("cudacache", "pytorch", "cub", "nocache"):
            self.assertIn(f"{allocator} <span", dom)
        self.assertIn("min capacity", dom)
        self.assertIn('stroke-dasharray="6 4"', dom)  # the min-capacity lines

    def test_without_min_capacity_the_page_says_how_to_get_it(self):
        trace = self.small_trace("small.csv")
        page = self.path("small.html")
        replay("--allocators", "cudacache,nocache", "--html", page, trace)
        dom = self.check(page, min_paths=2 * 3)
        self.assertIn("run cudacache-replay with --min-capacity", dom)

    def test_a_100000_event_trace_gives_a_small_page(self):
        trace = self.path("big.csv")
        write_random_trace(trace, 100_000)
        page = self.path("big.html")
        replay("--allocators", "cudacache,pytorch,cub,nocache", "--html", page, trace)
        size = os.path.getsize(page)
        self.assertLess(size, 1_500_000, "the page should not grow with the trace")
        dom = self.check(page, min_paths=4 * 3)
        self.assertIn("100,000 events", dom)

    @unittest.skipUnless(subprocess.run([sys.executable, "-c", "import torch"],
                                        capture_output=True).returncode == 0,
                         "PyTorch is not installed")
    def test_torch_allocators_are_listed_with_a_note(self):
        trace = self.small_trace("torch.csv")
        page = self.path("torch.html")
        replay("--allocators", "pytorch,torch-native", "--html", page, trace)
        dom = self.check(page, min_paths=3)
        self.assertIn("not drawn: torch-native replays in a PyTorch process", dom)

    def test_trace_names_are_text_not_markup(self):
        trace = self.small_trace("x<img src=y onerror=alert(1)>&.csv")
        page = self.path("names.html")
        replay("--allocators", "nocache", "--html", page, trace)
        dom = self.check(page, min_paths=3)
        self.assertNotIn("<img", dom)
        self.assertIn("x&lt;img src=y onerror=alert(1)&gt;&amp;", dom)

    def test_a_broken_page_fails_the_check(self):
        trace = self.small_trace("broken.csv")
        page = self.path("good.html")
        replay("--allocators", "nocache", "--html", page, trace)
        with open(page) as file:
            html = file.read()
        broken = self.path("broken.html")
        with open(broken, "w") as file:
            file.write(html.replace("function drawTrace(trace) {",
                                    "function drawTrace(trace) { trace.no.such.field;", 1))
        with self.assertRaisesRegex(browser_check.PageError, "TypeError"):
            browser_check.check_page(CHROMIUM, broken)
        empty = self.path("empty.html")
        with open(empty, "w") as file:
            file.write(re.sub(r'"traces":\[.*\]\}</script>', '"traces":[]}</script>', html,
                              flags=re.S))
        with self.assertRaisesRegex(browser_check.PageError, "SVG paths"):
            browser_check.check_page(CHROMIUM, empty)


class PythonPages(Pages):
    def test_page_from_a_memory_viz_pickle(self):
        trace = self.small_trace("viz.csv")
        out = self.path("viz")
        replay("--allocators", "pytorch", "--memory-viz", out, trace)
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "python"))
        import cudacache
        page = self.path("python-pickle.html")
        cudacache.render_html(page, os.path.join(out, "viz.pytorch.pickle"))
        dom = self.check(page, min_paths=3)
        self.assertIn("segment_alloc", dom)

    @unittest.skipIf(os.environ.get("CUDACACHE_HTML_NO_LIVE_PROCESS"),
                     "sanitizer build: Python cannot load the instrumented library here")
    def test_page_from_a_live_process(self):
        page = self.path("python-live.html")
        program = (
            "import cudacache\n"
            "cudacache.record_history(10000)\n"
            "ptrs = [cudacache.raw_alloc(n << 20) for n in (1, 3, 30, 2, 7)]\n"
            "for p in ptrs[:3]: cudacache.raw_free(p)\n"
            "ptrs = [cudacache.raw_alloc(n << 20) for n in (5, 50)]\n"
            "cudacache.empty_cache()\n"
            f"cudacache.render_html({page!r})\n")
        result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                                timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        dom = self.check(page, min_paths=3)
        self.assertIn("cudacache", dom)
        self.assertIn("process", dom)


if __name__ == "__main__":
    if CHROMIUM is None:
        exit_skipped("no chromium found (apt-get install chromium, or set CHROMIUM=PATH); "
                     "tools/install-deps.sh installs it")
    if shutil.which(REPLAY) is None and not os.path.exists(REPLAY):
        exit_skipped(f"{REPLAY} not found (set CUDACACHE_REPLAY)")
    unittest.main(verbosity=2)
