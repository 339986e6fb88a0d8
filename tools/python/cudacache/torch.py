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

PYTORCH_CUDA_ALLOC_CONF. With a pluggable allocator PyTorch's own caching allocator, which
reads that variable, does not run; install() therefore reads it (PYTORCH_ALLOC_CONF when it is
unset, as PyTorch 2.15 does) and passes the keys cudacache implements with PyTorch's meaning
(PYTORCH_CONF_PASSED) to cudacache.configure(), unless CUDACACHE_CONF, an earlier
cudacache.configure() or install(conf=...) sets the same key. See apply_pytorch_alloc_conf().

Importing this module does not import torch; every function imports it when called.
"""

import contextlib
import ctypes
import os
import pathlib
import sys
import threading
import warnings

from . import _growth, _library, _memory, _snapshot
from ._errors import ConfigurationError, CudacacheError
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


# PYTORCH_CUDA_ALLOC_CONF, as PyTorch 2.15 reads it for CUDA: the first variable that is set.
PYTORCH_CONF_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
ENV_CUDACACHE_CONF = "CUDACACHE_CONF"
# Its keys that cudacache's options implement with PyTorch's meaning: install() passes them on.
PYTORCH_CONF_PASSED = ("max_split_size_mb", "roundup_power2_divisions",
                       "garbage_collection_threshold", "expandable_segments",
                       "per_process_memory_fraction")
# Settings of PyTorch's pinned host memory allocator, which stays PyTorch's and keeps applying
# them: not cudacache's business, so they pass without a word.
PYTORCH_CONF_HOST = ("pinned_use_cuda_host_register", "pinned_use_hip_host_register",
                     "pinned_num_register_threads", "pinned_use_background_threads",
                     "pinned_reserve_segment_size_mb", "pinned_free_catch_all",
                     "pinned_max_round_threshold_mb", "pinned_max_cached_size_mb")
# Settings of PyTorch's device allocator that cudacache has no equivalent for: a warning each.
PYTORCH_CONF_NOT_HONOURED = {
    "max_non_split_rounding_mb": "a rule of PyTorch's native block search (how much larger "
                                 "than the request an unsplit cached block may be)",
    "large_segment_size_mb": "the segment size of PyTorch's native allocator (cudacache sizes "
                             "its own segments and pages)",
    "release_lock_on_cudamalloc": "a locking detail of PyTorch's native allocator",
    "release_lock_on_hipmalloc": "a locking detail of PyTorch's native allocator",
    "graph_capture_record_stream_reuse": "about the memory pools of CUDA graph capture, "
                                         "which cudacache does not provide",
    "throw_on_cudamalloc_oom": "a pre-check of PyTorch's native allocator before cudaMalloc",
    "expandable_segments_reserve": "the virtual-address reserve of PyTorch's expandable "
                                   "segments (cudacache reserves its own ranges)",
    "expandable_segments_reserve_by_class": "the virtual-address reserve of PyTorch's "
                                            "expandable segments (cudacache reserves its own "
                                            "ranges)",
}
PYTORCH_CONF_KEYS = (PYTORCH_CONF_PASSED + PYTORCH_CONF_HOST + tuple(PYTORCH_CONF_NOT_HONOURED)
                     + ("backend",))
# cudacache's own options that PyTorch does not know (PyTorch rejects them in its variable).
CUDACACHE_ONLY_KEYS = ("policy", "record_history", "record_stacks", "detect_growth",
                       "max_page_size_mb", "cut_pages", "publish_stats")


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
    PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF) is honoured too: its keys that cudacache
    implements (PYTORCH_CONF_PASSED) are applied unless conf, CUDACACHE_CONF or an earlier
    cudacache.configure() sets them; PyTorch keys cudacache cannot honour warn; an unknown key
    is a ConfigurationError and backend:cudaMallocAsync an InstallError, raised before anything
    changes (see apply_pytorch_alloc_conf()). Only the first install() reads it.
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
    is not found, ValueError (ConfigurationError) for a bad conf or PYTORCH_CUDA_ALLOC_CONF.
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
            # Checks PYTORCH_CUDA_ALLOC_CONF and applies it with `conf` (nothing is changed
            # when either is refused).
            apply_pytorch_alloc_conf(conf, torch=torch, _stacklevel=3)
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


def _split_entries(text):
    """The "key:value" entries of a configuration string, split at the commas outside [...]."""
    entries, depth, start = [], 0, 0
    for i, character in enumerate(text + ","):
        if character == "[":
            depth += 1
        elif character == "]":
            depth -= 1
        elif character == "," and depth <= 0:
            entries.append(text[start:i].strip())
            start = i + 1
    return entries


def _configured_keys(text):
    """{key: value} of a cudacache configuration string (malformed entries are left out: the
    allocator reports them)."""
    keys = {}
    for entry in _split_entries(text or ""):
        key, colon, value = entry.partition(":")
        if colon:
            keys[key.strip()] = value.strip()
    return keys


def pytorch_alloc_conf(environ=None):
    """(variable name, value) of the PyTorch allocator configuration in `environ` (default
    os.environ): PYTORCH_CUDA_ALLOC_CONF, or PYTORCH_ALLOC_CONF when that is unset, as PyTorch
    2.15 reads them for CUDA; (None, None) when neither is set."""
    environ = os.environ if environ is None else environ
    for name in PYTORCH_CONF_VARIABLES:
        if name in environ:
            return name, environ[name]
    return None, None


class PyTorchConfPlan:
    """What install() does with a PYTORCH_CUDA_ALLOC_CONF value (see plan_pytorch_alloc_conf).

    variable, value: where it came from. passed: the (key, value) pairs given to cudacache.
    overridden: {key: where it is set instead} for PyTorch keys a cudacache setting overrides.
    conflicts: {key: where}: expandable_segments:True dropped because a cudacache setting
    selects policy:cudacache (warned about). not_honoured: {key: why} for PyTorch keys
    cudacache cannot honour (warned about). host: the pinned host memory keys, left to
    PyTorch. backend: the value of `backend`, or None.
    """

    def __init__(self, variable, value):
        self.variable = variable
        self.value = value
        self.passed = []
        self.overridden = {}
        self.conflicts = {}
        self.not_honoured = {}
        self.host = []
        self.backend = None

    def cudacache_conf(self):
        """The configuration string for cudacache.configure() ('' when nothing is passed)."""
        return ",".join(f"{key}:{value}" for key, value in self.passed)

    def warnings(self):
        """One message per key that has no effect on cudacache although PyTorch's own
        allocator would have applied it."""
        messages = []
        for key, why in self.not_honoured.items():
            messages.append(
                f"cudacache.torch: {self.variable} key '{key}' is ignored: it is {why}, which "
                "cudacache, PyTorch's allocator now, does not have")
        for key, where in self.conflicts.items():
            messages.append(
                f"cudacache.torch: {self.variable} key '{key}' is ignored: {where} sets "
                "cudacache's policy:cudacache, which takes precedence and cannot be combined "
                "with PyTorch's expandable segments (those are policy:pytorch,"
                "expandable_segments:True)")
        return messages


def plan_pytorch_alloc_conf(variable, value, overrides=None):
    """Checks a PyTorch allocator configuration value and sorts its keys; changes nothing.

    `overrides`: {key: (value, where)} of cudacache settings that take precedence (CUDACACHE_CONF,
    cudacache.configure(), install(conf=...)); a PyTorch key set there is not passed. Raises
    ConfigurationError (a ValueError) naming the key for an unknown key, a cudacache-only key
    (PyTorch rejects those: they belong in CUDACACHE_CONF), a malformed entry or an unknown
    backend, and InstallError for backend:cudaMallocAsync (PyTorch's other allocator, which
    install() would replace).
    """
    plan = PyTorchConfPlan(variable, value)
    overrides = overrides or {}
    # PyTorch's tokenizer drops whitespace anywhere.
    compact = "".join(value.split())
    for entry in _split_entries(compact):
        if not entry:
            continue  # "a:1," is accepted by PyTorch
        key, colon, item = entry.partition(":")
        if not colon or not key or not item:
            raise ConfigurationError(
                f"{variable}={value!r}: malformed entry '{entry}' (expected key:value)")
        if key in CUDACACHE_ONLY_KEYS:
            raise ConfigurationError(
                f"{variable}={value!r}: '{key}' is a cudacache option, not PyTorch's (PyTorch "
                f"rejects it there): set it in {ENV_CUDACACHE_CONF} or install(conf=...)")
        if key not in PYTORCH_CONF_KEYS:
            raise ConfigurationError(
                f"{variable}={value!r}: unknown key '{key}' (PyTorch 2.15 accepts "
                + ", ".join(PYTORCH_CONF_KEYS) + "; cudacache options go in "
                f"{ENV_CUDACACHE_CONF})")
        if key == "backend":
            if item == "cudaMallocAsync":
                raise InstallError(
                    f"{variable}={value!r} asks for PyTorch's cudaMallocAsync allocator, and "
                    "cudacache.torch.install() makes cudacache PyTorch's allocator: remove "
                    "backend:cudaMallocAsync to use cudacache, or do not call install()")
            if item != "native":
                raise ConfigurationError(
                    f"{variable}={value!r}: unknown backend '{item}' for key 'backend' "
                    "(PyTorch accepts native and cudaMallocAsync)")
            plan.backend = item  # native: PyTorch's caching allocator, replaced by cudacache
        elif key in PYTORCH_CONF_HOST:
            plan.host.append(key)
        elif key in PYTORCH_CONF_NOT_HONOURED:
            plan.not_honoured[key] = PYTORCH_CONF_NOT_HONOURED[key]
        elif key in overrides:
            plan.overridden[key] = overrides[key][1]
        elif (key == "expandable_segments" and item.lower() == "true"
              and overrides.get("policy", ("",))[0] == "cudacache"):
            plan.conflicts[key] = overrides["policy"][1]
        else:
            plan.passed = [(k, v) for k, v in plan.passed if k != key] + [(key, item)]
    return plan


def _overrides(conf, environ=None):
    """{key: (value, where)} of the cudacache settings made so far and in `conf`."""
    environ = os.environ if environ is None else environ
    overrides = {}
    for key, item in _configured_keys(environ.get(ENV_CUDACACHE_CONF)).items():
        overrides[key] = (item, ENV_CUDACACHE_CONF)
    for text in _memory.configured:
        for key, item in _configured_keys(text).items():
            overrides[key] = (item, "cudacache.configure()")
    for key, item in _configured_keys(conf).items():
        overrides[key] = (item, "install(conf=...)")
    return overrides


def _pytorch_parse(torch, variable, value):
    """Lets PyTorch parse its allocator configuration now, while its own allocator is current.

    PyTorch parses it lazily, at the first use of a setting (pinned memory, ...). After the swap
    its check of `backend` compares the value with the current allocator's name, "pluggable",
    and fails an internal assert (backend:native included); parsed now, it matches. This also
    checks the values as PyTorch would at CUDA initialization. Torch builds without the
    function skip it.
    """
    torch_c = getattr(torch, "_C", None)
    setter = (getattr(torch_c, "_accelerator_setAllocatorSettings", None)
              or getattr(torch_c, "_cuda_cudaCachingAllocator_set_allocator_settings", None))
    if setter is None:
        return
    try:
        setter(value)
    except (RuntimeError, ValueError) as error:
        reason = (str(error).strip().splitlines() or ["?"])[0]
        raise ConfigurationError(f"{variable}={value!r}: PyTorch rejects it: {reason}") \
            from error


def apply_pytorch_alloc_conf(conf=None, torch=None, environ=None, _stacklevel=2):
    """What install() does with PYTORCH_CUDA_ALLOC_CONF and its `conf`, before registering.

    Reads the PyTorch variable (pytorch_alloc_conf()), checks it (plan_pytorch_alloc_conf():
    errors before anything changes), lets PyTorch parse it (see _pytorch_parse), and applies
    the passed keys and then `conf` with one cudacache.configure() call. Precedence, highest
    first: install(conf=...), cudacache.configure(), CUDACACHE_CONF, PYTORCH_CUDA_ALLOC_CONF.
    Warns (RuntimeWarning) once per key PyTorch would apply but cudacache cannot. Returns the
    PyTorchConfPlan, or None when no PyTorch variable is set (or it is blank).
    """
    if conf is not None and not isinstance(conf, str):
        _memory.configure(conf)  # raises its TypeError
    variable, value = pytorch_alloc_conf(environ)
    plan = None
    if variable is not None and value.strip():
        plan = plan_pytorch_alloc_conf(variable, value, _overrides(conf, environ))
        if torch is not None:
            _pytorch_parse(torch, variable, value)
    passed = plan.cudacache_conf() if plan is not None else ""
    if passed:
        combined = passed if not conf or not conf.strip() else f"{passed},{conf}"
        try:
            _memory.configure(combined)
        except ConfigurationError as error:
            raise ConfigurationError(
                f"{error} (from {variable}={value!r}, passed to cudacache as {passed!r}"
                + (f", with install(conf={conf!r})" if conf else "") + ")") from error
    elif conf is not None:
        _memory.configure(conf)
    if plan is not None:
        for message in plan.warnings():
            warnings.warn(message, RuntimeWarning, stacklevel=_stacklevel)
    return plan


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
        if not quiet:  # missing or unusable: without it, what the user loses is serious
            warnings.warn(f"cudacache.torch: not using the libtorch shim: {text}. Without it, "
                          "a CUDA allocation that runs out of memory gives a tensor whose "
                          "data_ptr() is 0 instead of raising torch.OutOfMemoryError, and "
                          "torch.cuda.empty_cache() / Tensor.record_stream() reach cudacache "
                          "only through install(patch=True). pip install . builds it against "
                          "the PyTorch of the Python that runs pip; install(shim=False) "
                          "silences this.", RuntimeWarning, stacklevel=3)
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

    def record_memory_history(enabled="all", *args, **kwargs):
        # PyTorch's two forms: a bool `enabled` is the legacy one (record_context,
        # trace_alloc_max_entries, ...), a string or None the current one (context, stacks,
        # max_entries, device, ...). Arguments cudacache has no use for are accepted.
        if isinstance(enabled, bool):
            entries, device, stacks = _legacy_history_arguments(enabled, *args, **kwargs)
        else:
            entries, device, stacks = _history_arguments(enabled, *args, **kwargs)
        entries = min(entries, _snapshot.MAX_HISTORY_ENTRIES) if enabled else 0
        _snapshot.record_history(entries, device, stacks=stacks if entries else None)

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


def _history_arguments(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                       device=None, *_unused, **_ignored):
    """(entries, device, stacks to record) of PyTorch's current form: frames are recorded
    unless context is None, Python ones for stacks="python", C++ and Python ones for "all"."""
    if stacks not in ("python", "all", "cpp"):
        raise ValueError(f"stacks must be 'python' or 'all' (or cudacache's 'cpp'), got {stacks!r}")
    return max_entries, device, stacks if context is not None else None


def _legacy_history_arguments(enabled, record_context=True, trace_alloc_max_entries=sys.maxsize,
                              trace_alloc_record_context=False, device=None,
                              record_context_cpp=False, *_unused, **_ignored):
    """The same for PyTorch's legacy form (`enabled` a bool): record_context records Python
    frames, record_context_cpp C++ ones too."""
    if record_context_cpp:
        stacks = "all"
    elif record_context or trace_alloc_record_context:
        stacks = "python"
    else:
        stacks = None
    return trace_alloc_max_entries, device, stacks


def watch_growth(iterable=None, steps=_growth.DEFAULT_STEPS, stacks="python", device=None):
    """cudacache.watch_growth() for a PyTorch program: names the lines of a training loop that
    keep memory alive step after step (`total_loss += loss`).

        for batch in cudacache.torch.watch_growth(loader):
            ...

    or `watch = cudacache.torch.watch_growth()` and `watch.step()` at the end of each step.
    Needs install(). See cudacache.watch_growth for the arguments.
    """
    if not is_installed():
        raise CudacacheError("cudacache.torch.watch_growth() needs cudacache.torch.install() "
                             "first: it watches cudacache's allocations")
    return _growth.watch_growth(iterable, steps=steps, stacks=stacks, device=device)


MemoryGrowthWarning = _growth.MemoryGrowthWarning


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
            # Memory cudacache did not allocate (a tensor from DLPack, from another allocator)
            # is left alone, as PyTorch's own allocator leaves pointers it does not own.
            _memory.record_stream(storage.data_ptr(), stream, ignore_foreign=True)

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
