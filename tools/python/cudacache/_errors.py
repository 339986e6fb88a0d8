"""Exception types of the cudacache Python package."""


class CudacacheError(RuntimeError):
    """An error reported by libcudacache or by this package."""


class LibraryNotFoundError(CudacacheError):
    """libcudacache.so could not be found or loaded.

    ``searched`` lists every path that was tried, in order, each with the reason it was
    rejected.
    """

    def __init__(self, message, searched=()):
        super().__init__(message)
        self.searched = list(searched)


class ConfigurationError(CudacacheError, ValueError):
    """A configuration string was rejected: unknown key, bad value, or given after the first
    allocation (the message says which)."""


class OutOfMemoryError(CudacacheError):
    """The allocator could not satisfy a request.

    ``size`` is the requested number of bytes and ``device`` the device index when known
    (``None`` otherwise). The message is the allocator's own (``cudacache_last_error()``).
    """

    def __init__(self, message, size=None, device=None):
        super().__init__(message)
        self.size = size
        self.device = device
