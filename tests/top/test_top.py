"""cudacache-top with real processes on cudasim (CTest cudacache_top.processes).

Every test has its own stats directory (CUDACACHE_STATS_DIR), so that the pages of other
tests running at the same time are not seen. The processes:
  top_holder_api      threads allocating through cudacache's C++ API
  top_holder_runtime  plain cudaMalloc, cached by libcudacache_preload.so (LD_PRELOAD)
  python              the cudacache package (raw_alloc)
each allocate, print "ready" and hold their memory until their stdin closes.
"""

import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

TOP = os.environ["CUDACACHE_TOP"]
HOLDER_API = os.environ["TOP_HOLDER_API"]
HOLDER_RUNTIME = os.environ["TOP_HOLDER_RUNTIME"]
PRELOAD = os.environ["CUDACACHE_PRELOAD"]
MiB = 1 << 20

PYTHON_HOLDER = """
import sys
import cudacache
blocks = [cudacache.raw_alloc(3 << 20, device=1) for _ in range(4)]
print("ready", flush=True)
sys.stdin.readline()
for block in blocks:
    cudacache.raw_free(block)
"""

METRICS = {
    "cudacache_allocated_bytes": "gauge",
    "cudacache_reserved_bytes": "gauge",
    "cudacache_requested_bytes": "gauge",
    "cudacache_peak_allocated_bytes": "gauge",
    "cudacache_peak_reserved_bytes": "gauge",
    "cudacache_cached_bytes": "gauge",
    "cudacache_largest_free_block_bytes": "gauge",
    "cudacache_fragmentation_ratio": "gauge",
    "cudacache_allocations": "gauge",
    "cudacache_segments": "gauge",
    "cudacache_ooms_total": "counter",
    "cudacache_alloc_retries_total": "counter",
    "cudacache_device_allocs_total": "counter",
    "cudacache_device_frees_total": "counter",
}


class TopTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cudacache-top-test-")
        self.env = dict(os.environ, CUDACACHE_STATS_DIR=self.dir)
        self.processes = []

    def tearDown(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.communicate()  # waits and closes the pipes
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers ---------------------------------------------------------------------------

    def start(self, command, extra_env=None):
        """Starts a holder and waits for its "ready"; returns the Popen."""
        env = dict(self.env, **(extra_env or {}))
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=env, text=True)
        self.processes.append(process)
        ready, _, _ = select.select([process.stdout], [], [], 60)
        self.assertTrue(ready, f"{command[0]} did not get ready in 60 s")
        line = process.stdout.readline().strip()
        if line != "ready":
            process.kill()
            self.fail(f"{command}: {line!r} / {process.communicate()[1]}")
        return process

    def start_api(self, threads, mib, devices, extra_env=None):
        return self.start([HOLDER_API, str(threads), str(mib), devices], extra_env)

    def start_preloaded(self, threads, mib, devices):
        return self.start([HOLDER_RUNTIME, str(threads), str(mib), devices],
                          {"LD_PRELOAD": PRELOAD})

    def start_python(self):
        return self.start([sys.executable, "-c", PYTHON_HOLDER])

    def finish(self, process):
        _, errors = process.communicate(timeout=60)  # closes stdin: the holder frees and exits
        self.assertEqual(process.returncode, 0, errors)

    def top(self, *arguments, check=True):
        result = subprocess.run([TOP, "--dir", self.dir, *arguments], capture_output=True,
                                text=True, env=self.env, timeout=60)
        if check:
            self.assertEqual(result.returncode, 0, result.stderr)
        return result

    def top_json(self, *arguments):
        return json.loads(self.top("--json", *arguments).stdout)

    def wait_for(self, predicate, *arguments):
        """top --json until predicate(data) holds: processes publish every 100 ms."""
        deadline = time.monotonic() + 20
        while True:
            data = self.top_json(*arguments)
            if predicate(data) or time.monotonic() > deadline:
                return data
            time.sleep(0.05)

    def wait_for_allocated(self, expected):
        """Waits until every (pid, device) of `expected` shows those allocated bytes."""
        def settled(data):
            shown = {(row["pid"], row["device"]): row["allocated_bytes"] for row in data["rows"]}
            return all(shown.get(key) == value for key, value in expected.items())
        return self.wait_for(settled)

    def rows_of(self, data, pid):
        return {row["device"]: row for row in data["rows"] if row["pid"] == pid}

    def page_files(self):
        return sorted(name for name in os.listdir(self.dir) if name.startswith("cudacache-"))

    def check_row(self, row, allocated):
        self.assertEqual(row["allocated_bytes"], allocated)
        self.assertEqual(row["requested_bytes"], allocated)
        self.assertGreaterEqual(row["reserved_bytes"], allocated)
        self.assertEqual(row["cached_bytes"], row["reserved_bytes"] - row["allocated_bytes"])
        self.assertGreater(row["cached_bytes"], 0, "every holder gave blocks back to the cache")
        self.assertLessEqual(row["largest_free_block_bytes"], row["cached_bytes"])
        self.assertGreaterEqual(row["largest_free_block_bytes"], MiB)
        self.assertGreaterEqual(row["peak_allocated_bytes"], allocated + MiB)
        self.assertGreaterEqual(row["peak_reserved_bytes"], row["reserved_bytes"])
        self.assertGreaterEqual(row["device_allocs"], 1)
        self.assertEqual(row["ooms"], 0)
        self.assertGreaterEqual(row["fragmentation"], 0.0)
        self.assertLessEqual(row["fragmentation"], 1.0)

    # --- tests -----------------------------------------------------------------------------

    def test_every_kind_of_process_at_once(self):
        api = self.start_api(threads=3, mib=5, devices="0,1")
        preloaded = self.start_preloaded(threads=2, mib=4, devices="0")
        python = self.start_python()
        data = self.wait_for_allocated({(api.pid, 0): 12 * MiB, (api.pid, 1): 12 * MiB,
                                        (preloaded.pid, 0): 6 * MiB, (python.pid, 1): 12 * MiB})
        self.assertEqual(data["processes"], 3, data)
        self.assertEqual(data["skipped"], 0, data["notes"])

        api_rows = self.rows_of(data, api.pid)
        self.assertEqual(sorted(api_rows), [0, 1])
        for row in api_rows.values():
            self.check_row(row, 3 * 4 * MiB)  # 3 threads kept 4 of their 5 MiB
            self.assertIn("top_holder_api 3 5 0,1", row["command"])
        preload_rows = self.rows_of(data, preloaded.pid)
        self.assertEqual(sorted(preload_rows), [0])
        self.check_row(preload_rows[0], 2 * 3 * MiB)
        self.assertIn("top_holder_runtime", preload_rows[0]["command"])
        python_rows = self.rows_of(data, python.pid)
        self.assertEqual(sorted(python_rows), [1])
        self.assertEqual(python_rows[1]["allocated_bytes"], 12 * MiB)
        self.assertIn("python", python_rows[1]["command"])

        # The table has the same processes, one line per process and device.
        table = self.top("--once").stdout.splitlines()
        self.assertRegex(table[0], r"PID\s+COMMAND\s+DEV\s+ALLOCATED\s+RESERVED\*")
        self.assertEqual(len(table), 1 + 4, table)
        for pid in (api.pid, preloaded.pid, python.pid):
            self.assertTrue(any(line.split()[0] == str(pid) for line in table[1:]), table)
        line = next(l for l in table[1:] if l.split()[0] == str(preloaded.pid))
        self.assertIn("6.00 MiB", line)

        # Processes that exit remove their pages.
        for process in (api, preloaded, python):
            self.finish(process)
        self.assertEqual(self.page_files(), [])
        self.assertEqual(self.top_json()["rows"], [])

    def test_killed_processes_are_recognised_and_their_pages_removed(self):
        first = self.start_api(threads=1, mib=3, devices="0")
        second = self.start_api(threads=2, mib=2, devices="1")
        self.assertEqual(len(self.page_files()), 2)
        for process in (first, second):
            process.kill()
            process.wait()
        # Reported, not removed, with --keep-abandoned; never shown as running.
        data = self.top_json("--keep-abandoned")
        self.assertEqual(data["rows"], [])
        self.assertEqual(len(self.page_files()), 2)
        for process in (first, second):
            self.assertTrue(any(f"abandoned cudacache-{process.pid}-0" in note
                                for note in data["notes"]), data["notes"])
        # A new process removes this user's abandoned pages when it creates its own.
        third = self.start_api(threads=1, mib=2, devices="0")
        self.assertEqual(self.page_files(), [f"cudacache-{third.pid}-0"])
        # cudacache-top removes them too, and says so.
        third.send_signal(signal.SIGKILL)
        third.wait()
        data = self.top_json()
        self.assertEqual(data["removed"], 1)
        self.assertTrue(any(f"removed cudacache-{third.pid}-0" in note and "has exited" in note
                            for note in data["notes"]), data["notes"])
        self.assertEqual(self.page_files(), [])

    def test_bad_and_foreign_files_are_skipped_with_a_note(self):
        live = self.start_api(threads=1, mib=3, devices="0")
        self.wait_for_allocated({(live.pid, 0): 2 * MiB})
        live_page = os.path.join(self.dir, f"cudacache-{live.pid}-0")
        with open(os.path.join(self.dir, "cudacache-1-0"), "wb") as f:
            f.write(b"\x07" * 1000)
        with open(os.path.join(self.dir, "cudacache-2-0"), "wb") as f:
            f.write(b"short")
        os.symlink(live_page, os.path.join(self.dir, "cudacache-3-0"))
        os.mkdir(os.path.join(self.dir, "cudacache-4-0"))
        shutil.copyfile(live_page, os.path.join(self.dir, "cudacache-5-0"))
        expected = {
            "cudacache-1-0": "not a cudacache stats page",
            "cudacache-2-0": "too short",
            "cudacache-3-0": "symbolic link",
            "cudacache-4-0": "not a regular file",
            "cudacache-5-0": f"names pid {live.pid}",
        }
        if os.geteuid() == 0:  # only root can give a file to another user
            foreign = os.path.join(self.dir, "cudacache-6-0")
            shutil.copyfile(live_page, foreign)
            os.chown(foreign, 65534, 65534)
            expected["cudacache-6-0"] = "another user"
        data = self.top_json()
        self.assertEqual(list(self.rows_of(data, live.pid)), [0])
        self.assertEqual(len(data["rows"]), 1)
        self.assertEqual(data["skipped"], len(expected))
        for name, reason in expected.items():
            self.assertTrue(any(note.startswith(f"skipped {name}: ") and reason in note
                                for note in data["notes"]), (name, data["notes"]))
            self.assertTrue(os.path.lexists(os.path.join(self.dir, name)), "bad files stay")
        # The table and the exporters carry on as well.
        self.assertIn("note: skipped cudacache-1-0", self.top("--once").stdout)
        self.assertIn(f'pid="{live.pid}"', self.top("--prometheus").stdout)
        self.finish(live)

    def test_prometheus_text_matches_the_json(self):
        holder = self.start_api(threads=2, mib=3, devices="0,1")
        data = self.wait_for_allocated({(holder.pid, 0): 4 * MiB, (holder.pid, 1): 4 * MiB})
        text = self.top("--prometheus").stdout
        samples = {}
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            match = re.fullmatch(r'(\w+)\{pid="(\d+)",device="(\d+)",command="([^"]*)"\} (\S+)',
                                 line)
            if match:
                samples[(match[1], int(match[2]), int(match[3]))] = float(match[5])
        for name, kind in METRICS.items():
            self.assertIn(f"# TYPE {name} {kind}\n", text)
            self.assertIn(f"# HELP {name} ", text)
            for device in (0, 1):
                self.assertIn((name, holder.pid, device), samples, name)
        self.assertIn("cudacache_top_pages_skipped 0\n", text)
        for row in data["rows"]:
            key = (holder.pid, row["device"])
            self.assertEqual(samples[("cudacache_allocated_bytes", *key)], row["allocated_bytes"])
            self.assertEqual(samples[("cudacache_reserved_bytes", *key)], row["reserved_bytes"])
            self.assertEqual(samples[("cudacache_cached_bytes", *key)], row["cached_bytes"])
            self.assertEqual(samples[("cudacache_device_allocs_total", *key)],
                             row["device_allocs"])
        # --output: the same text, written whole (for node_exporter's textfile collector).
        output = os.path.join(self.dir, "textfile", "cudacache.prom")
        os.mkdir(os.path.dirname(output))
        self.top("--prometheus", "--output", output)
        with open(output) as f:
            self.assertIn(f'cudacache_allocated_bytes{{pid="{holder.pid}",device="0"', f.read())
        self.assertEqual(os.listdir(os.path.dirname(output)), ["cudacache.prom"])
        self.finish(holder)

    def test_http_endpoint_on_the_loopback_address(self):
        holder = self.start_api(threads=1, mib=4, devices="0")
        self.wait_for_allocated({(holder.pid, 0): 3 * MiB})
        server = subprocess.Popen([TOP, "--dir", self.dir, "--listen", "127.0.0.1:0"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=self.env)
        self.processes.append(server)
        ready, _, _ = select.select([server.stdout], [], [], 30)
        self.assertTrue(ready)
        match = re.fullmatch(r"serving http://127\.0\.0\.1:(\d+)/metrics",
                             server.stdout.readline().strip())
        self.assertIsNotNone(match)
        base = f"http://127.0.0.1:{match[1]}"
        with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
            self.assertEqual(response.status, 200)
            self.assertTrue(response.headers["Content-Type"].startswith(
                "text/plain; version=0.0.4"))
            body = response.read().decode()
        self.assertIn(f'cudacache_allocated_bytes{{pid="{holder.pid}",device="0"', body)
        self.assertIn(f"}} {3 * MiB}\n", body)
        # Each scrape reads the pages again: the holder's exit shows at the next one.
        self.finish(holder)
        with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
            body = response.read().decode()
            self.assertNotIn(f'pid="{holder.pid}"', body)
            self.assertIn("\ncudacache_top_directory_readable 1\n", body)
        # The directory gone while serving: still an answer, which says so.
        os.rename(self.dir, self.dir + "-away")
        try:
            with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
                self.assertIn("\ncudacache_top_directory_readable 0\n", response.read().decode())
        finally:
            os.rename(self.dir + "-away", self.dir)
        with self.assertRaises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(base + "/nothing-here", timeout=10)
        self.assertEqual(missing.exception.code, 404)
        with self.assertRaises(urllib.error.HTTPError) as posted:
            urllib.request.urlopen(urllib.request.Request(base + "/metrics", data=b"x"),
                                   timeout=10)
        self.assertEqual(posted.exception.code, 405)
        with socket.create_connection(("127.0.0.1", int(match[1])), timeout=10) as raw:
            raw.sendall(b"hello there\r\n\r\n")
            self.assertTrue(raw.recv(100).startswith(b"HTTP/1.1 400"))
        # A client that never finishes its request gets a 408 after 3 s, and a scraper behind it
        # is answered then, not after the slow client gives up.
        with socket.create_connection(("127.0.0.1", int(match[1])), timeout=20) as slow:
            slow.sendall(b"GET /metr")
            started = time.monotonic()
            with urllib.request.urlopen(base + "/metrics", timeout=20) as response:
                self.assertEqual(response.status, 200)
            self.assertLess(time.monotonic() - started, 10)
            self.assertTrue(slow.recv(100).startswith(b"HTTP/1.1 408"))
        server.send_signal(signal.SIGTERM)
        self.assertEqual(server.wait(timeout=10), 0)

    def test_two_pages_of_one_process_are_told_apart(self):
        """The preload beside libcudacache.so makes a second page, cudacache-<pid>-1: its rows
        and series carry the page number. Stood in for by copies of a live page that this test
        holds, as a process holds its own: -1, -4294967296 (2^32, which a 32-bit page number
        would have read as 0, page 0's series again) and -2, whose slot is corrupt."""
        import contextlib
        import fcntl
        holder = self.start_api(threads=1, mib=3, devices="0")
        self.wait_for_allocated({(holder.pid, 0): 2 * MiB})
        own = os.path.join(self.dir, f"cudacache-{holder.pid}-0")
        copies = [os.path.join(self.dir, f"cudacache-{holder.pid}-{n}")
                  for n in (1, 1 << 32, 2)]
        for copy in copies:
            shutil.copyfile(own, copy)
        header_bytes = 296  # stats_page::Header: 8 + 4 * 4 + 8 + 8 + 256
        with open(copies[2], "r+b") as f:  # device 0's check word: claimed, sequence, check
            f.seek(header_bytes + 2 * 8)
            check = bytearray(f.read(8))
            check[3] ^= 0x40
            f.seek(header_bytes + 2 * 8)
            f.write(check)
        with contextlib.ExitStack() as stack:
            for copy in copies:
                fcntl.flock(stack.enter_context(open(copy, "rb")), fcntl.LOCK_SH)
            data = self.top_json()
            pages = sorted(row["page"] for row in data["rows"] if row["pid"] == holder.pid)
            self.assertEqual(pages, [0, 1, 1 << 32], data)
            self.assertIn(f"cudacache-{holder.pid}-2: 1 device(s) corrupt (values that do not "
                          "match their check word), left out", data["notes"])
            self.assertFalse(any("too fast" in note for note in data["notes"]), data["notes"])
            text = self.top("--prometheus").stdout
            series = [line.rsplit(" ", 1)[0] for line in text.splitlines()
                      if line.startswith("cudacache_allocated_bytes{")]
            self.assertEqual(len(series), 3)
            self.assertEqual(len(set(series)), 3, series)
            self.assertIn(f'pid="{holder.pid}",device="0",page="1",', text)
            self.assertIn(f'pid="{holder.pid}",device="0",page="4294967296",', text)
            self.assertIn("\ncudacache_top_directory_readable 1\n", text)
        # Let go: the copies are abandoned now, and removed.
        notes = " ".join(self.top_json()["notes"])
        for copy in copies:
            self.assertIn(f"removed {os.path.basename(copy)}", notes)
        self.finish(holder)

    def test_live_view_sorts_by_the_key_pressed_and_quits_on_q(self):
        small = self.start_api(threads=1, mib=3, devices="0")
        large = self.start_api(threads=1, mib=9, devices="0")
        self.wait_for_allocated({(small.pid, 0): 2 * MiB, (large.pid, 0): 8 * MiB})
        child, terminal = pty.fork()
        if child == 0:
            os.execve(TOP, [TOP, "--dir", self.dir, "--interval", "0.2"], self.env)
        screen = ""

        def read_until(pattern):
            nonlocal screen
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                # The last full screen: everything after the last clear.
                if re.search(pattern, screen.split("\x1b[2J")[-1], re.S):
                    return screen.split("\x1b[2J")[-1]
                ready, _, _ = select.select([terminal], [], [], 1)
                if ready:
                    try:
                        screen += os.read(terminal, 65536).decode(errors="replace")
                    except OSError:
                        break
            self.fail(f"no {pattern!r} on the screen:\n{screen[-3000:]}")

        def pids_in_order(text):
            return [int(line.split()[0]) for line in text.splitlines()
                    if line.split() and line.split()[0].isdigit()]

        shown = read_until(rf"sorted by reserved.*RESERVED\*.*\n\s*{small.pid}\s.*\n")
        self.assertEqual(pids_in_order(shown), [large.pid, small.pid])  # largest first
        os.write(terminal, b"p")
        shown = read_until(r"sorted by pid.*PID\*.*\n\s*\d+\s.*\n\s*\d+\s")
        self.assertEqual(pids_in_order(shown), sorted([small.pid, large.pid]))
        os.write(terminal, b"q")
        _, status = os.waitpid(child, 0)
        os.close(terminal)
        self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status)
        self.finish(small)
        self.finish(large)

    def test_batch_mode_without_a_terminal(self):
        holder = self.start_api(threads=1, mib=2, devices="1")
        self.wait_for_allocated({(holder.pid, 1): MiB})
        output = self.top("--iterations", "2", "--interval", "0.1").stdout
        self.assertEqual(output.count("cudacache-top "), 2, output)
        self.assertEqual(len(re.findall(rf"^\s*{holder.pid}\s", output, re.M)), 2, output)
        self.finish(holder)

    def test_publishing_is_off_with_the_option(self):
        holder = self.start_api(threads=1, mib=2, devices="0",
                                extra_env={"CUDACACHE_CONF": "publish_stats:False"})
        self.assertEqual(self.page_files(), [])
        self.assertEqual(self.top_json()["rows"], [])
        self.finish(holder)

    def test_bad_command_lines_are_refused_by_name(self):
        cases = [
            (["--sort", "bogus"], "--sort takes one of pid, command"),
            (["--once", "--json"], "alternatives"),
            (["--output", "x.prom"], "--output goes with"),
            (["--listen", "nowhere:80"], "--listen takes ADDRESS:PORT"),
            (["--listen", "127.0.0.1:99999"], "--listen takes ADDRESS:PORT"),
            (["--interval", "0"], "--interval"),
        ]
        for arguments, message in cases:
            result = self.top(*arguments, check=False)
            self.assertNotEqual(result.returncode, 0, arguments)
            self.assertIn(message, result.stderr, arguments)
        # A --dir that cannot be read is an error in every mode, the live view and the
        # server included, not an empty machine.
        missing = os.path.join(self.dir, "none")
        for mode in (["--json"], ["--once"], ["--prometheus"], ["--listen", "127.0.0.1:0"],
                     ["--iterations", "1"]):
            result = subprocess.run([TOP, "--dir", missing, *mode], capture_output=True,
                                    text=True, env=self.env, timeout=60)
            self.assertEqual(result.returncode, 1, (mode, result.stderr))
            self.assertIn(f"cannot open the stats page directory {missing}: No such file",
                          result.stderr, mode)
            self.assertEqual(result.stdout, "", mode)


if __name__ == "__main__":
    unittest.main()
