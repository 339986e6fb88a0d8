"""Snapshots: the schema of torch.cuda.memory._snapshot() and the pickle dump_snapshot writes."""

import ctypes
import io
import os
import pickle
import pickletools
import tempfile
import unittest

import support
from support import MiB, round512
import cudacache

SEGMENT_KEYS = {"device": int, "address": int, "total_size": int, "allocated_size": int,
                "active_size": int, "requested_size": int, "stream": int, "segment_type": str,
                "is_expandable": bool, "frames": list, "blocks": list}
BLOCK_KEYS = {"address": int, "size": int, "requested_size": int, "state": str, "frames": list}
BLOCK_STATES = {"active_allocated", "active_pending_free", "inactive"}
TRACE_ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                 "segment_map", "segment_unmap", "snapshot", "oom",
                 "empty_cache"}  # empty_cache: cudacache's extension
TRACE_KEYS = {"action": str, "size": int, "stream": int, "time_us": int, "frames": list}

# The opcodes the JavaScript unpickler of pytorch.org/memory_viz (torch/utils/viz/MemoryViz.js)
# implements; any other opcode makes the page fail to open the file.
MEMORY_VIZ_OPCODES = {
    "APPENDS", "BINGET", "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME",
    "LONG1", "LONG_BINGET", "MARK", "MEMOIZE", "PROTO", "SETITEMS", "SHORT_BINUNICODE", "STOP",
    "TUPLE2", "APPEND", "NEWFALSE", "BINPUT", "BINUNICODE", "EMPTY_TUPLE", "NEWTRUE", "NONE",
    "BINFLOAT", "TUPLE", "TUPLE1", "TUPLE3", "LONG_BINPUT", "LIST", "DICT", "SETITEM"}


