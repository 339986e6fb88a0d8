"""Finding, loading and binding libcudacache.so.

Nothing here runs at import time: the library (and with it the CUDA runtime) is loaded by
``get()`` on the first call that needs it.

Search order (the first library that loads wins):

1. ``$CUDACACHE_LIBRARY``: an explicit path. When set, nothing else is tried, and a path that
   does not exist or does not load is an error that names it.
2. Next to the package: ``<package>/libcudacache.so`` (a wheel that bundles the library).
3. An install prefix: ``<A>/lib/libcudacache.so`` then ``<A>/lib64/libcudacache.so`` for each
   of the four nearest ancestors ``<A>`` of the package directory, nearest first. This covers
   ``<prefix>/lib/pythonX.Y/site-packages/cudacache`` and ``<prefix>/lib/python/cudacache``.
4. The build tree, when the package is the one in ``<repo>/tools/python``:
   ``<repo>/build/release``, then ``<repo>/build/debug``, then every other ``<repo>/build/*``
   in name order, each as ``<dir>/allocator/libcudacache.so``. A build configured with
   ``CUDACACHE_SANITIZE`` is skipped: a sanitizer runtime cannot be loaded into a Python that
   was not started with it (ASan would end the process).
5. The dynamic linker's own search (``LD_LIBRARY_PATH``, the ldconfig cache) for
   ``libcudacache.so``.
"""

import ctypes
import os
import pathlib
import threading

from ._errors import CudacacheError, LibraryNotFoundError

LIBRARY_NAME = "libcudacache.so"
ENV_LIBRARY = "CUDACACHE_LIBRARY"

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent

_c_ssize_t = ctypes.c_ssize_t
_c_size_t = ctypes.c_size_t
_c_int = ctypes.c_int
_c_void_p = ctypes.c_void_p
_c_char_p = ctypes.c_char_p

class OomContext(ctypes.Structure):
    """cudacache_oom_context: what a retry hook is told about the failed allocation."""

    _fields_ = [
        ("device", _c_int),
        ("round", _c_int),
        ("requested_bytes", _c_size_t),
        ("allocated_bytes", _c_size_t),
        ("reserved_bytes", _c_size_t),
        ("device_free_bytes", _c_size_t),
        ("device_total_bytes", _c_size_t),
        ("user_data", _c_void_p),
    ]


# cudacache_retry_hook: bool (*)(const cudacache_oom_context*).
RETRY_HOOK_FN = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.POINTER(OomContext))

# Every C function this package calls, as (restype, argtypes). Must match
# include/cudacache/cudacache.h exactly: tests/python/test_library.py checks it against the
# header. cudacache_status is an enum: c_int.
PROTOTYPES = {
    "cudacache_status_string": (_c_char_p, [_c_int]),
    "cudacache_last_error": (_c_char_p, []),
    "cudacache_malloc": (_c_void_p, [_c_ssize_t, _c_int, _c_void_p]),
    "cudacache_free": (None, [_c_void_p, _c_ssize_t, _c_int, _c_void_p]),
    "cudacache_allocate": (_c_int, [ctypes.POINTER(_c_void_p), _c_size_t, _c_int, _c_void_p]),
    "cudacache_deallocate": (_c_int, [_c_void_p]),
    "cudacache_record_stream": (_c_int, [_c_void_p, _c_void_p]),
    "cudacache_empty_cache": (None, []),
    "cudacache_memory_allocated": (_c_size_t, [_c_int]),
    "cudacache_memory_reserved": (_c_size_t, [_c_int]),
    "cudacache_max_memory_allocated": (_c_size_t, [_c_int]),
    "cudacache_max_memory_reserved": (_c_size_t, [_c_int]),
    "cudacache_reset_peak_memory_stats": (_c_int, [_c_int]),
    "cudacache_reset_accumulated_memory_stats": (_c_int, [_c_int]),
    "cudacache_memory_stats_json": (_c_int, [_c_int, _c_char_p, _c_size_t]),
    "cudacache_snapshot_json": (_c_int, [_c_int, _c_char_p, _c_size_t]),
    "cudacache_record_history": (_c_int, [_c_int, _c_size_t]),
    "cudacache_history_csv": (_c_int, [_c_int, _c_char_p, _c_size_t]),
    "cudacache_record_history_stacks": (_c_int, [_c_int, _c_size_t, _c_int]),
    "cudacache_set_python_frames_provider": (None, [_c_void_p]),
    "cudacache_watch_growth": (_c_int, [_c_int, ctypes.c_uint, _c_int, _c_int]),
    "cudacache_mark_step": (_c_int, []),
    "cudacache_growth_report_json": (_c_int, [_c_int, _c_char_p, _c_size_t]),
    "cudacache_configure": (_c_int, [_c_char_p]),
    "cudacache_config_help": (_c_char_p, []),
    "cudacache_version": (_c_char_p, []),
    "cudacache_register_retry_hook": (_c_int, [RETRY_HOOK_FN, _c_void_p]),
    "cudacache_unregister_retry_hook": (_c_int, [_c_int]),
}

# Loading fails without these: they are what PyTorch's pluggable ABI needs.
REQUIRED_SYMBOLS = ("cudacache_malloc", "cudacache_free", "cudacache_last_error")


def _sanitizer_of_build(build_dir):
    """The CUDACACHE_SANITIZE value a build directory was configured with ('' if none)."""
    cache = build_dir / "CMakeCache.txt"
    try:
        text = cache.read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith("CUDACACHE_SANITIZE:"):
            return line.partition("=")[2].strip()
    return ""


