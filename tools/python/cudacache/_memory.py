"""Statistics, cache control, configuration, retry hooks and raw allocation."""

import collections
import ctypes
import json
import operator
import sys
import threading
import types

from . import _library
from ._device import device_index
from ._errors import ConfigurationError, CudacacheError, OutOfMemoryError

# cudacache_status values (cudacache.h).
STATUS_OK = 0
STATUS_OUT_OF_MEMORY = 1
STATUS_UNKNOWN_POINTER = 4
STATUS_CONFIG = 5


def _check(lib, status, what):
    if status != STATUS_OK:
        raise CudacacheError(f"{what}: {lib.status_name(status)}: {lib.last_error()}")


def read_text(call):
    """Calls an snprintf-style `call(buffer, length) -> needed` and returns the text it wrote."""
    lib = _library.get()
    length = 1 << 14
    while True:
        buffer = ctypes.create_string_buffer(length)
        needed = call(buffer, length)
        if needed < 0:
            raise CudacacheError(lib.last_error() or "cudacache could not produce its document")
        if needed < length:
            return buffer.value.decode()
        length = needed + 1


def read_json(call):
    """Like read_text, and parses the JSON."""
    return json.loads(read_text(call))


def _stat(function, device):
    lib = _library.get()
    index = device_index(device)
    value = int(getattr(lib, function)(index))
    if value == 0:
        # 0 is also what the C function returns for a bad device; the stats document tells
        # the two apart (it raises, naming the device).
        read_text(lambda buffer, length: lib.cudacache_memory_stats_json(index, buffer, length))
    return value


def memory_allocated(device=None):
    """Bytes in blocks handed out now (rounded sizes): PyTorch's allocated_bytes.all.current."""
    return _stat("cudacache_memory_allocated", device)


def memory_reserved(device=None):
    """Bytes of device memory the allocator holds now: reserved_bytes.all.current."""
    return _stat("cudacache_memory_reserved", device)


def max_memory_allocated(device=None):
    """Peak of memory_allocated since start or the last reset_peak_memory_stats."""
    return _stat("cudacache_max_memory_allocated", device)


def max_memory_reserved(device=None):
    """Peak of memory_reserved since start or the last reset_peak_memory_stats."""
    return _stat("cudacache_max_memory_reserved", device)


def reset_peak_memory_stats(device=None):
    """Sets every peak statistic of the device to its current value."""
    lib = _library.get()
    _check(lib, lib.cudacache_reset_peak_memory_stats(device_index(device)),
           "cudacache_reset_peak_memory_stats")


def reset_accumulated_memory_stats(device=None):
    """Zeroes the accumulated statistics (".allocated", ".freed", num_alloc_retries, num_ooms)."""
    lib = _library.get()
    _check(lib, lib.cudacache_reset_accumulated_memory_stats(device_index(device)),
           "cudacache_reset_accumulated_memory_stats")


def _flatten(prefix, value, out):
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out.append((prefix, value))


def memory_stats(device=None):
    """PyTorch's memory_stats(): an OrderedDict of dotted keys, sorted as PyTorch sorts them."""
    lib = _library.get()
    index = device_index(device)
    stats = read_json(lambda buffer, length: lib.cudacache_memory_stats_json(index, buffer, length))
    items = []
    _flatten("", stats, items)
    items.sort()
    return collections.OrderedDict(items)


def empty_cache():
    """Returns every cached, unused segment of every device to CUDA."""
    _library.get().cudacache_empty_cache()


def configure(conf):
    """Applies a configuration string ("key:value,key:value") over CUDACACHE_CONF.

    Must run before cudacache is first used (any call that names a device, allocating or not).
    Raises ConfigurationError (a ValueError) for an unknown key or bad value (the message lists
    the valid keys) and when it is too late.
    """
    lib = _library.get()
    if not isinstance(conf, str):
        raise TypeError(f"configure() takes a string like 'max_split_size_mb:128', got {conf!r}")
    if "\0" in conf:  # C would read it only up to the NUL
        raise ConfigurationError(f"invalid cudacache configuration {conf!r}: it holds a NUL")
    status = lib.cudacache_configure(conf.encode())
    if status == STATUS_CONFIG:
        raise ConfigurationError(lib.last_error() or f"invalid cudacache configuration {conf!r}")
    _check(lib, status, "cudacache_configure")
    configured.append(conf)


# The strings configure() applied in this process, in order (cudacache.torch.install() reads
# them: keys set here take precedence over PYTORCH_CUDA_ALLOC_CONF).
configured = []


def config_help():
    """Every option with its default, effective value and documentation."""
    return _library.get().cudacache_config_help().decode()


def last_error():
    """The message of the last failure of the calling thread ('' when there was none)."""
    return _library.get().last_error()


_hooks_lock = threading.Lock()
_hooks = {}  # handle -> (Python callable, ctypes callback kept alive while registered)
_removing = set()  # handles whose removal is under way (remove_retry_hook)


class OomContext:
    """What a retry hook is told: a copy of cudacache_oom_context."""

    __slots__ = ("device", "round", "requested_bytes", "allocated_bytes", "reserved_bytes",
                 "device_free_bytes", "device_total_bytes")

    def __init__(self, context):
        for name in self.__slots__:
            setattr(self, name, int(getattr(context, name)))

    def __repr__(self):
        fields = ", ".join(f"{name}={getattr(self, name)}" for name in self.__slots__)
        return f"OomContext({fields})"


