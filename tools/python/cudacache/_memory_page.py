"""Memory over time as one self-contained HTML page, from a snapshot or from this process.

The page is the one cudacache-replay --html writes (tools/html/memory_page.html, packaged with
this module); only its figures come from elsewhere: here they are derived from a snapshot's
device_traces (alloc, free_requested, free_completed, segment_* entries) and its segments
(the state at the end of the trace).
"""

import datetime
import json
import os
import pickle
from pathlib import Path

from ._version import __version__

# Points per chart, as cudacache-replay draws them (kTimelinePoints in tools/replay/timeline.h).
TIMELINE_POINTS = 1000

_TEMPLATE_NAME = "memory_page.html"
_DATA_PLACEHOLDER = "__CUDACACHE_MEMORY_DATA__"
_ACTIVE_STATES = ("active_allocated", "active_pending_free")
_SEGMENT_DELTAS = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
_MARKED_ACTIONS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom",
                   "empty_cache")


def _template():
    # Installed: inside the package (the wheel puts it there). From a source tree: tools/html.
    for candidate in (Path(__file__).with_name(_TEMPLATE_NAME),
                      Path(__file__).resolve().parents[2] / "html" / _TEMPLATE_NAME):
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    raise FileNotFoundError(f"{_TEMPLATE_NAME} is neither in {Path(__file__).parent} nor in "
                            "the source tree's tools/html")


