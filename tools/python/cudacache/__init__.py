"""cudacache from Python: statistics, snapshots and configuration of libcudacache.so.

Pure Python over ctypes. Importing this package loads nothing: libcudacache.so (and the CUDA
runtime it links) is found and loaded on the first call that needs it; see
cudacache._library for the search order and CUDACACHE_LIBRARY.

The functions answer like their torch.cuda namesakes. `device` is None (the current device),
an int, "cuda"/"cuda:N" or a torch.device.

PyTorch integration lives in cudacache.torch (install()).
"""

import importlib

from ._version import __version__
from ._device import device_index
from ._errors import ConfigurationError, CudacacheError, LibraryNotFoundError, OutOfMemoryError
from ._memory import (
    OomContext,
    add_retry_hook,
    config_help,
    configure,
    empty_cache,
    last_error,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    raw_alloc,
    raw_free,
    record_stream,
    remove_retry_hook,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from ._growth import GrowthWatch, MemoryGrowthWarning, growth_report, watch_growth
from ._memory_page import load_snapshot, render_html
from ._snapshot import (
    PICKLE_PROTOCOL,
    device_count,
    dump_snapshot,
    history_csv,
    memory_snapshot,
    record_history,
    snapshot,
)

__all__ = [
    "__version__",
    "ConfigurationError",
    "CudacacheError",
    "GrowthWatch",
    "LibraryNotFoundError",
    "MemoryGrowthWarning",
    "OomContext",
    "OutOfMemoryError",
    "add_retry_hook",
    "config_help",
    "configure",
    "device_count",
    "device_index",
    "dump_snapshot",
    "empty_cache",
    "growth_report",
    "history_csv",
    "last_error",
    "library_path",
    "load_library",
    "load_snapshot",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "raw_alloc",
    "raw_free",
    "record_history",
    "record_stream",
    "remove_retry_hook",
    "render_html",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "snapshot",
    "watch_growth",
]


for _public in (ConfigurationError, CudacacheError, GrowthWatch, LibraryNotFoundError,
                MemoryGrowthWarning, OomContext, OutOfMemoryError):
    _public.__module__ = __name__
del _public


def load_library():
    """Finds and loads libcudacache.so now (it is otherwise loaded on first use).

    Returns its path. Raises LibraryNotFoundError naming every place it looked.
    """
    from . import _library

    return str(_library.get().path)


def library_path():
    """Path of the loaded libcudacache.so, or None when nothing has loaded it yet."""
    from . import _library

    library = _library.loaded()
    return None if library is None else str(library.path)


def __getattr__(name):
    # `cudacache.torch` without importing torch at `import cudacache`.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
