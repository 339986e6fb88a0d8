"""Use cudacache as PyTorch's CUDA allocator, and answer torch.cuda's memory functions from it.

    import cudacache.torch
    cudacache.torch.install()            # before the first CUDA tensor
    x = torch.empty(1 << 20, device="cuda")
    torch.cuda.memory_allocated()         # answered by cudacache

install() registers libcudacache through PyTorch's CUDAPluggableAllocator (its C ABI
cudacache_malloc / cudacache_free). That interface gives PyTorch no statistics, snapshots or
empty_cache (with a pluggable allocator they raise "CUDAPluggableAllocator does not yet
support ..." or do nothing), so install() also replaces those torch.cuda functions with
cudacache's (PATCHED_FUNCTIONS); patch=False or CUDACACHE_TORCH_PATCH=0 leaves torch alone.

Out of memory. The pluggable C ABI has no way to raise: cudacache_malloc returns NULL, and
PyTorch does not check it (torch/csrc/cuda/CUDAPluggableAllocator.cpp). The allocation
"succeeds" with a tensor whose storage pointer is 0 (no exception, num_ooms grows,
cudacache_last_error() holds the allocator's message); the first kernel that touches that tensor
is expected to fail with "an illegal memory access was encountered", after which the process's
CUDA context is unusable. To get an exception instead:

    with cudacache.torch.raise_on_oom():   # raises cudacache.torch.OutOfMemoryError
        x = torch.empty(n, device="cuda")  # before anything reads or writes x

or check_allocation(tensor) right after an allocation. cudacache.torch.OutOfMemoryError is a
subclass of both torch.OutOfMemoryError and cudacache.OutOfMemoryError, so existing
`except torch.OutOfMemoryError` handlers catch it. convert_oom(error) turns a RuntimeError
that PyTorch raised for an out-of-memory into it, with the allocator's message.

The libtorch shim. When libcudacache_torch.so (torch_shim/, built when CMake finds PyTorch)
is available, install() registers its cudacache_torch_malloc / cudacache_torch_free instead,
and then its C++ hooks. Out of memory is then a real torch.OutOfMemoryError raised by PyTorch
itself, with cudacache's message (no raise_on_oom() needed), and torch.cuda.empty_cache() and
Tensor.record_stream() reach cudacache even with patch=False. install(shim=...) and
CUDACACHE_TORCH_SHIM choose (see install()); shim_path() tells which shim is in use. Without
the shim, everything above applies unchanged.

Importing this module does not import torch; every function imports it when called.
"""

import contextlib
import ctypes
import os
import pathlib
import sys
import threading
import warnings

from . import _library, _memory, _snapshot
from ._errors import CudacacheError
from ._errors import OutOfMemoryError as _CudacacheOutOfMemoryError

ALLOC_SYMBOL = "cudacache_malloc"
FREE_SYMBOL = "cudacache_free"
ENV_PATCH = "CUDACACHE_TORCH_PATCH"
SHIM_LIBRARY_NAME = "libcudacache_torch.so"
SHIM_ALLOC_SYMBOL = "cudacache_torch_malloc"
SHIM_FREE_SYMBOL = "cudacache_torch_free"
ENV_SHIM = "CUDACACHE_TORCH_SHIM"

TOO_LATE_MESSAGE = (
    "cudacache.torch.install() must run before PyTorch initializes CUDA (before the first CUDA "
    "tensor, torch.cuda.current_device(), torch.cuda.memory_reserved(), ...): PyTorch's own "
    "allocator is already initialized and PyTorch cannot swap an initialized allocator. Call "
    "install() right after `import torch`, at the top of the program.")

# Functions replaced by install(patch=True), present under these names in both torch.cuda and
# torch.cuda.memory. The rest of torch.cuda (memory_summary, memory_cached, ...) calls these
# through the torch.cuda.memory module and so answers from cudacache too.
PATCHED_FUNCTIONS = (
    "memory_allocated",
    "memory_reserved",
    "max_memory_allocated",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "empty_cache",
    "memory_snapshot",
)
# Replaced in torch.cuda.memory only (private there, absent from torch.cuda).
PATCHED_PRIVATE_FUNCTIONS = ("_snapshot", "_dump_snapshot", "_record_memory_history")
# torch.Tensor.record_stream is wrapped: PyTorch's pluggable allocator drops record_stream
# (it has no hook for it), so without this a block used on a second stream could be reused
# while that stream still works on it.


