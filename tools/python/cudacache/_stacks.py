"""Allocation stacks: which frames cudacache records with each allocation (the history's
`frames`, the growth detector's sites). See cudacache_stacks in cudacache.h.

Python frames come from libcudacache's own provider, cudacache_python_frames, which walks the
allocating thread's frames through the CPython API; it is registered with the library the first
time Python frames are asked for.
"""

import atexit
import ctypes
import threading

from . import _library

# cudacache_stacks: the names PyTorch's _record_memory_history(stacks=...) uses, plus cpp.
STACKS = {"none": 0, "cpp": 1, "python": 2, "all": 3}

_lock = threading.Lock()
_provider_registered = False


def stacks_value(stacks):
    """The cudacache_stacks value of "none", "cpp", "python" or "all" (None is "none")."""
    if stacks is None:
        return STACKS["none"]
    if not isinstance(stacks, str) or stacks not in STACKS:
        raise ValueError(f"stacks must be one of {', '.join(map(repr, STACKS))}, got {stacks!r}")
    return STACKS[stacks]


def use_python_frames():
    """Registers libcudacache's Python frames provider (once per process)."""
    global _provider_registered
    with _lock:
        if _provider_registered:
            return
        lib = _library.get()
        provider = ctypes.cast(lib.cdll.cudacache_python_frames, ctypes.c_void_p)
        lib.cudacache_set_python_frames_provider(provider)
        _provider_registered = True
        # No Python frames once the interpreter shuts down.
        atexit.register(lib.cudacache_set_python_frames_provider, None)


def prepare(stacks):
    """The C value of `stacks`, with the Python provider registered when it asks for Python."""
    value = stacks_value(stacks)
    if value & STACKS["python"]:
        use_python_frames()
    return value
