"""Device arguments: None (the current device), an int, "cuda"/"cuda:N", or a torch.device."""

import operator

# cudacache.h: a negative device means the calling thread's current device (cudaGetDevice),
# which is also what torch.cuda.current_device() returns.
CURRENT_DEVICE = -1


def device_index(device=None):
    """The device index for the C API; None and an index-less CUDA device give CURRENT_DEVICE."""
    if device is None:
        return CURRENT_DEVICE
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind != "cuda":
            raise ValueError(f"expected a CUDA device, got {device!r}")
        if not index:
            return CURRENT_DEVICE
        # Digits only: int() also takes " 0 ", "+0" and "1_0" (which is 10).
        if not (index.isascii() and index.isdigit()):
            raise ValueError(f"invalid device {device!r}: expected 'cuda' or 'cuda:N'")
        return _non_negative(int(index), device)
    if hasattr(device, "type") and hasattr(device, "index"):  # torch.device and look-alikes
        if device.type != "cuda":
            raise ValueError(f"expected a CUDA device, got {device!r}")
        return CURRENT_DEVICE if device.index is None else _non_negative(device.index, device)
    if isinstance(device, bool):
        raise TypeError(f"expected a device, got {device!r}")
    try:
        return _non_negative(operator.index(device), device)
    except TypeError:
        raise TypeError(f"expected None, an int, 'cuda:N' or a torch.device, got {device!r}") \
            from None


# The C API takes an int: a larger index would wrap (2**32 became device 0).
_MAX_DEVICE = 2**31 - 1


def _non_negative(index, original):
    if index < 0 or index > _MAX_DEVICE:
        raise ValueError(f"invalid device {original!r}")
    return int(index)