class InstallError(CudacacheError):
    """install() cannot register cudacache with this PyTorch process."""


_lock = threading.RLock()
_allocator = None  # the CUDAPluggableAllocator registered by install()
_shim = None  # the _Shim whose functions install() registered, or None
_shim_hooks = False  # its empty_cache / record_stream hooks are set
_patches = {}  # (module or class, name) -> original attribute, or _INHERITED
_INHERITED = object()
_out_of_memory_error_class = None


def _import_torch():
    try:
        import torch
    except ImportError as error:
        raise ImportError("cudacache.torch needs PyTorch 2.x (import torch failed)") from error
    return torch


def _cuda_initialized(torch):
    # PyTorch initializes its caching allocator while it initializes CUDA (torch.cuda._lazy_init),
    # which every CUDA tensor, stream or stats query triggers.
    return bool(torch.cuda.is_initialized())


def install(conf=None, patch=True, shim=None):
    """Makes cudacache PyTorch's CUDA allocator; call it before the first CUDA tensor.

    conf: a configuration string applied first ("max_split_size_mb:128,..."), or None.
    patch: also make torch.cuda's memory functions answer from cudacache (see
    PATCHED_FUNCTIONS); the environment variable CUDACACHE_TORCH_PATCH=0 turns it off too.
    shim: use the libtorch shim libcudacache_torch.so (typed out-of-memory, empty_cache and
    record_stream hooks). None (default): when it is found and usable, else without it
    (a warning says why a shim that was found is not used). True: required (InstallError
    without it). False: never. A path: that file, required. With shim=None, the environment
    variable CUDACACHE_TORCH_SHIM decides the same way: 0/off, 1/on, or a path. The shim is
    looked for next to libcudacache.so and in the build tree (<build>/torch_shim/).

    Returns the torch.cuda.memory.CUDAPluggableAllocator. Calling it again is a no-op (it
    applies the patches if they were not applied). Raises InstallError when CUDA is already
    initialized or a required shim cannot be used, LibraryNotFoundError when libcudacache.so
    is not found, ValueError for a bad conf.
    """
    torch = _import_torch()
    global _allocator, _shim, _shim_hooks
    with _lock:
        if _allocator is None:
            memory = torch.cuda.memory
            missing = [name for name in ("CUDAPluggableAllocator", "change_current_allocator")
                       if not hasattr(memory, name)]
            if missing:
                raise InstallError(
                    f"torch {getattr(torch, '__version__', '?')} has no torch.cuda.memory."
                    f"{', '.join(missing)}: cudacache needs PyTorch 2.0 or newer")
            if _cuda_initialized(torch):
                raise InstallError(TOO_LATE_MESSAGE)
            library = _library.get()
            if conf is not None:
                _memory.configure(conf)
            chosen = _find_shim(torch, library, shim)
            if chosen is not None:
                path, alloc_symbol, free_symbol = chosen.path, SHIM_ALLOC_SYMBOL, SHIM_FREE_SYMBOL
            else:
                path, alloc_symbol, free_symbol = library.path, ALLOC_SYMBOL, FREE_SYMBOL
            allocator = memory.CUDAPluggableAllocator(str(path), alloc_symbol, free_symbol)
            try:
                memory.change_current_allocator(allocator)
            except RuntimeError as error:
                if "already initialized" in str(error):
                    raise InstallError(TOO_LATE_MESSAGE) from error
                raise
            _allocator = allocator
            _shim = chosen
            if chosen is not None:
                error = chosen.register_hooks()
                _shim_hooks = error is None
                if error is not None:
                    message = (f"cudacache.torch: {chosen.path} is PyTorch's allocator, but its "
                               f"empty_cache/record_stream hooks could not be set: {error}")
                    if chosen.required:
                        raise InstallError(message)
                    warnings.warn(message, RuntimeWarning, stacklevel=2)
        elif conf is not None:
            _memory.configure(conf)  # fails (CUDACACHE_CONFIG) once memory was allocated
        if patch and os.environ.get(ENV_PATCH, "1") != "0":
            apply_patches()
        return _allocator


def shim_path():
    """The libcudacache_torch.so that install() registered, or None (plain C ABI)."""
    return None if _shim is None else _shim.path


