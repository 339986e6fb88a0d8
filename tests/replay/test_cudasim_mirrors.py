"""Python code that reads cudasim's structs through ctypes names their fields itself: those
names must be the header's, in its order. A buffer sized from a stale list once let cudasim
write 24 bytes past it into the Python heap (tools/torch_replay/torch_replay.py)."""

import importlib.util
import pathlib
import re
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
HEADER = REPO / "tools" / "cudasim" / "include" / "cudasim.h"
TORCH_REPLAY = REPO / "tools" / "torch_replay" / "torch_replay.py"
TORCHSIM = REPO / "tests" / "torch" / "torchsim.py"


def struct_fields(name):
    """The field names of `typedef struct NAME { uint64_t a; ... } NAME;` in cudasim.h."""
    text = HEADER.read_text()
    body = re.search(r"typedef struct " + name + r" \{(.*?)\} " + name + ";", text, re.S)
    if body is None:
        raise AssertionError(f"struct {name} not found in {HEADER}")
    without_comments = re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S)
    return tuple(re.findall(r"uint64_t\s+(\w+)\s*;", without_comments))


def load_torch_replay():
    spec = importlib.util.spec_from_file_location("torch_replay", TORCH_REPLAY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports no torch: only the child process does
    return module


class TorchReplayMirrors(unittest.TestCase):
    def setUp(self):
        self.torch_replay = load_torch_replay()

    def test_call_count_fields_are_the_header_s_in_order(self):
        header = struct_fields("cudasim_call_counts")
        self.assertIn("mem_get_info", header)
        self.assertEqual(self.torch_replay.CUDASIM_CALL_COUNT_FIELDS, header)

    def test_counter_fields_are_the_header_s_in_order(self):
        self.assertEqual(self.torch_replay.CUDASIM_COUNTER_FIELDS,
                         struct_fields("cudasim_counters"))

    def test_buffers_hold_every_field_of_either_struct(self):
        for name in ("cudasim_call_counts", "cudasim_counters"):
            self.assertGreaterEqual(self.torch_replay.CUDASIM_BUFFER_FIELDS,
                                    len(struct_fields(name)), name)

    def test_device_call_kinds_are_the_call_fields_but_the_event_calls(self):
        memory_calls = tuple(field for field in struct_fields("cudasim_call_counts")
                             if not field.startswith("event_"))
        self.assertEqual(self.torch_replay.CALL_KINDS, memory_calls)


class TorchTestMirrors(unittest.TestCase):
    def test_torchsim_counters_are_the_header_s_in_order(self):
        # torchsim's _Counters is the struct exactly, so it must list every field.
        text = TORCHSIM.read_text()
        listed = re.search(r"class _Counters\(ctypes\.Structure\):\s*_fields_ = \[\(n, "
                           r"ctypes\.c_uint64\) for n in\s*\((.*?)\)\]", text, re.S)
        self.assertIsNotNone(listed, "torchsim.py's _Counters not found")
        names = tuple(re.findall(r'"(\w+)"', listed.group(1)))
        self.assertEqual(names, struct_fields("cudasim_counters"))


if __name__ == "__main__":
    unittest.main()
