"""Allocator snapshots in the schema of torch.cuda.memory._snapshot().

{"segments": [segment, ...], "device_traces": [[trace entry, ...] per device]}, plain dicts,
lists, str, int and bool, so that PyTorch's tools (torch.cuda._memory_viz, pytorch.org/memory_viz)
read them as they read PyTorch's own.
"""

import ctypes
import pickle

from . import _library, _stacks
from ._device import device_index
from ._errors import CudacacheError
from ._memory import _check, read_json, read_text

# The protocol of the pickle dump_snapshot() writes. PyTorch's _dump_snapshot uses Python's
# default, which is 4 up to Python 3.13 and 5 from 3.14; the JavaScript unpickler of
# pytorch.org/memory_viz (torch/utils/viz/MemoryViz.js) accepts protocols 2 to 4 only, so the
# protocol is pinned to 4.
PICKLE_PROTOCOL = 4


def device_count():
    """Number of CUDA devices the runtime that libcudacache uses reports (0 on failure)."""
    count = ctypes.c_int(0)
    status = _library.get().cudart().cudaGetDeviceCount(ctypes.byref(count))
    return count.value if status == 0 else 0


def _device_snapshot(lib, device):
    return read_json(lambda buffer, length: lib.cudacache_snapshot_json(device, buffer, length))


def _with_frames(entries):
    # Every entry has the key (empty unless stacks are recorded); PyTorch's readers expect it.
    for entry in entries:
        entry.setdefault("frames", [])
    return entries


def snapshot(device=None):
    """A snapshot of every device (like torch.cuda.memory._snapshot()), or of one device.

    Segments are ordered by (device, address); blocks of a segment by address, so that they tile
    the segment as PyTorch's visualizer assumes. device_traces has one list per device.
    """
    lib = _library.get()
    devices = [device_index(device)] if device is not None else range(max(device_count(), 1))
    segments = []
    traces = {}  # device -> its trace; device_traces is indexed by device
    for index in devices:
        document = _device_snapshot(lib, index)
        if not isinstance(document, dict) or "segments" not in document:
            raise CudacacheError(f"cudacache_snapshot_json({index}) returned no 'segments'")
        for segment in document["segments"]:
            segment.setdefault("frames", [])
            segment["blocks"] = _with_frames(sorted(segment.get("blocks", []),
                                                    key=lambda block: block["address"]))
            segments.append(segment)
        device_traces = document.get("device_traces", [])
        if len(device_traces) > max(index, 0) and len(device_traces) > 1:
            trace = _with_frames(device_traces[index])
        else:
            trace = _with_frames(device_traces[0]) if device_traces else []
        # One device's snapshot keeps its trace at its own index (it was at 0, so a reader
        # drew device 1's trace as device 0's), after empty ones for the devices before it.
        traces[index if index >= 0 else _current_device()] = trace
    segments.sort(key=lambda segment: (segment.get("device", 0), segment["address"]))
    return {"segments": segments,
            "device_traces": [traces.get(i, []) for i in range(max(traces) + 1)]}


def _current_device():
    device = ctypes.c_int(0)
    status = _library.get().cudart().cudaGetDevice(ctypes.byref(device))
    return device.value if status == 0 else 0


# Entries a recording keeps by default (PyTorch's scripts commonly pass max_entries=100000).
DEFAULT_HISTORY_ENTRIES = 100_000
MAX_HISTORY_ENTRIES = 100_000_000  # kMaxHistoryEntries in allocator/history.h


def record_history(max_entries=DEFAULT_HISTORY_ENTRIES, device=None, stacks=None):
    """Starts recording the allocation history of `device`, or stops it with max_entries=0.

    Like torch.cuda.memory._record_memory_history(max_entries=N, stacks=...): a ring of the
    newest N alloc / free_requested / free_completed / segment_alloc / segment_free /
    segment_map / segment_unmap / oom / empty_cache entries, which snapshot() and
    dump_snapshot() then carry in device_traces. `stacks` ("cpp", "python", "all"; None or
    "none" for none) is what the `frames` of each alloc and oom entry, and of each allocated
    block in the snapshot's segments, hold: PyTorch's [{"name", "filename", "line"}, ...],
    innermost first. Capturing costs time on every allocation. Starting drops earlier entries;
    stopping keeps them until the next start. At most MAX_HISTORY_ENTRIES;
    CUDACACHE_CONF="record_history:N,record_stacks:S" records every device from its first use
    instead.
    """
    if isinstance(max_entries, bool) or not isinstance(max_entries, int):
        raise TypeError(f"max_entries must be an int, got {max_entries!r}")
    if not 0 <= max_entries <= MAX_HISTORY_ENTRIES:
        raise ValueError(f"max_entries must be 0 (stop) to {MAX_HISTORY_ENTRIES}, got {max_entries}")
    stacks_value = _stacks.prepare(stacks)
    lib = _library.get()
    _check(lib, lib.cudacache_record_history_stacks(device_index(device), max_entries,
                                                    stacks_value),
           "cudacache_record_history_stacks")


def history_csv(device=None):
    """The recorded history of `device` as replay CSV text ("op,id,size,stream"), the input of
    cudacache-replay (see allocator/history_csv.h for the conversion rules)."""
    lib = _library.get()
    index = device_index(device)
    return read_text(lambda buffer, length: lib.cudacache_history_csv(index, buffer, length))


def memory_snapshot():
    """The segments of every device, like torch.cuda.memory_snapshot()."""
    return snapshot()["segments"]


def dump_snapshot(path="dump_snapshot.pickle"):
    """Writes snapshot() as a pickle that pytorch.org/memory_viz and torch.cuda._memory_viz open.

    Same default file name as torch.cuda.memory._dump_snapshot. Returns the snapshot written.
    """
    data = snapshot()
    with open(path, "wb") as file:
        pickle.dump(data, file, protocol=PICKLE_PROTOCOL)
    return data