def shim_hooks_registered():
    """True when PyTorch's empty_cache and record_stream reach cudacache through the shim."""
    return _shim_hooks


class _Shim:
    """A loaded libcudacache_torch.so, checked against this process."""

    def __init__(self, path, required):
        self.path = path
        self.required = required
        self.cdll = ctypes.CDLL(str(path))
        for name in (SHIM_ALLOC_SYMBOL, SHIM_FREE_SYMBOL):
            getattr(self.cdll, name)  # AttributeError: not a cudacache shim
        self.cdll.cudacache_torch_register_hooks.restype = ctypes.c_int
        self.cdll.cudacache_torch_register_hooks.argtypes = []
        self.cdll.cudacache_torch_last_error.restype = ctypes.c_char_p
        self.cdll.cudacache_torch_last_error.argtypes = []
        self.cdll.cudacache_torch_built_for.restype = ctypes.c_char_p
        self.cdll.cudacache_torch_built_for.argtypes = []
        self.cdll.cudacache_torch_backend.restype = ctypes.c_void_p
        self.cdll.cudacache_torch_backend.argtypes = []
        self.built_for = self.cdll.cudacache_torch_built_for().decode()

    def backend(self):
        return self.cdll.cudacache_torch_backend()

    def register_hooks(self):
        """None, or why the hooks could not be set."""
        if self.cdll.cudacache_torch_register_hooks() == 0:
            return None
        return (self.cdll.cudacache_torch_last_error() or b"unknown error").decode(
            errors="replace")


def _shim_request(shim, environ=None):
    """(required, explicit path or None), or None for no shim, from install()'s shim argument
    and CUDACACHE_TORCH_SHIM."""
    if shim is False:
        return None
    if shim is not None and shim is not True:
        return True, pathlib.Path(shim)
    environ = os.environ if environ is None else environ
    value = environ.get(ENV_SHIM, "").strip()
    lowered = value.lower()
    if lowered in ("0", "off", "no", "false"):
        return None if shim is None else (True, None)
    if lowered in ("", "auto"):
        return shim is True, None
    if lowered in ("1", "on", "yes", "true"):
        return True, None
    return True, pathlib.Path(value)


def shim_candidates(library_path):
    """Where install() looks for the shim, given the libcudacache.so in use: next to it (an
    install), then <build>/torch_shim/ for <build>/allocator/libcudacache.so."""
    directory = pathlib.Path(library_path).parent
    return [directory / SHIM_LIBRARY_NAME, directory.parent / "torch_shim" / SHIM_LIBRARY_NAME]


def _mapped_files():
    try:
        with open("/proc/self/maps") as maps:
            return {line.split()[5] for line in maps if len(line.split()) >= 6}
    except OSError:
        return set()


def _find_shim(torch, library, shim):
    """The _Shim to register, or None; raises InstallError when a required one is unusable."""
    request = _shim_request(shim)
    if request is None:
        return None
    required, explicit = request
    candidates = [explicit] if explicit is not None else shim_candidates(library.path)
    found = [path for path in candidates if path.is_file()]
    problems = []

    def fail(text, quiet=False):
        if required:
            raise InstallError(f"cudacache.torch: the libtorch shim is required but {text}")
        if found and not quiet:  # a shim exists but cannot be used: say so
            warnings.warn(f"cudacache.torch: not using the libtorch shim: {text}",
                          RuntimeWarning, stacklevel=3)
        return None

    if not found:
        return fail("it was not found (looked for "
                    + ", ".join(str(path) for path in candidates) + "); build it with "
                    "CMake (torch_shim/, built when PyTorch is found) or set " + ENV_SHIM)
    # The shim links libtorch_cuda by SONAME: only load it into a process whose torch already
    # loaded its CUDA library (not a CPU-only torch, nor a stand-in), so that it binds to it.
    if not any(os.path.basename(name).startswith("libtorch_cuda.so") for name in _mapped_files()):
        return fail(f"torch {getattr(torch, '__version__', '?')} has no libtorch_cuda.so "
                    "loaded (a CPU-only build?)", quiet=True)
    torch_version = str(getattr(torch, "__version__", "")).split("+")[0]
    for path in found:
        try:
            candidate = _Shim(path.resolve(), required)
        except (OSError, AttributeError) as error:
            problems.append(f"{path}: cannot load it: {error}")
            continue
        if candidate.built_for.split(".")[:2] != torch_version.split(".")[:2]:
            problems.append(f"{path} was built for PyTorch {candidate.built_for}, this is "
                            f"{torch_version}")
            continue
        ours = ctypes.cast(library.cdll.cudacache_malloc, ctypes.c_void_p).value
        if candidate.backend() != ours:
            problems.append(f"{path} uses another libcudacache than {library.path}")
            continue
        return candidate
    return fail("; ".join(problems))