class _PlainDataUnpickler(pickle.Unpickler):
    """Snapshots are plain data: refuse anything that would import or build an object."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            f"a memory snapshot holds plain data only; refusing to load {module}.{name}")


def load_snapshot(path):
    """Reads a snapshot pickle (torch.cuda.memory._dump_snapshot, cudacache.dump_snapshot or
    cudacache-replay --memory-viz) without running any code it might contain."""
    with open(path, "rb") as file:
        data = _PlainDataUnpickler(file).load()
    if not isinstance(data, dict) or "segments" not in data:
        raise ValueError(f"{path}: not a memory snapshot (expected a dict with 'segments' and "
                         "'device_traces')")
    return data


def _end_state(segments, device):
    reserved = allocated = requested = 0
    for segment in segments:
        if segment.get("device", 0) != device:
            continue
        reserved += segment.get("total_size", 0)
        for block in segment.get("blocks", []):
            # Requested sizes, as the trace entries carry them.
            size = block.get("requested_size", block.get("size", 0))
            if block.get("state") in _ACTIVE_STATES:
                allocated += size
            if block.get("state") == "active_allocated":
                requested += size
    return reserved, allocated, requested


def _deltas(entries):
    """Per entry, the change of (requested, allocated, reserved) it makes."""
    free_action = ("free_completed" if any(e.get("action") == "free_completed" for e in entries)
                   else "free_requested")
    out = []
    for entry in entries:
        action, size = entry.get("action"), entry.get("size", 0)
        requested = allocated = reserved = 0
        if action == "alloc":
            requested, allocated = size, size
        elif action == "free_requested":
            requested = -size
        if action == free_action and action in ("free_requested", "free_completed"):
            allocated = -size
        reserved = _SEGMENT_DELTAS.get(action, 0) * size
        out.append((requested, allocated, reserved))
    return out


class _Buckets:
    """Minimum and maximum per bucket of events, as tools/replay/timeline.cpp keeps them."""

    def __init__(self, total, points):
        self.size = max((total + points - 1) // points, 1)
        self.first_event = []
        self.ranges = {name: ([], []) for name in ("requested", "allocated", "reserved")}
        self.calls = {}

    def record(self, index, figures, action):
        opening = index % self.size == 0
        if opening:
            self.first_event.append(index)
        for name, value in figures.items():
            low, high = self.ranges[name]
            if opening:
                low.append(value)
                high.append(value)
            else:
                low[-1] = min(low[-1], value)
                high[-1] = max(high[-1], value)
        if action in _MARKED_ACTIONS:
            points = self.calls.setdefault(action, [])
            point = len(self.first_event) - 1
            if points and points[-1][0] == point:
                points[-1][1] += 1
            else:
                points.append([point, 1])


def _device_series(snapshot, device, points):
    traces = snapshot.get("device_traces") or []
    entries = traces[device] if device < len(traces) else []
    reserved, allocated, requested = _end_state(snapshot.get("segments", []), device)
    deltas = _deltas(entries)
    # The trace may start after the program did (a ring, or recording started late): the state
    # before its first entry is the state at the end minus everything the trace did.
    requested -= sum(d[0] for d in deltas)
    allocated -= sum(d[1] for d in deltas)
    reserved -= sum(d[2] for d in deltas)
    buckets = _Buckets(len(entries), points)
    peaks = {"requested": 0, "allocated": 0, "reserved": 0}
    for index, (entry, delta) in enumerate(zip(entries, deltas)):
        requested += delta[0]
        allocated += delta[1]
        reserved += delta[2]
        figures = {"requested": max(requested, 0), "allocated": max(allocated, 0),
                   "reserved": max(reserved, 0)}
        for name, value in figures.items():
            peaks[name] = max(peaks[name], value)
        buckets.record(index, figures, entry.get("action"))
    series = {
        "name": "snapshot", "note": "", "events": len(entries), "bucket_events": buckets.size,
        "first_event": buckets.first_event, "calls": buckets.calls,
        "peak_allocated": peaks["allocated"], "peak_reserved": peaks["reserved"],
    }
    for name, (low, high) in buckets.ranges.items():
        series[name + "_min"], series[name + "_max"] = low, high
    oom = [i for i, entry in enumerate(entries) if entry.get("action") == "oom"]
    if oom:
        series["oom_event"] = oom[0]
    return series, peaks["requested"]


def memory_page_data(snapshot, source="snapshot", name=None, points=TIMELINE_POINTS):
    """The page's JSON document (schema in tools/replay/memory_page.h) for a snapshot dict: one
    chart per device that has trace entries or segments."""
    traces = snapshot.get("device_traces") or []
    devices = sorted({i for i, entries in enumerate(traces) if entries} |
                     {s.get("device", 0) for s in snapshot.get("segments", [])})
    pages = []
    for device in devices:
        series, peak_requested = _device_series(snapshot, device, points)
        series["name"] = name or "allocator"
        pages.append({
            "name": f"device {device}", "source": source, "events": series["events"],
            "peak_requested": peak_requested, "min_capacity_searched": False,
            "notes": ["From the snapshot's trace: requested counts alloc to free_requested, "
                      "allocated alloc to free_completed (the sizes the trace records), "
                      "reserved the segment entries; marks are segment (device) calls. No "
                      "min-capacity line: that needs cudacache-replay --min-capacity."],
            "series": [series],
        })
    return {
        "format": "cudacache-memory-page/1",
        "title": f"Memory over time: {source}",
        "generator": f"cudacache {__version__} (Python)",
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "notes": [] if devices else ["The snapshot has no trace entries and no segments: "
                                     "record the history first (cudacache.record_history())."],
        "traces": pages,
    }


def render_page(data):
    """The page's HTML for a JSON document of memory_page_data's schema."""
    text = json.dumps(data, separators=(",", ":"))
    # JSON has '<', '>' and '&' only inside strings: escaped, no name can close the <script>.
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _template().replace(_DATA_PLACEHOLDER, text, 1)


def render_html(path=None, snapshot=None, *, name=None):
    """Writes memory over time as one self-contained HTML page to `path` and returns its HTML.

    `snapshot` is a snapshot dict (torch.cuda.memory._snapshot(), cudacache.snapshot()) or the
    path of a snapshot pickle (torch.cuda.memory._dump_snapshot, cudacache.dump_snapshot,
    cudacache-replay --memory-viz); None takes cudacache.snapshot() of this process, whose trace
    is what cudacache.record_history() recorded. `name` labels the chart (default: the
    allocator's). With path=None the HTML is only returned.
    """
    if snapshot is None:
        from ._snapshot import snapshot as live_snapshot
        data = memory_page_data(live_snapshot(), source=f"process {os.getpid()}",
                                name=name or "cudacache")
    elif isinstance(snapshot, dict):
        data = memory_page_data(snapshot, name=name)
    elif isinstance(snapshot, (str, os.PathLike)):
        data = memory_page_data(load_snapshot(snapshot), source=os.fspath(snapshot),
                                name=name or Path(snapshot).stem)
    else:
        raise TypeError("snapshot must be a dict, a pickle's path or None, got "
                        f"{type(snapshot).__name__}")
    html = render_page(data)
    if path is not None:
        with open(path, "w", encoding="utf-8") as file:
            file.write(html)
    return html