def _repository_root(package_dir):
    """The repository root when package_dir is <repo>/tools/python/cudacache, else None."""
    if package_dir.parent.name != "python" or package_dir.parent.parent.name != "tools":
        return None
    root = package_dir.parent.parent.parent
    if (root / "CMakeLists.txt").is_file() and (root / "allocator").is_dir():
        return root
    return None


def candidate_paths(package_dir=_PACKAGE_DIR):
    """Steps 2 to 4 of the search order, as a list of (path, note).

    A note other than None means the candidate is skipped for that reason.
    """
    package_dir = pathlib.Path(package_dir)
    candidates = [(package_dir / LIBRARY_NAME, None)]
    for ancestor in list(package_dir.parents)[:4]:
        candidates.append((ancestor / "lib" / LIBRARY_NAME, None))
        candidates.append((ancestor / "lib64" / LIBRARY_NAME, None))
    root = _repository_root(package_dir)
    if root is not None:
        build = root / "build"
        preferred = [build / "release", build / "debug"]
        others = sorted(p for p in build.glob("*") if p.is_dir() and p not in preferred)
        for build_dir in preferred + others:
            sanitizer = _sanitizer_of_build(build_dir)
            note = f"skipped: built with CUDACACHE_SANITIZE={sanitizer}" if sanitizer else None
            candidates.append((build_dir / "allocator" / LIBRARY_NAME, note))
    seen = set()
    unique = []
    for path, note in candidates:
        if path not in seen:
            seen.add(path)
            unique.append((path, note))
    return unique


class Library:
    """A loaded libcudacache with its functions bound to their C prototypes."""

    def __init__(self, path, cdll):
        self.path = path
        self.cdll = cdll
        self._bound = {}
        self._cudart = None
        for name in REQUIRED_SYMBOLS:
            self.function(name)

    def has(self, name):
        return hasattr(self.cdll, name)

    def function(self, name):
        """The C function `name` with its prototype applied."""
        fn = self._bound.get(name)
        if fn is not None:
            return fn
        try:
            fn = getattr(self.cdll, name)
        except AttributeError:
            raise CudacacheError(
                f"{self.path} does not export {name}: the library and the Python package "
                "come from different versions of cudacache") from None
        restype, argtypes = PROTOTYPES[name]
        fn.restype = restype
        fn.argtypes = argtypes
        self._bound[name] = fn
        return fn

    def __getattr__(self, name):
        if name.startswith("cudacache_"):
            return self.function(name)
        raise AttributeError(name)

    def last_error(self):
        message = self.function("cudacache_last_error")()
        return message.decode(errors="replace") if message else ""

    def status_name(self, status):
        name = self.function("cudacache_status_string")(status)
        return name.decode() if name else f"status {status}"

    def cudart(self):
        """The CUDA runtime that libcudacache itself uses (already loaded as its dependency)."""
        if self._cudart is None:
            self._cudart = ctypes.CDLL("libcudart.so.13")
        return self._cudart


def _load(path):
    try:
        return ctypes.CDLL(str(path))
    except OSError as error:
        raise LibraryNotFoundError(f"cannot load {path}: {error}", [(path, str(error))]) from None


def load(package_dir=_PACKAGE_DIR, environ=None):
    """Finds and loads libcudacache following the search order; raises LibraryNotFoundError."""
    environ = os.environ if environ is None else environ
    explicit = environ.get(ENV_LIBRARY)
    if explicit:
        path = pathlib.Path(explicit)
        if not path.is_file():
            raise LibraryNotFoundError(
                f"{ENV_LIBRARY}={explicit} names no file; unset it to search the default "
                "places, or point it at a built libcudacache.so", [(path, "no such file")])
        resolved = path.resolve()
        return Library(resolved, _load(resolved))

    searched = []
    for path, note in candidate_paths(package_dir):
        if note is not None:
            if path.is_file():
                searched.append((path, note))
            continue
        if not path.is_file():
            searched.append((path, "not found"))
            continue
        resolved = path.resolve()
        try:
            return Library(resolved, _load(resolved))
        except CudacacheError as error:
            searched.append((path, str(error)))
    try:
        cdll = ctypes.CDLL(LIBRARY_NAME)
        return Library(pathlib.Path(_loaded_path(cdll) or LIBRARY_NAME), cdll)
    except (OSError, CudacacheError) as error:
        searched.append((LIBRARY_NAME + " (dynamic linker search)", str(error)))
    lines = "\n".join(f"  {path}: {reason}" for path, reason in searched)
    raise LibraryNotFoundError(
        f"cannot find {LIBRARY_NAME}. Build it (cmake --workflow --preset test) or set "
        f"{ENV_LIBRARY} to its path. Looked in, in order:\n{lines}", searched)


def _loaded_path(cdll):
    """The file a CDLL came from, read from /proc/self/maps (None when unknown)."""
    handle_symbol = getattr(cdll, "cudacache_malloc", None)
    if handle_symbol is None:
        return None
    address = ctypes.cast(handle_symbol, ctypes.c_void_p).value
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                low, high = (int(x, 16) for x in fields[0].split("-"))
                if low <= address < high and len(fields) >= 6:
                    return fields[5]
    except OSError:
        return None
    return None


_lock = threading.Lock()
_library = None


def get():
    """The process-wide Library, loaded on first use."""
    global _library
    if _library is None:
        with _lock:
            if _library is None:
                _library = load()
    return _library


def loaded():
    """The loaded Library, or None if nothing has needed it yet."""
    return _library