def is_installed():
    """True once install() has registered cudacache with PyTorch in this process."""
    return _allocator is not None


def _replacements():
    def memory_snapshot(mempool_id=None, include_traces=True):
        if mempool_id is not None:
            raise CudacacheError("cudacache has no private memory pools (mempool_id)")
        return _snapshot.memory_snapshot()

    def snapshot_all(device=None, augment_with_fx_traces=False):
        return _snapshot.snapshot()

    def dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
        _snapshot.dump_snapshot(filename)

    def record_memory_history(enabled="all", context="all", stacks="all",
                              max_entries=sys.maxsize, device=None, **_ignored):
        # No Python stacks are recorded (context/stacks are accepted and ignored). PyTorch 2.0's
        # form passed a bool and trace_alloc_max_entries.
        max_entries = _ignored.get("trace_alloc_max_entries", max_entries)
        entries = min(max_entries, _snapshot.MAX_HISTORY_ENTRIES) if enabled else 0
        _snapshot.record_history(entries, device)

    functions = {
        "memory_allocated": _memory.memory_allocated,
        "memory_reserved": _memory.memory_reserved,
        "max_memory_allocated": _memory.max_memory_allocated,
        "max_memory_reserved": _memory.max_memory_reserved,
        "reset_peak_memory_stats": _memory.reset_peak_memory_stats,
        "reset_accumulated_memory_stats": _memory.reset_accumulated_memory_stats,
        "memory_stats": _memory.memory_stats,
        "memory_stats_as_nested_dict": memory_stats_as_nested_dict,
        "empty_cache": _memory.empty_cache,
        "memory_snapshot": memory_snapshot,
        "_snapshot": snapshot_all,
        "_dump_snapshot": dump_snapshot,
        "_record_memory_history": record_memory_history,
    }
    wrapped = {}
    for name, function in functions.items():
        # A distinct function object per patch, marked, so uninstall_patches() can tell ours.
        def patched(*args, _function=function, **kwargs):
            return _function(*args, **kwargs)

        patched.__name__ = patched.__qualname__ = name
        patched.__doc__ = f"cudacache replacement of torch.cuda {name}.\n\n{function.__doc__}"
        patched.__wrapped__ = function
        patched._cudacache_patch = True
        wrapped[name] = patched
    return wrapped


def memory_stats_as_nested_dict(device=None):
    """memory_stats() nested on its dots, like torch.cuda.memory_stats_as_nested_dict()."""
    nested = {}
    for key, value in _memory.memory_stats(device).items():
        *parents, leaf = key.split(".")
        node = nested
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return nested


def apply_patches():
    """Makes torch.cuda's memory functions answer from cudacache. Idempotent."""
    torch = _import_torch()
    replacements = _replacements()
    targets = [(torch.cuda, name) for name in PATCHED_FUNCTIONS]
    targets += [(torch.cuda.memory, name) for name in PATCHED_FUNCTIONS]
    targets += [(torch.cuda.memory, name) for name in PATCHED_PRIVATE_FUNCTIONS]
    with _lock:
        for module, name in targets:
            if (module, name) in _patches or not hasattr(module, name):
                continue
            _patches[(module, name)] = getattr(module, name)
            setattr(module, name, replacements[name])
        tensor = getattr(torch, "Tensor", None)
        # With the shim's hooks PyTorch's own record_stream reaches cudacache.
        if tensor is not None and (tensor, "record_stream") not in _patches \
                and hasattr(tensor, "record_stream") and not _shim_hooks:
            # Inherited from torch._C.TensorBase: restored by deleting our override.
            _patches[(tensor, "record_stream")] = tensor.__dict__.get("record_stream", _INHERITED)
            tensor.record_stream = _record_stream_patch(tensor.record_stream)