def add_retry_hook(fn):
    """Registers fn(context) -> bool, run when an allocation fails after the cache was released.

    `context` is an OomContext (device, round, requested_bytes, allocated_bytes,
    reserved_bytes, device_free_bytes, device_total_bytes). A true result asks for another
    attempt (fn should have freed something); at most CUDACACHE_MAX_RETRY_ROUNDS rounds run.
    Hooks run without any cudacache lock held. An exception raised by fn counts as False and
    is reported through sys.unraisablehook. Returns a handle for remove_retry_hook.
    """
    if not callable(fn):
        raise TypeError(f"retry hook must be callable, got {fn!r}")
    lib = _library.get()

    def trampoline(context_pointer):
        try:
            return bool(fn(OomContext(context_pointer.contents)))
        except BaseException as error:  # nothing may propagate into C
            sys.unraisablehook(types.SimpleNamespace(
                exc_type=type(error), exc_value=error, exc_traceback=error.__traceback__,
                err_msg="Exception ignored in cudacache retry hook", object=fn))
            return False

    callback = _library.RETRY_HOOK_FN(trampoline)
    with _hooks_lock:
        handle = lib.cudacache_register_retry_hook(callback, None)
        if handle <= 0:
            raise CudacacheError(f"cudacache_register_retry_hook failed: {lib.last_error()}")
        _hooks[handle] = (fn, callback)
    return handle


def remove_retry_hook(hook):
    """Unregisters a hook, given the handle add_retry_hook returned or the function itself.

    Raises KeyError when it is not registered.
    """
    lib = _library.get()
    with _hooks_lock:
        if isinstance(hook, int) and not isinstance(hook, bool):
            handle = hook
        else:
            handle = next((h for h, (fn, _) in _hooks.items()
                           if fn is hook and h not in _removing), None)
        if handle not in _hooks or handle in _removing:
            raise KeyError(f"{hook!r} is not a registered retry hook")
        _removing.add(handle)  # a second removal of it is a KeyError from now on
    # Outside the lock: the call waits for the hook's calls under way on other threads, whose
    # function may add or remove hooks in turn. The ctypes callback stays referenced in _hooks
    # until it returns, after which the library never calls it again.
    try:
        _check(lib, lib.cudacache_unregister_retry_hook(handle), "cudacache_unregister_retry_hook")
    finally:
        with _hooks_lock:
            _removing.discard(handle)
            _hooks.pop(handle, None)


def _integer(value, expected):
    """An int from anything that is one (numpy integers too), never from a bool or a float."""
    if isinstance(value, bool):
        raise TypeError(f"{expected}, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{expected}, got {value!r}") from None


def _bytes(value, what):
    """An int byte count the C API takes as is: ctypes masks a larger one (2**64 became 0)."""
    value = _integer(value, f"{what} must be an int")
    if value < 0 or value >= 2**63:
        raise ValueError(f"{what} must be between 0 and 2**63 - 1, got {value}")
    return value


def _stream_handle(stream):
    """A cudaStream_t as an int (0: the default stream); larger than a pointer is an error."""
    if stream is None:
        return 0
    stream = _integer(stream, "stream must be a cudaStream_t as an int")
    if stream < 0 or stream >= 2**64:
        raise ValueError(f"stream must be a cudaStream_t as an int, got {stream}")
    return stream


def raw_alloc(size, device=None, stream=0):
    """Allocates `size` bytes on `device` for use on `stream` (a cudaStream_t as an int).

    Returns the device address as an int (0 for size 0, like PyTorch). Raises OutOfMemoryError
    when memory runs out. Release it with raw_free(ptr).
    """
    lib = _library.get()
    index = device_index(device)
    size = _bytes(size, "size")
    out = ctypes.c_void_p()
    status = lib.cudacache_allocate(ctypes.byref(out), size, index, _stream_handle(stream))
    if status == STATUS_OUT_OF_MEMORY:
        raise OutOfMemoryError(lib.last_error() or f"out of memory allocating {size} bytes",
                               size=size, device=index if index >= 0 else None)
    _check(lib, status, "cudacache_allocate")
    return out.value or 0


def record_stream(ptr, stream, ignore_foreign=False):
    """Marks the block at `ptr` as used on `stream` too (cudacache_record_stream).

    When the block is freed, its memory is reused only after the work queued on `stream` by
    then has completed. `ptr` is the address cudacache returned (a tensor's
    untyped_storage().data_ptr()); `stream` a cudaStream_t as an int, or an object with a
    .cuda_stream (torch.cuda.Stream). With ignore_foreign, memory cudacache did not allocate
    is left alone, as PyTorch's allocator leaves it, instead of raising.
    """
    lib = _library.get()
    handle = _stream_handle(getattr(stream, "cuda_stream", stream))
    status = lib.cudacache_record_stream(ptr, handle)
    if ignore_foreign and status == STATUS_UNKNOWN_POINTER:
        return
    _check(lib, status, "cudacache_record_stream")


def raw_free(ptr):
    """Releases memory from raw_alloc (cudacache_deallocate); a bad pointer raises an error."""
    lib = _library.get()
    _check(lib, lib.cudacache_deallocate(ptr), "cudacache_deallocate")
