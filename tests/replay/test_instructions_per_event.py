"""bench/replay/instructions_per_event.py: instructions per event from callgrind_annotate.

Standard-library unittest, on annotate output and replay JSON written here (bench/instructions.sh
itself needs valgrind, which CI does not install)."""

import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "replay" / \
    "instructions_per_event.py"

ANNOTATE = """\
--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
12,000 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir              file:function
--------------------------------------------------------------------------------
12,000 (100.0%)  ???:cudacache::DeviceAllocator::allocate(unsigned long, CUstream_st*) [x]
 3,000 (25.00%)  ???:cudacache::vmm_api::map(unsigned long, unsigned long, unsigned long long) [x]
 1,000 ( 8.33%)  ???:cudacache::device_api::synchronize_stream(int, CUstream_st*) [x]
   500 ( 4.17%)  ???:cudacache::device_api::memory_info(int, unsigned long*, unsigned long*) [x]
"""


def replay_json(oom=False, events=4):
    return {"traces": [{"name": "tiny", "events": events,
                        "results": [{"allocator": "cudacache", "oom": oom}]}]}


def run(annotate, replay):
    with tempfile.TemporaryDirectory() as directory:
        path = pathlib.Path(directory) / "replay.json"
        path.write_text(json.dumps(replay), encoding="utf-8")
        return subprocess.run([sys.executable, str(SCRIPT), str(path)], input=annotate,
                              capture_output=True, text=True, check=False)


class InstructionsPerEvent(unittest.TestCase):
    def test_device_calls_timed_by_cudasim_are_left_out(self):
        # 12,000 collected, 4,000 under map and synchronize_stream; memory_info is the
        # allocator's own query (not timed by cudasim) and stays in.
        completed = run(ANNOTATE, replay_json(events=4))
        self.assertEqual(completed.returncode, 0, completed.stderr)
        self.assertEqual(completed.stdout.strip(), "2000.0")

    def test_a_replay_cut_short_is_refused(self):
        completed = run(ANNOTATE, replay_json(oom=True))
        self.assertNotEqual(completed.returncode, 0)
        self.assertIn("tiny / cudacache ran out of memory", completed.stderr)

    def test_input_that_is_not_annotate_output_is_refused(self):
        completed = run("valgrind: mmap failed\n", replay_json())
        self.assertNotEqual(completed.returncode, 0)
        self.assertIn("no PROGRAM TOTALS line", completed.stderr)

    def test_a_replay_of_several_allocators_is_refused(self):
        replay = replay_json()
        replay["traces"][0]["results"].append({"allocator": "pytorch", "oom": False})
        completed = run(ANNOTATE, replay)
        self.assertNotEqual(completed.returncode, 0)
        self.assertIn("one trace and one allocator", completed.stderr)


if __name__ == "__main__":
    unittest.main()
