"""The growth detector from Python: memory a loop keeps step after step.

    watch = cudacache.watch_growth()        # or cudacache.torch.watch_growth()
    for batch in loader:
        loss = model(batch).sum()
        total_loss += loss                   # the bug: keeps every step's graph alive
        ...
        watch.step()                          # a step boundary

or `for batch in cudacache.watch_growth(loader):`, which marks a step after each item. When
allocated memory has risen at `steps` step boundaries in a row, the allocation sites whose
blocks those steps left allocated are named once, in a MemoryGrowthWarning, and report() returns
them (Note [Growth detection] in allocator/core/growth_detector.h).
"""

import os
import threading
import warnings

from . import _library, _stacks
from ._device import device_index
from ._errors import CudacacheError
from ._memory import _check, read_json

DEFAULT_STEPS = 3
QUIET = 1  # CUDACACHE_GROWTH_QUIET: this module says it, as a Python warning

# Frames from these packages are how an allocation reached cudacache, not where the program
# made it: the warning names the first frame outside them.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class MemoryGrowthWarning(ResourceWarning):
    """Allocated memory grew step after step; the message names the allocation sites."""


def _format_size(nbytes):
    # PyTorch's and the C library's format (allocator/support/memory_figures.h).
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    value, unit = nbytes / 1024.0, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024.0:
            break
        value, unit = value / 1024.0, bigger
    return f"{value:.2f} {unit}"


def _library_frame(frame):
    filename = frame.get("filename", "")
    if os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
        return True
    parts = filename.replace("\\", "/").split("/")
    installed = "site-packages" in parts or "dist-packages" in parts
    return installed and "torch" in parts[:-1]


def site_of(frames):
    """The frame that names an allocation site: the first one outside torch and cudacache."""
    for frame in frames:
        if frame.get("line", 0) > 0 and not _library_frame(frame):
            return frame
    return frames[0] if frames else None


def describe(report, device_label):
    """The warning's text for a report of cudacache_growth_report_json."""
    boundaries = " -> ".join(_format_size(b) for b in report["allocated_at_boundaries"])
    lines = [f"cudacache: allocated memory on {device_label} grew at each of the last "
             f"{len(report['allocated_at_boundaries']) - 1} steps ({boundaries}). Blocks "
             "allocated in those steps and still allocated, by allocation site:"]
    for site in report["sites"][:5]:
        frame = site_of(site["frames"])
        where = (f"{frame['filename']}:{frame['line']} in {frame['name']}" if frame
                 else "(no stack recorded)")
        lines.append(f"  {_format_size(site['bytes'])} in {site['blocks']} blocks from "
                     f"{site['steps']} steps: {where}")
    if len(report["sites"]) > 5:
        lines.append(f"  ... and {len(report['sites']) - 5} more sites (report() has them all)")
    lines.append("Something keeps a block from each step alive, for example `total += loss` "
                 "(which keeps every step's graph) instead of `total += loss.item()`.")
    return "\n".join(lines)


def growth_report(device=None):
    """The growth detector's report of `device` (cudacache_growth_report_json), a dict."""
    return _report_of(device_index(device))


def _report_of(index):
    lib = _library.get()
    return read_json(lambda buffer, length: lib.cudacache_growth_report_json(index, buffer,
                                                                              length))


class GrowthWatch:
    """A watch started by watch_growth(): step() ends a step, report() says what was found."""

    def __init__(self, iterable=None, steps=DEFAULT_STEPS, stacks="python", device=None):
        if isinstance(steps, bool) or not isinstance(steps, int) or not 2 <= steps <= 1000:
            raise ValueError(f"steps must be an int from 2 to 1000, got {steps!r}")
        self._iterable = iterable
        self._device = device_index(device)
        self._lock = threading.Lock()
        self._warned = False
        self._report = None
        lib = _library.get()
        _check(lib, lib.cudacache_watch_growth(self._device, steps, _stacks.prepare(stacks),
                                               QUIET), "cudacache_watch_growth")

    def step(self):
        """Ends a step (on every device cudacache serves). Returns the report the first time
        growth is found, else None; that time it also warns (MemoryGrowthWarning)."""
        lib = _library.get()
        found = lib.cudacache_mark_step()
        if found < 0:
            raise CudacacheError(f"cudacache_mark_step: {lib.last_error()}")
        if found == 0:
            return None
        report = _report_of(self._device)
        with self._lock:
            if self._warned or not report["growing"]:
                return None
            self._warned = True
            self._report = report
        label = f"cuda:{report['device']}"
        warnings.warn(MemoryGrowthWarning(describe(report, label)), stacklevel=2)
        return report

    def report(self):
        """What the detector found: a dict with "growing", "step", "allocated_at_boundaries"
        and "sites" (each with "bytes", "blocks", "steps" and PyTorch-style "frames")."""
        return _report_of(self._device)

    def stop(self):
        lib = _library.get()
        _check(lib, lib.cudacache_watch_growth(self._device, 0, 0, QUIET),
               "cudacache_watch_growth")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def __iter__(self):
        if self._iterable is None:
            raise TypeError("this watch wraps no iterable: pass one to watch_growth(), or call "
                            "step() at the end of each step")
        for item in self._iterable:
            yield item
            self.step()


def watch_growth(iterable=None, steps=DEFAULT_STEPS, stacks="python", device=None):
    """Watches `device` (None: the current one) for memory kept step after step.

    Returns a GrowthWatch: call its step() at the end of each step, or iterate it when it wraps
    `iterable` (a step ends after each item). `steps`: how many step boundaries in a row
    allocated memory must rise at (2 to 1000). `stacks`: how allocation sites are told apart
    and named, "python" (the default), "cpp" or "all". Starting a watch on a device restarts it.
    """
    return GrowthWatch(iterable, steps=steps, stacks=stacks, device=device)