def _record_stream_patch(original):
    def record_stream(self, stream):
        original(self, stream)
        storage = self.untyped_storage()
        if storage.data_ptr():
            _memory.record_stream(storage.data_ptr(), stream)

    record_stream.__doc__ = (
        "cudacache: Tensor.record_stream, also told to cudacache (PyTorch's pluggable "
        f"allocator ignores it).\n\n{original.__doc__ or ''}")
    record_stream.__wrapped__ = original
    record_stream._cudacache_patch = True
    return record_stream


def uninstall_patches():
    """Restores the torch.cuda functions apply_patches() replaced.

    A function that someone else replaced after us is left as it is. The allocator itself stays
    cudacache: PyTorch cannot swap an allocator once CUDA is initialized.
    """
    with _lock:
        for (owner, name), original in list(_patches.items()):
            if getattr(getattr(owner, name, None), "_cudacache_patch", False):
                if original is _INHERITED:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)
            del _patches[(owner, name)]


def patched_functions():
    """The (module or class name, function name) pairs currently patched."""
    with _lock:
        return sorted((getattr(owner, "__module__", "") + "." + owner.__name__
                       if isinstance(owner, type) else owner.__name__, name)
                      for owner, name in _patches)


def _make_out_of_memory_error_class():
    torch = _import_torch()
    base = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError

    class OutOfMemoryError(base, _CudacacheOutOfMemoryError):
        """cudacache ran out of device memory; both torch.OutOfMemoryError and
        cudacache.OutOfMemoryError."""

    OutOfMemoryError.__module__ = __name__
    return OutOfMemoryError


def __getattr__(name):
    # OutOfMemoryError subclasses torch.OutOfMemoryError, so it exists once torch is imported.
    global _out_of_memory_error_class
    if name == "OutOfMemoryError":
        with _lock:
            if _out_of_memory_error_class is None:
                _out_of_memory_error_class = _make_out_of_memory_error_class()
        return _out_of_memory_error_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def oom_count():
    """num_ooms summed over every device: how many allocations cudacache has failed."""
    return sum(_memory.memory_stats(device).get("num_ooms", 0)
               for device in range(max(_snapshot.device_count(), 1)))


def _out_of_memory_error(detail=None):
    error_class = __getattr__("OutOfMemoryError")
    message = _memory.last_error() or "CUDA out of memory (cudacache)"
    if detail and detail not in message:
        message = f"{message} (PyTorch reported: {detail})"
    return error_class(message)


def convert_oom(error, oom_count_before=None):
    """The cudacache.torch.OutOfMemoryError that `error` stands for, or `error` itself.

    `error` is an exception PyTorch raised. It is converted when its message says "out of
    memory", or when oom_count_before (an earlier oom_count()) shows that cudacache failed an
    allocation since. The new error's message is cudacache_last_error() of this thread (the
    allocator's own report: sizes, reserved and free memory), and its __cause__ is `error`.
    An error that is already an OutOfMemoryError comes back unchanged.
    """
    error_class = __getattr__("OutOfMemoryError")
    if isinstance(error, error_class):
        return error
    said_so = "out of memory" in str(error).lower()
    counted = oom_count_before is not None and oom_count() > oom_count_before
    if not (said_so or counted):
        return error
    converted = _out_of_memory_error(str(error))
    converted.__cause__ = error
    return converted


@contextlib.contextmanager
def raise_on_oom():
    """Raises cudacache.torch.OutOfMemoryError if cudacache failed an allocation in the block.

    Without it, an out-of-memory under the pluggable ABI is silent (a tensor with a NULL
    pointer). Keep the block to the allocations themselves: a kernel that touches a NULL tensor
    inside the block breaks the CUDA context before the check at the end of the block runs.
    A RuntimeError raised in the block is converted with convert_oom().
    """
    before = oom_count()
    try:
        yield
    except RuntimeError as error:
        converted = convert_oom(error, before)
        if converted is error:
            raise
        raise converted from error
    if oom_count() > before:
        raise _out_of_memory_error()


def check_allocation(tensor):
    """Returns `tensor`, or raises OutOfMemoryError if its storage got a NULL pointer.

    Call it right after creating a CUDA tensor: under the pluggable ABI a failed allocation
    returns a tensor whose storage pointer is 0 instead of raising.
    """
    storage = tensor.untyped_storage()
    if storage.nbytes() > 0 and storage.data_ptr() == 0:
        raise _out_of_memory_error()
    return tensor