class PlainDataUnpickler(pickle.Unpickler):
    """Loads only plain data: any class or function reference in the stream is an error."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"snapshot pickle refers to {module}.{name}")


class SnapshotTest(support.AllocatorTestCase):
    def check_schema(self, data):
        self.assertEqual(set(data), {"segments", "device_traces"})
        self.assertIsInstance(data["device_traces"], list)
        self.assertEqual(len(data["device_traces"]), self.runtime.device_count())
        for trace in data["device_traces"]:
            self.assertIsInstance(trace, list)
            for entry in trace:
                self.assertIn(entry["action"], TRACE_ACTIONS)
                for key, type_ in TRACE_KEYS.items():
                    self.assertIsInstance(entry[key], type_, key)
                address_key = "device_free" if entry["action"] == "oom" else "addr"
                self.assertIsInstance(entry[address_key], int, address_key)
        for segment in data["segments"]:
            for key, type_ in SEGMENT_KEYS.items():
                self.assertIsInstance(segment[key], type_, key)
            self.assertIn(segment["segment_type"], ("small", "large"))
            address = segment["address"]
            allocated = active = requested = 0
            for block in segment["blocks"]:
                for key, type_ in BLOCK_KEYS.items():
                    self.assertIsInstance(block[key], type_, key)
                self.assertIn(block["state"], BLOCK_STATES)
                # Blocks tile the segment in address order: the visualizer relies on it.
                self.assertEqual(block["address"], address)
                address += block["size"]
                if block["state"] == "active_allocated":
                    allocated += block["size"]
                    requested += block["requested_size"]
                if block["state"] != "inactive":
                    active += block["size"]
            self.assertEqual(address, segment["address"] + segment["total_size"])
            self.assertEqual(segment["allocated_size"], allocated)
            self.assertEqual(segment["active_size"], active)
            self.assertEqual(segment["requested_size"], requested)

    def test_snapshot_describes_live_blocks(self):
        small = self.alloc(1000)
        large = self.alloc(3 * MiB + 1)
        freed = self.alloc(5000)
        self.free(freed)
        data = cudacache.snapshot()
        self.check_schema(data)
        blocks = {block["address"]: (segment, block) for segment in data["segments"]
                  for block in segment["blocks"]}
        segment, block = blocks[small]
        self.assertEqual((block["state"], block["size"], block["requested_size"]),
                         ("active_allocated", 1024, 1000))
        self.assertEqual((segment["segment_type"], segment["total_size"], segment["device"]),
                         ("small", 2 * MiB, 0))
        segment, block = blocks[large]
        self.assertEqual((block["state"], block["size"], block["requested_size"]),
                         ("active_allocated", round512(3 * MiB + 1), 3 * MiB + 1))
        self.assertEqual((segment["segment_type"], segment["total_size"]), ("large", 20 * MiB))
        self.assertEqual(sum(s["total_size"] for s in data["segments"]),
                         cudacache.memory_reserved(0))
        self.assertEqual(sum(s["allocated_size"] for s in data["segments"]),
                         cudacache.memory_allocated(0))
        addresses = [(s["device"], s["address"]) for s in data["segments"]]
        self.assertEqual(addresses, sorted(addresses))

    def test_memory_snapshot_is_the_segment_list(self):
        self.alloc(4096)
        self.assertEqual(cudacache.memory_snapshot(), cudacache.snapshot()["segments"])

    def test_snapshot_covers_every_device(self):
        self.runtime.require_devices(2)
        ptr = self.alloc(70000, device=1)
        data = cudacache.snapshot()
        self.check_schema(data)
        owner = [s for s in data["segments"]
                 if s["address"] <= ptr < s["address"] + s["total_size"]]
        self.assertEqual([s["device"] for s in owner], [1])
        self.assertEqual({s["device"] for s in cudacache.snapshot(1)["segments"]}, {1})
        # device_traces is indexed by device: one device's trace is at its own index (it
        # was at 0, and readers drew device 1's trace as device 0's).
        cudacache.record_history(100, device=1)
        try:
            self.alloc(5000, device=1)
            traces = cudacache.snapshot(1)["device_traces"]
        finally:
            cudacache.record_history(0, device=1)
        self.assertEqual(len(traces), 2)
        self.assertEqual(traces[0], [])
        self.assertEqual([entry["size"] for entry in traces[1] if entry["action"] == "alloc"],
                         [5000])
        self.assertEqual(len(cudacache.snapshot(0)["device_traces"]), 1)

    def test_snapshot_json_is_snprintf_style(self):
        self.alloc(1000)
        function = self.lib.cudacache_snapshot_json
        needed = function(0, None, 0)
        self.assertGreater(needed, 0)
        full = ctypes.create_string_buffer(needed + 1)
        self.assertEqual(function(0, full, needed + 1), needed)
        self.assertEqual(len(full.value), needed)
        short = ctypes.create_string_buffer(needed)
        self.assertEqual(function(0, short, needed), needed)
        self.assertEqual(short.value, full.value[:needed - 1])  # truncated, NUL-terminated

    def test_dump_snapshot_writes_a_pickle_the_visualizer_reads(self):
        self.alloc(1000)
        self.alloc(12 * MiB)
        with tempfile.TemporaryDirectory() as temp:
            path = os.path.join(temp, "snapshot.pickle")
            written = cudacache.dump_snapshot(path)
            with open(path, "rb") as file:
                raw = file.read()
        loaded = PlainDataUnpickler(io.BytesIO(raw)).load()
        self.assertEqual(loaded, written)
        self.assertEqual(loaded, cudacache.snapshot())
        self.check_schema(loaded)
        self.assertEqual(raw[0], 0x80)  # PROTO
        self.assertLessEqual(raw[1], 4, "memory_viz reads protocols 2 to 4 only")
        opcodes = {opcode.name for opcode, _, _ in pickletools.genops(raw)}
        self.assertEqual(opcodes - MEMORY_VIZ_OPCODES, set())

    def record(self, max_entries=1000):
        cudacache.record_history(max_entries)
        # Leave no entries behind for the other tests: a new start drops them, a stop ends it.
        self.addCleanup(cudacache.record_history, 0)
        self.addCleanup(cudacache.record_history, 1)

    def test_dump_snapshot_carries_the_recorded_history(self):
        self.assertEqual(cudacache.snapshot(0)["device_traces"], [[]])  # off by default
        self.record()
        ptr = self.alloc(5000)
        self.free(ptr)
        cudacache.empty_cache()
        with tempfile.TemporaryDirectory() as temp:
            path = os.path.join(temp, "snapshot.pickle")
            written = cudacache.dump_snapshot(path)
            with open(path, "rb") as file:
                raw = file.read()
        loaded = PlainDataUnpickler(io.BytesIO(raw)).load()
        self.assertEqual(loaded, written)
        self.check_schema(loaded)
        opcodes = {opcode.name for opcode, _, _ in pickletools.genops(raw)}
        self.assertEqual(opcodes - MEMORY_VIZ_OPCODES, set())
        trace = loaded["device_traces"][0]
        self.assertEqual([entry["action"] for entry in trace],
                         ["segment_map", "alloc", "free_requested", "free_completed",
                          "segment_unmap", "empty_cache"])  # the default policy maps pages
        segment_alloc, alloc, free_requested, free_completed, segment_free, empty = trace
        self.assertEqual((alloc["addr"], alloc["size"], alloc["block_size"], alloc["stream"]),
                         (ptr, 5000, round512(5000), 0))
        self.assertEqual(free_completed["addr"], ptr)
        self.assertEqual(segment_alloc["size"], 2 * MiB)
        self.assertEqual(segment_free["addr"], segment_alloc["addr"])
        self.assertEqual(empty["size"], 2 * MiB)
        times = [entry["time_us"] for entry in trace]
        self.assertEqual(times, sorted(times))
        self.assertGreater(times[0], 1_600_000_000 * 1_000_000)  # microseconds since the epoch
        for entry in trace:
            self.assertEqual(entry["frames"], [])
        # Stopping keeps what was recorded.
        cudacache.record_history(0)
        self.free(self.alloc(100))
        self.assertEqual(cudacache.snapshot()["device_traces"][0], trace)

    def test_history_csv_is_a_replay_trace(self):
        self.record()
        first = self.alloc(1000)
        second = self.alloc(3 * MiB)
        self.free(first)
        cudacache.empty_cache()
        self.assertEqual(cudacache.history_csv(0),
                         "op,id,size,stream\n"
                         "alloc,0,1000,0\n"
                         f"alloc,1,{3 * MiB},0\n"
                         "free,0,1000,0\n"
                         "empty_cache,,,\n")
        self.free(second)

    def test_history_bad_input(self):
        with self.assertRaises(ValueError):
            cudacache.record_history(-1)
        with self.assertRaises(ValueError):
            cudacache.record_history(cudacache._snapshot.MAX_HISTORY_ENTRIES + 1)
        with self.assertRaises(TypeError):
            cudacache.record_history("100")
        with self.assertRaisesRegex(cudacache.CudacacheError, "invalid device ordinal 7"):
            cudacache.record_history(10, device=7)
        with self.assertRaisesRegex(cudacache.CudacacheError, "invalid device ordinal 7"):
            cudacache.history_csv(7)
        # The C ABI checks the bound itself.
        status = self.lib.cudacache_record_history(0, 2**64 - 1)
        self.assertEqual(self.lib.status_name(status), "CUDACACHE_INVALID_ARGUMENT")
        self.assertIn("above the maximum", self.lib.last_error())

    def test_restricted_unpickler_rejects_objects(self):
        raw = pickle.dumps({"segments": [ValueError("x")]}, protocol=cudacache.PICKLE_PROTOCOL)
        with self.assertRaises(pickle.UnpicklingError):
            PlainDataUnpickler(io.BytesIO(raw)).load()


if __name__ == "__main__":
    unittest.main()
